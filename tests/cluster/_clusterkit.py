"""Running flows the way a cluster user does: ``tidehouse flow trigger`` in its own process (the driver) with
``spark.master`` (or ``spark.remote``) in the project file, fed while it runs, killed with ``kill -9``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from tests._support import REPO

TABLES = ("ods.clicks", "dwd.clicks", "dws.user_activity", "ads.low_users", "ads.top_users")  # the test flow
CLUSTER_CONF = {"spark.executor.memory": "1g", "spark.task.maxFailures": "4"}


def assert_oracle(project, lines: list[str], when: str) -> None:
    """Every table of the 4-layer test flow, hot and lake, and its quarantine equal the batch oracle (each
    quarantined record names the file that holds it)."""
    from tests.materializer._flowkit import canon, oracle

    expected = oracle(lines)
    for table in TABLES:
        assert canon(project.store.scan(table)) == expected[table], f"{when}: hot {table}"
        lake = project.lake.load(table).scan().to_arrow()
        assert canon(lake) == expected[table], f"{when}: lake {table}"
    quarantined = sum(project.store.end_offsets("ods.clicks__quarantine"))
    assert quarantined == expected["ods.clicks__quarantine"], f"{when}: quarantine"
    for row in project.store.scan("ods.clicks__quarantine").to_pylist():  # each names the file it is in
        file = row["file"]
        assert file and row["raw"] in Path(file).read_text().splitlines(), f"{when}: quarantined {row}"


def set_spark(project_dir: Path, spark: dict) -> None:
    """Merge ``spark`` settings (master, remote, conf) into the project file. Every tiering cycle of a log
    table is written by Spark tasks (``tiering.executor_rows: 0``: these flows' cycles are far below the
    default threshold), so the cluster's kill tests cover the executors writing the lake too."""
    path = project_dir / "tidehouse.yaml"
    doc = (yaml.safe_load(path.read_text()) if path.is_file() else None) or {}
    doc.setdefault("spark", {}).update(spark)
    doc.setdefault("tiering", {})["executor_rows"] = 0
    doc.setdefault("logging", {})["level"] = "info"  # TASKS_TIERED: the runs say who wrote the lake
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


TASKS_TIERED = "lake files by"  # runtime.spark.tiering's log line: Spark tasks wrote a cycle's files
# a Connect server takes Spark's Python daemon as its own setting (docs/operations.md)
CONNECT_SERVER_CONF = {**CLUSTER_CONF, "spark.python.daemon.module": "materializer.daemon"}


def daemon_starts(cluster) -> dict[str, int]:
    """How many times materializer.daemon started on each of the cluster's executors (by their stderr logs,
    where it prints one line once its task modules are loaded); executors that started none are left out."""
    from materializer.daemon import TASK_DAEMON

    counts = {}
    for log in cluster.workdir.glob("worker-*/app-*/*/stderr"):
        n = log.read_text(encoding="utf-8", errors="replace").count(f"{TASK_DAEMON}: ")
        if n:
            counts[str(log.relative_to(cluster.workdir))] = n
    return counts


def env(home: Path) -> dict[str, str]:
    return dict(
        os.environ,
        TIDEHOUSE_HOME=str(home),
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
        PYSPARK_PYTHON=sys.executable,
    )


