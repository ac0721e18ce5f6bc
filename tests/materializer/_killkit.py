"""What the materializer's kill -9 tests share: a ``flow trigger`` in a process of its own (killed with
``SIGKILL`` by the test, or when the test fails), and waiting for what it writes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def wait_for_first_aggregation(store, timeout: float = 420) -> None:
    """Until the test flow's DWS aggregation has written its first rows: every layer of the trigger runs."""
    wait_for(
        lambda: store.has_table("dws.user_activity") and sum(store.end_offsets("dws.user_activity")) > 0,
        timeout,
        "the first aggregation batch",
    )


def kill_9(proc: subprocess.Popen) -> None:
    """``kill -9`` of the trigger and everything it started (its JVM, Python workers)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


@contextlib.contextmanager
def trigger_process(project_dir: Path, home: Path, flow: str = "flows/testflow.yaml") -> Iterator:
    """``tidehouse flow trigger FLOW --duration 300`` in its own process group, its output in a log file (a
    file, not a pipe: a full pipe would block the child). On the way out it is killed if still alive, and the
    end of its log is printed."""
    log_path = project_dir.parent / "trigger.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from runtime.cli import run; run()"]
            + ["flow", "trigger", flow, "--duration", "300"],
            cwd=project_dir,
            env=dict(os.environ, TIDEHOUSE_HOME=str(home)),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            kill_9(proc)
        print(log_path.read_text(errors="replace")[-3000:])
