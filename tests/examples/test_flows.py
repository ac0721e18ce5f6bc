"""The README's tour, run as written, and the correctness oracle for every shipped flow.

A session fixture (``tour``, tests/examples/conftest.py) runs the tour's ``tidehouse`` commands (extracted
from README.md) in a fresh project made by ``tidehouse init``, then triggers ``shop_trends`` and
``order_attribution`` the same way; test_action_tests.py reads the report of its ``tidehouse test``. Each
test here then checks a flow: every table, hot (the store's current content) and lake (plain pyiceberg),
equals the action's SQL evaluated in Spark **batch** over the complete input — computed here from the
registry's pinned action versions and the raw source files, independently of the streaming path (``__``
columns and row order ignored).
"""

from __future__ import annotations

import pytest

from tests.examples._library import FLOW_ORDER, REPO, batch_results, rows_bag

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _gen():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_gen", REPO / "docs" / "gen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tour_outputs(tour):
    failed = {cmd: (code, tour.errors[cmd][-2000:]) for cmd, code in tour.codes.items() if code != 0}
    assert not failed, f"every command of the tour exits 0: {failed}"
    outputs = tour.outputs
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
    assert str(tour.project_dir.resolve() / "data" / "events") + "/" in quarantine  # each names its file


# -- the oracle ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def expected(tour, spark):
    """table -> Arrow result of its action's SQL in Spark batch over the complete input, for every flow."""
    with tour.inside():
        project = tour.open()
        try:
            return batch_results(spark, project, FLOW_ORDER)
        finally:
            project.close()


@pytest.mark.parametrize("flow_name", FLOW_ORDER)
def test_every_table_hot_and_lake_equals_batch(tour, expected, flow_name):
    with tour.inside():
        _check_hot_and_lake(tour, expected, flow_name)


def _check_hot_and_lake(tour, expected, flow_name):
    project = tour.open()
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
    with tour.inside() as project_dir:
        _check_quarantine(tour, project_dir)


def _check_quarantine(tour, project_dir):
    project = tour.open()
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