def cli(project_dir: Path, home: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """The CLI in a process of its own (a driver of its own: the test process has a local Spark already)."""
    return subprocess.run(
        [sys.executable, "-c", "from runtime.cli import run; run()", *args],
        cwd=project_dir,
        env=env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_trigger(project_dir: Path, home: Path, flow: str, log: Path, *args: str) -> subprocess.Popen:
    """``tidehouse flow trigger FLOW --duration 900`` in its own process group, output into ``log``."""
    with open(log, "wb") as out:  # a file, not a pipe: a full pipe would block the child
        return subprocess.Popen(
            [sys.executable, "-c", "from runtime.cli import run; run()", "flow", "trigger", flow]
            + ["--duration", "900", *args],
            cwd=project_dir,
            env=env(home),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, proc=None, log: Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the flow stopped ({proc.returncode}) before {what}:\n{_tail(log)}")
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}:\n{_tail(log)}")


def kill_9(proc: subprocess.Popen) -> None:
    """``kill -9`` the driver: its whole process group (the CLI, its JVM, the JVM's Python workers)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL


def _tail(log: Path | None, n: int = 4000) -> str:
    if log is None or not log.is_file():
        return ""
    return log.read_text(errors="replace")[-n:]


# -- the shipped flows, run the way a cluster user runs them ------------------------------------------------
def run_shop(base: Path, spark: dict) -> tuple[Path, Path, dict[str, str]]:
    """``tidehouse init`` (a small sample) with ``spark`` settings, each shipped flow run to idle through the
    CLI: (project folder, home, each flow's output)."""
    from tests.examples._library import FLOW_ORDER

    home = base / "home"
    made = cli(base, home, "init", "shop", "--events", "800")
    assert made.returncode == 0, made.stderr
    project_dir = base / "shop"
    set_spark(project_dir, spark)
    outputs = {}
    for flow in FLOW_ORDER:
        done = cli(project_dir, home, "flow", "trigger", f"flows/{flow}.yaml", "--until-idle")
        assert done.returncode == 0, f"{flow}: {done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        outputs[flow] = done.stdout
    return project_dir, home, outputs


def shop_oracle(spark, project_dir: Path, home: Path) -> dict:
    """table -> its action's SQL in Spark batch over the complete input (the test's local Spark), per flow."""
    from runtime.project import Project
    from tests.examples._library import FLOW_ORDER, batch_results

    project = Project.open(project_dir=project_dir, home=home)
    try:
        return batch_results(spark, project, FLOW_ORDER)
    finally:
        project.close()


def assert_shop_flow(project_dir: Path, home: Path, expected: dict) -> None:
    """Every table of one flow, hot and lake, equals its batch result (multisets)."""
    from runtime.project import Project
    from tests.examples._library import rows_bag

    project = Project.open(project_dir=project_dir, home=home)
    try:
        for table, want in expected.items():
            columns = want.column_names
            assert want.num_rows > 0, f"{table}: the sample data must exercise every table"
            assert rows_bag(project.store.scan(table), columns) == rows_bag(want, columns), f"hot {table}"
            lake = project.lake.load(table).scan().to_arrow()
            assert rows_bag(lake, columns) == rows_bag(want, columns), f"lake {table}"
    finally:
        project.close()


def assert_log_join_in_tasks(project_dir: Path, home: Path, rng, master: str) -> None:
    """The ``join_log`` test flow (tests.materializer._logjoinkit) run twice to idle on ``master``: the second
    run's events, of users it did not change, are joined and written by tasks (writer ``<writer>:delta``);
    hot and lake equal the oracle after each run."""
    from runtime.project import Project
    from tests.materializer._flowkit import write_project
    from tests.materializer._logjoinkit import TIER_ACTIONS, TIER_FLOW, Events, check_tiers, tier_run

    write_project(project_dir, TIER_FLOW, TIER_ACTIONS)
    events, users, lines = Events(rng), {}, []
    before: list = [None, None]  # each bucket's last write before the run
    for run in (0, 1):
        lines += tier_run(rng, events, users, run, project_dir)
        done = cli(project_dir, home, "flow", "trigger", "flows/testflow.yaml", "--until-idle")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert f"on {master} (data path: executors)" in done.stdout
        project = Project.open()
        try:
            check_tiers(project, lines, users)
            last = [project.store.batch_info("ads.tiered", b) for b in range(2)]
            # run 1 changed no user: its rows came from the tasks' writer (<writer>:delta). Run 0's may too
            # when its events come in a micro-batch after the one of its users (on a cluster, often)
            new = [i for i, was in zip(last, before) if i is not None and i != was]
            assert run == 0 or any(i.writer.endswith(":delta") for i in new), (before, last)
            before = last
        finally:
            project.close()


def assert_outer_log_join(project_dir: Path, home: Path, rng, master: str) -> None:
    """The outer ``join_log`` test flow (tests.materializer._outerkit: joins that keep the users without
    events) run to idle on ``master`` once per run of its input: hot and lake equal the oracle after each."""
    from runtime.project import Project
    from tests.materializer._flowkit import write_project
    from tests.materializer._outerkit import OUTER_ACTIONS, OUTER_FLOW, OUTER_RUNS, check_outer, outer_run

    write_project(project_dir, OUTER_FLOW, OUTER_ACTIONS)
    users: dict[str, str] = {}
    lines: list[str] = []
    for run in range(len(OUTER_RUNS)):
        lines += outer_run(rng, users, run, project_dir)
        done = cli(project_dir, home, "flow", "trigger", "flows/testflow.yaml", "--until-idle")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert f"on {master} (data path: executors)" in done.stdout
        project = Project.open()
        try:
            check_outer(project, lines, users, f"run {run}")
        finally:
            project.close()
