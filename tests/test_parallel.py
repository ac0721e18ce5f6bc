"""The parallel test run's own settings (tests/_parallel.py): what they name exists and does what it says."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

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


def test_at_most_the_capped_number_of_processes():
    assert 1 <= pytest_xdist_auto_num_workers(None) <= MAX_TEST_PROCESSES
