"""The parallel test run's own settings (tests/_parallel.py): what they name exists and does what it says."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests._parallel import (
    MAX_TEST_PROCESSES,
    ONE_PROCESS,
    TOGETHER,
    pytest_xdist_auto_num_workers,
    pytest_xdist_make_scheduler,
)

REPO = Path(__file__).resolve().parents[1]


def test_the_files_kept_in_one_process_exist_and_share_one_unit_of_work(pytestconfig):
    assert all((REPO / path).is_file() for path in ONE_PROCESS), ONE_PROCESS
    config = SimpleNamespace(getvalue=lambda name: "loadfile", option=pytestconfig.option)
    scheduling = pytest_xdist_make_scheduler(config, log=None)
    for paths in TOGETHER.values():
        assert len({scheduling._split_scope(f"{path}::test_x") for path in paths}) == 1, paths
    units = {scheduling._split_scope(f"{paths[0]}::test_x") for paths in TOGETHER.values()}
    assert len(units) == len(TOGETHER)
    assert scheduling._split_scope("tests/test_layers.py::test_x") == "tests/test_layers.py"


@pytest.mark.parametrize(("cores", "processes"), [(None, 1), (1, 1), (2, 2), (64, MAX_TEST_PROCESSES)])
def test_at_most_the_capped_number_of_processes(monkeypatch, cores, processes):
    """One process per core, never more than the cap (each process starts its own SparkSession)."""
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert pytest_xdist_auto_num_workers(None) == processes


@pytest.mark.spark
def test_the_suites_driver_jvms_keep_their_temporary_files_in_its_own_folder(spark):
    """The shared session's JVM writes its temporary files under the test process's folder (tests/conftest.py
    ``JVM_TMP``, given in SPARK_SUBMIT_OPTS to every driver JVM spark-submit starts from this environment),
    which goes with the process: a driver a test kills leaves nothing in /tmp."""
    (given,) = [o.split("=", 1)[1] for o in shlex.split(os.environ["SPARK_SUBMIT_OPTS"]) if "tmpdir=" in o]
    jvm_tmp = Path(spark.sparkContext._jvm.java.lang.System.getProperty("java.io.tmpdir"))
    assert jvm_tmp == Path(given) and jvm_tmp.name.startswith("tidehouse-tests-jvm-") and jvm_tmp.is_dir()
    assert any(p.name.startswith(("spark-", "artifacts-")) for p in jvm_tmp.iterdir())
