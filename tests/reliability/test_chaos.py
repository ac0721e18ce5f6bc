"""End-to-end chaos: ``kill -9`` the flow driver and the tiering service at random moments, lose nothing.

A 4-layer flow (``tests/materializer/conftest.py``: ODS log -> DWD log -> DWS primary key aggregate -> two ADS
primary-key tables, one with rows that enter and leave) runs as a real ``tidehouse flow trigger`` process next
to a real ``tidehouse tier schedule --flow`` process, while a feeder thread appends a JSON part file (with a
few malformed lines) every second. ``scale(2, 50)`` times, a seeded random moment later, the test kills the
driver, the scheduler or both with ``SIGKILL`` to the whole process group (so the Spark JVM and its Python
workers die too) and restarts what it killed. Input stops, ``tidehouse flow trigger --until-idle`` finishes
the work, and then every hot table (the store) and every lake table (plain pyiceberg through ``Project.lake``)
equals the DuckDB batch oracle over the JSON input as a multiset: no row lost, none twice. ``tidehouse query``
(lake plus hot tail) counts the same rows.

Replay one run: ``TIDEHOUSE_SEED=<n> .venv/bin/python -m pytest tests/reliability/test_chaos.py``;
full size: ``TIDEHOUSE_SCALE=full``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests._support import scale
from tests.materializer import _flowkit as FLOW

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

TIDEHOUSE = str(Path(sys.executable).with_name("tidehouse"))
TABLES = ["ods.clicks", "dwd.clicks", "dws.user_activity", "ads.low_users", "ads.top_users"]


bag = FLOW.canon  # rows as a multiset: nothing lost, nothing twice


def oracle(lines: list[str]) -> dict[str, Counter]:
    """Each table's batch result over the complete input, in DuckDB, as a multiset."""
    con = FLOW.oracle_connection(lines)
    return {name: bag(con.sql(sql).to_arrow_table()) for name, sql in FLOW.ORACLE.items()}


class Feeder(threading.Thread):
    """Appends one part file (seeded content, a malformed line now and then) every ``every`` seconds."""

    def __init__(self, root: Path, rng: random.Random, every: float = 1.0):
        super().__init__(daemon=True)
        self.root, self.rng, self.every = root, rng, every
        self.lines: list[str] = []
        self.parts = 0
        self.stop = threading.Event()

    def write(self) -> None:
        lines = FLOW.make_events(self.rng, self.rng.randrange(10, 40), users=12, bad=self.rng.randrange(0, 2))
        FLOW.write_batch(self.root, f"part-{self.parts:05d}", lines)
        self.lines += lines
        self.parts += 1

    def run(self) -> None:
        while not self.stop.wait(self.every):
            self.write()


class Proc:
    """One restartable CLI process in its own process group, its output appended to a log file."""

    def __init__(self, name: str, args: list[str], cwd: Path, env: dict, logs: Path):
        self.name, self.args, self.cwd, self.env = name, args, cwd, env
        self.log = logs / f"{name}.log"
        self.popen: subprocess.Popen | None = None
        self.started = 0.0
        self.kills = 0

    def start(self) -> None:
        with open(self.log, "ab") as fh:
            fh.write(f"\n=== start {time.strftime('%H:%M:%S')} ===\n".encode())
            self.popen = subprocess.Popen(
                [TIDEHOUSE, *self.args],
                cwd=self.cwd,
                env=self.env,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started = time.time()

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill9(self, count: bool = True) -> None:
        """SIGKILL the whole process group (driver, JVM, Python workers); ``count`` it as a chaos kill."""
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=60)
        self.kills += count

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


def steady(status_file: Path, driver: Proc) -> bool:
    """This driver process has every query running and has run a micro-batch through ODS and DWS."""
    try:
        doc = json.loads(status_file.read_text())
    except (OSError, ValueError):
        return False
    tables = {t["table"]: t for t in doc.get("tables", [])}
    return (
        doc.get("pid") == driver.popen.pid
        and bool(tables)
        and all(t.get("state") == "active" for t in tables.values())
        and all(tables.get(name, {}).get("batches", 0) >= 1 for name in ("ods.clicks", "dws.user_activity"))
    )


