"""The shipped flows when retention deletes the hot log under them: a scaffolded project with one second of
retention and tiny segments, three runs with more input each, a ``kill -9`` of the running e-commerce flow,
and ``shop_trends`` added only afterwards (it reads ``dwd.events`` from its start, most of it in the lake).
Every table of every flow, hot (``tidehouse query``) and lake (plain pyiceberg), equals its SQL in Spark batch
over the complete input."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._support import run_cli
from tests.examples._library import FLOW_ORDER, batch_results, rows_bag

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.reliability]
SETTINGS = "\nstorage:\n  retention: 1s\n  segment_bytes: 4096\n  fsync: false\n"


def _more_input(project_dir: Path, part: int, events: int) -> None:
    from runtime.scaffold.generate import (
        EventsConfig,
        OrdersConfig,
        orders_and_touches,
        shop_events,
        write_parts,
    )

    data = project_dir / "data"
    write_parts(
        shop_events(EventsConfig(seed=100 + part, events=events, malformed=1)),
        data / "events",
        2,
        first=100 * part,
    )
    orders, touches = orders_and_touches(
        OrdersConfig(seed=100 + part, orders=events // 8, touches=events // 5)
    )
    write_parts(orders, data / "orders", 1, first=100 * part)
    write_parts(touches, data / "touches", 1, first=100 * part)


def _kill_running_flow(project_dir: Path, flow: str) -> None:
    """`tidehouse flow trigger FLOW` as its own process group, killed -9 once retention trimmed under it."""
    from runtime.project import Project

    log_path = project_dir / "trigger.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from runtime.cli import run; run()",
                "flow",
                "trigger",
                flow,
                "--duration",
                "400",
            ],
            cwd=project_dir,
            env=dict(os.environ),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        project = Project.open(project_dir=project_dir)
        try:
            before = sum(project.store.end_offsets("dws.user_activity"))
            deadline = time.time() + 300
            while time.time() < deadline:
                assert proc.poll() is None, log_path.read_text(errors="replace")[-3000:]
                if (
                    sum(project.store.end_offsets("dws.user_activity")) > before
                    and min(project.store.start_offsets("dwd.events")) > 0
                ):
                    break
                time.sleep(0.5)
            else:
                raise AssertionError("the flow never caught up and trimmed: " + log_path.read_text()[-3000:])
        finally:
            project.close()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)


def test_shipped_flows_equal_batch_after_retention_and_a_kill_9(spark, tmp_path, monkeypatch):
    from runtime.project import Project

    monkeypatch.delenv("TIDEHOUSE_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("init", "shop", "--events", "800")
    assert code == 0, err
    project_dir = tmp_path / "shop"
    monkeypatch.chdir(project_dir)
    with open(project_dir / "tidehouse.yaml", "a") as fh:
        fh.write(SETTINGS)
    for flow in project_dir.glob("flows/*.yaml"):  # tier every second, so retention runs while flows run
        flow.write_text(re.sub(r"interval: \d+s", "interval: 1s", flow.read_text()))

    for flow in ("ecommerce_activity", "order_attribution"):  # run 1
        code, out, err = run_cli("flow", "trigger", f"flows/{flow}.yaml", "--until-idle")
        assert code == 0, out + err
    _more_input(project_dir, 1, 600)
    time.sleep(1.3)
    _kill_running_flow(project_dir, "ecommerce_activity")  # run 2, killed -9 mid-run
    _more_input(project_dir, 2, 600)
    time.sleep(1.3)
    for flow in (
        "ecommerce_activity",
        "order_attribution",
        "flows/shop_trends.yaml",
    ):  # run 3; shop_trends: new
        code, out, err = run_cli("flow", "trigger", flow, "--until-idle")
        assert code == 0, out + err

    project = Project.open()
    try:
        assert min(project.store.start_offsets("dwd.events")) > 0, "retention trimmed nothing"
        expected = batch_results(spark, project, FLOW_ORDER)
        for flow_name in FLOW_ORDER:
            for table, want in expected[flow_name].items():
                columns = want.column_names
                assert want.num_rows > 0, f"{table}: the input must exercise every table"
                hot = project.query(f"SELECT * FROM {table}")
                assert rows_bag(hot, columns) == rows_bag(want, columns), f"hot {table} differs from batch"
                lake = project.lake.load(table).scan().to_arrow()
                assert rows_bag(lake, columns) == rows_bag(want, columns), f"lake {table} differs from batch"
    finally:
        project.close()
