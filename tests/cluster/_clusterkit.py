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


def set_spark(project_dir: Path, spark: dict) -> None:
    """Merge ``spark`` settings (master, remote, conf) into the project file."""
    path = project_dir / "tidehouse.yaml"
    doc = (yaml.safe_load(path.read_text()) if path.is_file() else None) or {}
    doc.setdefault("spark", {}).update(spark)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


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