def _wait(predicate, timeout: float, what: str, procs: list[Proc] = ()) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        for proc in procs:
            assert proc.popen is None or proc.alive(), f"{proc.name} died on its own:\n{proc.tail()}"
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.timeout(scale(900, 3600))  # 50 rounds with waits for full driver start-ups take over 20 minutes
def test_kill_9_driver_and_scheduler_at_random_moments_loses_nothing(tmp_path, seed):
    from runtime.project import Project
    from runtime.storage import open_store

    rng = random.Random(seed)
    root = tmp_path / "project"
    (root / "actions").mkdir(parents=True)
    (root / "flows").mkdir()
    home = tmp_path / "home"
    logs = tmp_path / "logs"
    logs.mkdir()
    FLOW.write_project(root)
    # the separate scheduler ticks often enough that kills land inside its commits
    (root / "tidehouse.yaml").write_text("tiering:\n  interval: 1s\n")
    env = {
        **os.environ,
        "TIDEHOUSE_HOME": str(home),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        # a busy 2-core machine can be slower than Spark's 15 s default for a Python worker to connect back
        "PYSPARK_SUBMIT_ARGS": "--conf spark.python.authenticate.socketTimeout=120s pyspark-shell",
    }
    driver = Proc("trigger", ["flow", "trigger", "flows/testflow.yaml"], root, env, logs)
    scheduler = Proc("schedule", ["tier", "schedule", "--flow", "testflow"], root, env, logs)
    feeder = Feeder(root, random.Random(rng.getrandbits(64)))
    feeder.write()
    kills = scale(2, 50)
    status_file = home / "run" / "testflow.status.json"
    modes = Counter()
    store = open_store(str(home / "hot"))
    began = time.time()
    try:
        driver.start()
        _wait(
            lambda: store.has_table("dws.user_activity") and sum(store.end_offsets("dws.user_activity")) > 0,
            300,
            "the first aggregation batch",
            [driver],
        )
        print(f"[chaos] first aggregation batch after {time.time() - began:.0f}s")
        feeder.start()
        scheduler.start()
        for i in range(kills):
            # the driver first, then the scheduler (so CI's two kills hit both); after that one or both at
            # random
            victims = (
                ([driver], [scheduler])[i]
                if i < 2
                else rng.choice([[driver], [scheduler], [driver, scheduler]])
            )
            for proc in (driver, scheduler):
                if not proc.alive():
                    proc.start()
            # A restarted driver starts its layers one after another (about 20-30 s until DWS runs), so a
            # moment counted from the restart mostly lands in start-up. Half the driver kills therefore wait
            # until every query of this process runs, then pick a moment inside its steady micro-batches.
            mode = "steady" if driver in victims and (i == 0 or rng.random() < 0.5) else "any"
            if mode == "steady":
                _wait(
                    lambda: steady(status_file, driver),
                    300,
                    f"kill {i}: a steady driver",
                    [driver, scheduler],
                )
            moment = rng.uniform(0.0, 6.0) if mode == "steady" else rng.uniform(2.0, 20.0)
            due = time.time() + moment
            _wait(lambda due=due: time.time() >= due, moment + 5, f"kill {i}", [driver, scheduler])
            for proc in victims:
                proc.kill9()
            modes[mode] += 1
            print(
                f"[chaos] kill {i + 1}/{kills}: {'+'.join(p.name for p in victims)} {moment:.1f}s after "
                f"{'all queries ran' if mode == 'steady' else 'the restart'}, {feeder.parts} parts so far"
            )
    finally:
        feeder.stop.set()
        if feeder.is_alive():
            feeder.join(timeout=30)
        for proc in (driver, scheduler):
            if proc.alive():
                proc.kill9(count=False)
    feeder.write()  # input after the last kill too
    idle_start = time.time()
    final = subprocess.run(
        [TIDEHOUSE, "flow", "trigger", "testflow", "--until-idle"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert final.returncode == 0, f"{final.stdout[-3000:]}\n{final.stderr[-3000:]}\n{driver.tail()}"
    assert "Traceback" not in final.stdout + final.stderr
    assert driver.kills >= 1 and driver.kills + scheduler.kills >= kills
    print(f"[chaos] until-idle finished in {time.time() - idle_start:.0f}s")

    expected = oracle(feeder.lines)
    good = sum(1 for line in feeder.lines if not line.startswith("{this"))
    assert sum(expected["ods.clicks"].values()) == good
    # the user's read path: `tidehouse query` unions the lake with the hot tail; a range in both would count
    # twice
    sql = "SELECT " + ", ".join(f'(SELECT count(*) FROM {t}) AS "{t}"' for t in TABLES)
    query = subprocess.run(
        [TIDEHOUSE, "query", "--format", "json", sql],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert query.returncode == 0, query.stderr[-3000:]
    assert json.loads(query.stdout) == [{t: sum(expected[t].values()) for t in TABLES}]
    project = Project.open(home=home, project_dir=root)
    try:
        for table in TABLES:
            hot = bag(project.store.scan(table))
            lake = bag(project.lake.load(table).scan().to_arrow())
            want = expected[table]
            assert hot == want, (
                f"hot {table}: lost {sum((want - hot).values())}, extra {sum((hot - want).values())}"
            )
            assert lake == want, (
                f"lake {table}: lost {sum((want - lake).values())}, extra {sum((lake - want).values())}"
            )
        bad = len(feeder.lines) - good
        assert sum(project.store.end_offsets("ods.clicks__quarantine")) == bad
    finally:
        project.close()
    print(
        f"[chaos] {driver.kills} driver kills ({modes['steady']} in steady micro-batches), "
        f"{scheduler.kills} scheduler kills, {feeder.parts} parts, "
        f"{good} good rows, {len(feeder.lines) - good} malformed; every hot and lake table equals the oracle"
    )
