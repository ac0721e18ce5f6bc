"""Shared fixtures: one SparkSession per test session, projects on disk, the CLI runner.

Markers (see pyproject.toml): ``spark`` (needs the shared session), ``slow``, ``reliability``, ``soak``.
Randomized tests take their seed from ``TIDEHOUSE_SEED`` (printed by :func:`seed`).
"""

from __future__ import annotations

import os
import random
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from tests._support import run_cli as run_cli_in_process
from tests._support import uses_the_shared_session

# session fixtures of real servers, for every test package (seaweedfs, postgres, spark_cluster,
# connect_server), and the tests' order and split over parallel processes (tests/_parallel.py)
pytest_plugins = ("tests.services", "tests.spark_services", "tests._parallel")

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

# Every driver JVM this test process starts (the shared session's, the CLI subprocesses', the Connect
# servers': spark-submit adds SPARK_SUBMIT_OPTS to them) keeps its temporary files in one folder, removed when
# the process ends: a driver a test kills with kill -9 cannot remove its own (Spark leaves an empty
# artifacts-<uuid> folder behind in the JVM's temporary folder, /tmp by default).
# A parallel run's test processes inherit the controlling process's folder in SPARK_SUBMIT_OPTS: each
# replaces it with its own.
# They also compile with C1 only: the tests' micro-batches are small, and C2's compiler threads spent CPU on
# code that runs a few times (the suite is bound by the 2 cores' CPU here; the CPU of two groups of test
# files, 2026-12-01: 236 -> 212 and 224 -> 164 s). The product's cluster drivers run so too
# (runtime/spark/session.py); a local[...] driver, whose JVM runs the tasks, keeps C2.
JVM_TMP = Path(tempfile.mkdtemp(prefix="tidehouse-tests-jvm-"))
_TMPDIR = "-Djava.io.tmpdir="
_C1_ONLY = "-XX:TieredStopAtLevel=1"
_OPTS = [o for o in shlex.split(os.environ.get("SPARK_SUBMIT_OPTS", "")) if not o.startswith(_TMPDIR)]
_OPTS += [] if _C1_ONLY in _OPTS else [_C1_ONLY]
os.environ["SPARK_SUBMIT_OPTS"] = shlex.join([*_OPTS, f"{_TMPDIR}{JVM_TMP}"])


def pytest_unconfigure(config) -> None:
    shutil.rmtree(JVM_TMP, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects
def pytest_collection_modifyitems(config, items) -> None:
    """A test that uses the shared SparkSession, directly or through another fixture, is a ``spark`` test
    whether or not it says so: the fast suite (``-m "not spark ..."``, CI's Python matrix) starts no Spark
    (the session's start alone is ~14 s, ~20 s beside other test runs)."""
    for item in items:
        if uses_the_shared_session(item) and item.get_closest_marker("spark") is None:
            item.add_marker(pytest.mark.spark)


@pytest.fixture
def seed(request) -> int:
    """A seed for randomized tests: $TIDEHOUSE_SEED or a fresh one, always printed."""
    value = int(os.environ.get("TIDEHOUSE_SEED") or random.SystemRandom().randrange(2**32))
    print(f"\n[seed] {request.node.nodeid}: TIDEHOUSE_SEED={value}")
    return value


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the test session (Spark takes ~14 s to start)."""
    from runtime.spark.session import get_spark

    # from the class archive when one was made (a long session would hold the claim to make it for long)
    session = get_spark("local[2]", class_archive="use")
    yield session
    session.stop()


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """An empty Tidehouse home for one test."""
    path = tmp_path / "home"
    monkeypatch.setenv("TIDEHOUSE_HOME", str(path))
    return path


@pytest.fixture
def project_dir(tmp_path, monkeypatch, home) -> Path:
    """An empty project directory (cwd) with ``actions/`` and ``flows/``; copy what a test needs into it."""
    root = tmp_path / "project"
    (root / "actions").mkdir(parents=True)
    (root / "flows").mkdir()
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def run_cli(project_dir):
    """Run the real CLI in-process in the test's project: ``run_cli("flow", "validate", "x.yaml")``."""
    return run_cli_in_process
