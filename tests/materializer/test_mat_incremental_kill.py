"""kill -9 of a running `tidehouse flow trigger` whose ADS tables are kept by topn and agg_changelog (their
state tables mid-update), then `--until-idle` with more input: every table equals the oracle, hot and lake."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from tests._support import scale
from tests.materializer._flowkit import canon, make_events, write_batch, write_project
from tests.materializer._incflow import INC_ACTIONS, INC_FLOW, inc_oracle

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.reliability]


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def test_kill_9_mid_run_then_until_idle_is_exact(spark, project_dir, data_path, home, seed):
    if data_path == "executors" and not scale(0, 1):
        pytest.skip(
            "the executor path runs the same incremental batch function: TIDEHOUSE_SCALE=full kills it too"
        )
    from runtime.project import Project
    from runtime.storage import open_store

    rng = random.Random(seed)
    write_project(project_dir, INC_FLOW, INC_ACTIONS)
    lines = make_events(rng, 80, users=30, bad=0)
    write_batch(project_dir, "part-0", lines)
    log_path = project_dir.parent / "trigger.log"
    with open(log_path, "wb") as log_file:  # a file, not a pipe: a full pipe would block the child
        proc = subprocess.Popen(
            [sys.executable, "-c", "from runtime.cli import run; run()"]
            + ["flow", "trigger", "flows/testflow.yaml", "--duration", "300"],
            cwd=project_dir,
            env=dict(os.environ, TIDEHOUSE_HOME=str(home)),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        store = open_store(str(home / "hot"))
        _wait(
            lambda: store.has_table("ads.mid_groups__state") and store.has_table("ads.top_mid__state"),
            420,
            "the incremental tables' first batches",
        )
        for part in (1, 2):  # changes arrive while the incremental queries run
            more = make_events(rng, 60, users=30, bad=0)
            write_batch(project_dir, f"part-{part}", more)
            lines += more
            time.sleep(rng.uniform(0.5, 2.5))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        print(log_path.read_text(errors="replace")[-3000:])
    last = make_events(rng, 70, users=30, bad=0)
    write_batch(project_dir, "part-3", last)
    lines += last
    project = Project.open()
    try:
        project.trigger("testflow", until_idle=True, spark=spark)
        for table, rows in inc_oracle(lines).items():
            assert canon(project.store.scan(table)) == rows, f"hot {table}"
            assert canon(project.lake.load(table).scan().to_arrow()) == rows, f"lake {table}"
    finally:
        project.close()
