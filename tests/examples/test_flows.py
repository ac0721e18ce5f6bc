"""The README's tour, run as written, and the correctness oracle for every shipped flow.

A module fixture runs the tour's ``tidehouse`` commands (extracted from README.md) in a fresh project made
by ``tidehouse init``, then triggers ``order_attribution`` the same way. Each test then checks a flow: every
table, hot (the store's current content) and lake (plain pyiceberg), equals the action's SQL evaluated in
Spark **batch** over the complete input — computed here from the registry's pinned action versions and the
raw source files, independently of the streaming path (``__`` columns and row order ignored).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from tests._support import run_cli
from tests.examples._library import FLOW_ORDER, REPO, batch_results, rows_bag

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _gen():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_gen", REPO / "docs" / "gen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tour_commands() -> list[str]:
    """The ``tidehouse ...`` lines of the README's tour, in order (``&& cd DIR`` kept as a step)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    tour = text[text.index("## Five-minute tour") :]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", tour, re.S):
        for line in block.splitlines():
            for part in line.split("&&"):
                part = part.strip()
                if part.startswith(("tidehouse ", "cd ")):
                    commands.append(part)
    return commands


cli = run_cli  # the real CLI, in-process


@pytest.fixture(scope="module")
def tour(spark, tmp_path_factory):
    """Run the tour in a temp dir; returns (project dir, {command: stdout})."""
    base = tmp_path_factory.mktemp("tour")
    old_cwd, old_home = os.getcwd(), os.environ.pop("TIDEHOUSE_HOME", None)
    outputs: dict[str, str] = {}
    os.chdir(base)
    try:
        for command in tour_commands():
            if command.startswith("cd "):
                os.chdir(command[3:].strip())
                continue
            args = shlex.split(command.replace("\\$", "$"))[1:]  # in bash, backslash-dollar is a plain dollar
            if args[:1] == ["init"]:
                args += ["--events", "1500"]  # a smaller sample than the default keeps the test short
            code, out, err = cli(*args)
            assert code == 0, f"`{command}` exited {code}:\n{out}\n{err}"
            outputs[command] = out
        project_dir = Path.cwd()
        for flow in ("shop_trends", "order_attribution"):
            code, out, err = cli("flow", "trigger", f"flows/{flow}.yaml", "--until-idle")
            assert code == 0, f"{flow}: {out}\n{err}"
        yield project_dir, outputs
    finally:
        os.chdir(old_cwd)
        if old_home is not None:
            os.environ["TIDEHOUSE_HOME"] = old_home


def test_tour_outputs(tour):
    _, outputs = tour
    registered = next(out for cmd, out in outputs.items() if cmd.startswith("tidehouse action register"))
    assert "clean_clicks@1" in registered and "top_n@1" in registered
    plan = next(out for cmd, out in outputs.items() if "--format mermaid" in cmd)
    assert plan.startswith("flowchart") and "ads_top_users" in plan
    page = REPO / "docs" / "architecture.md"
    text = page.read_text(encoding="utf-8")
    assert _gen().with_plans(text, {"ecommerce_activity": plan}) == text, (
        "docs/architecture.md shows a stale DAG: run python docs/gen.py --plan"
    )
    status = next(out for cmd, out in outputs.items() if cmd.startswith("tidehouse flow status"))
    for table in ("ods.events", "dwd.events", "dws.user_activity", "ads.top_users"):
        assert table in status
    top = next(out for cmd, out in outputs.items() if "FROM ads.top_users" in cmd)
    assert "(10 rows)" in top
    quarantine = next(out for cmd, out in outputs.items() if "__quarantine" in cmd)
    assert "(0 rows)" not in quarantine


# -- the oracle ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def expected(tour, spark):
    """table -> Arrow result of its action's SQL in Spark batch over the complete input, for every flow."""
    from runtime.project import Project

    project = Project.open(project_dir=tour[0])
    try:
        return batch_results(spark, project, FLOW_ORDER)
    finally:
        project.close()


@pytest.mark.parametrize("flow_name", FLOW_ORDER)
def test_every_table_hot_and_lake_equals_batch(tour, expected, flow_name):
    from runtime.project import Project

    project = Project.open(project_dir=tour[0])
    try:
        for table, want in expected[flow_name].items():
            columns = want.column_names
            assert want.num_rows > 0, f"{table}: the sample data must exercise every table"
            hot = project.store.scan(table)
            assert rows_bag(hot, columns) == rows_bag(want, columns), f"hot {table} differs from batch"
            lake = project.lake.load(table).scan().to_arrow()
            assert rows_bag(lake, columns) == rows_bag(want, columns), f"lake {table} differs from batch"
    finally:
        project.close()


def test_malformed_records_are_quarantined_not_lost(tour):
    from runtime.project import Project

    project_dir, _ = tour
    project = Project.open(project_dir=project_dir)
    try:
        for source, table in (("events", "ods.events"), ("orders", "ods.orders")):
            lines = [
                line
                for p in sorted((project_dir / "data" / source).glob("*.json"))
                for line in p.read_text().splitlines()
                if line.strip()
            ]
            good = project.store.scan(table).num_rows
            quarantined = project.store.scan(f"{table}__quarantine")
            assert quarantined.num_rows > 0
            assert good + quarantined.num_rows == len(lines), table
            assert all(r for r in quarantined.column("reason").to_pylist())
    finally:
        project.close()
