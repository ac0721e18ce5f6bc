"""kill -9 of a running `tidehouse flow trigger`, then `--until-idle`: every table equals the oracle."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import pytest

from tests._support import scale
from tests.materializer._flowkit import canon, make_events, oracle, write_batch, write_project
from tests.materializer._killkit import kill_9, trigger_process, wait_for, wait_for_first_aggregation

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.reliability]

TABLES = ["ods.clicks", "dwd.clicks", "dws.user_activity", "ads.low_users", "ads.top_users"]


def test_kill_9_mid_run_then_until_idle_is_exact(spark, project_dir, data_path, home, run_cli, seed):
    if data_path == "executors" and not scale(0, 1):
        pytest.skip(
            "the executor path's kill -9 runs in CI on a cluster (tests/cluster: worker and driver); "
            "TIDEHOUSE_SCALE=full kills it here too"
        )
    from runtime.storage import open_store

    rng = random.Random(seed)
    write_project(project_dir)
    lines = make_events(rng, 50)
    write_batch(project_dir, "part-0", lines)
    with trigger_process(project_dir, home) as proc:
        store = open_store(str(home / "hot"))
        wait_for_first_aggregation(store)
        more = make_events(rng, 40)
        write_batch(project_dir, "part-1", more)
        lines += more
        # while it runs: status reports it, and a second trigger is refused
        status_file = home / "run" / "testflow.status.json"
        wait_for(status_file.is_file, 30, "the status snapshot")
        code, out, err = run_cli("flow", "status", "testflow", "--json")
        assert code == 0, err
        assert json.loads(out)["running"] is True
        code, _, err = run_cli("flow", "trigger", "testflow", "--until-idle")
        assert code == 2 and "already running" in err
        time.sleep(rng.uniform(0.0, 3.0))
        kill_9(proc)
    code, out, err = run_cli("flow", "status", "testflow", "--json")  # a rate only while it runs
    assert code == 0 and json.loads(out)["running"] is False, err
    assert {t["rows_per_s"] for t in json.loads(out)["tables"]} == {None}, out
    code, out, err = run_cli("flow", "status", "testflow")
    assert code == 0 and out.splitlines()[3].split()[2] == "-", out  # ods.clicks: "-", not "0.0"
    last = make_events(rng, 30, bad=1)
    write_batch(project_dir, "part-2", last)
    lines += last
    _resume_then_oracle(spark, lines)


def _resume_then_oracle(spark, lines: list[str]) -> None:
    """An ``--until-idle`` run after the kill leaves every table, hot and lake, equal to the batch oracle over
    ``lines``, with no row twice."""
    from runtime.project import Project

    project = Project.open()
    try:
        project.trigger("testflow", until_idle=True, spark=spark)
        expected = oracle(lines)
        for table in TABLES:
            assert canon(project.store.scan(table)) == expected[table], f"hot {table}"
            assert canon(project.lake.load(table).scan().to_arrow()) == expected[table], f"lake {table}"
        good = sum(1 for line in lines if not line.startswith("{this"))
        assert project.store.scan("ods.clicks").num_rows == good  # no duplicates after the replay
        assert project.lake.load("ods.clicks").scan().to_arrow().num_rows == good
        assert sum(project.store.end_offsets("ods.clicks__quarantine")) == expected["ods.clicks__quarantine"]
    finally:
        project.close()


def _driver_jvm(pid: int) -> int:
    """The pid of the driver JVM (Spark's SparkSubmit) among the children of process ``pid``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"SparkSubmit" in cmdline:
            return int(entry.name)
    raise AssertionError(f"no driver JVM among the children of {pid}")


def test_a_driver_jvm_killed_mid_run_is_told_then_resumed_exactly(spark, project_dir, home, seed):
    """The kernel's out-of-memory killer takes the largest process: the driver JVM, not the tidehouse
    process. The run printed PySpark's accumulator-server traceback, a warning per query, and `internal
    error: ConnectionRefusedError [TH900]` (exit 1)."""
    from runtime.storage import open_store

    rng = random.Random(seed)
    write_project(project_dir)
    lines = make_events(rng, 50)
    write_batch(project_dir, "part-0", lines)
    with trigger_process(project_dir, home) as proc:
        wait_for_first_aggregation(open_store(str(home / "hot")))
        os.kill(_driver_jvm(proc.pid), signal.SIGKILL)
        assert proc.wait(timeout=120) == 2
    log = (project_dir.parent / "trigger.log").read_text(errors="replace")
    told = log[log.index("error: ") :] if "error: " in log else log[-3000:]
    assert told.startswith("error: Spark's driver JVM ended during the run (killed by signal 9; its last "), (
        told
    )
    assert f"{home / 'logs' / 'jvm.log'}" in told and told.rstrip().endswith("[TH400]"), told
    assert "Traceback" not in log and "ConnectionRefusedError" not in log and "WARNING" not in log, log
    status = json.loads((home / "run" / "testflow.status.json").read_text())  # it said "running"
    assert status["state"] == "failed" and {t["state"] for t in status["tables"]} == {"unknown"}, status
    _resume_then_oracle(spark, lines)
