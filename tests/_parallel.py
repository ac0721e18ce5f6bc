"""How the suite runs: its order in one process, and its split over parallel processes (pytest-xdist,
``-n auto`` in pyproject.toml's addopts; ``-n 0`` runs in one process). A plugin of tests/conftest.py."""

from __future__ import annotations

import os

# A run in parallel processes uses at most this many:
# each process starts its own SparkSession (and the servers its tests need), and 2 keep the 2 cores here busy
# (README suite 23:25 -> 19:01 on this machine, 2026-11-29). ``-n 0`` runs in this process only.
MAX_TEST_PROCESSES = 2
HEAVY = ("cluster", "slow", "reliability")


# Files whose tests share a costly session fixture go to one process, which builds it once: the README's tour
# (tests/examples/conftest.py, ~100 s).
ONE_PROCESS = {"tests/examples/test_action_tests.py": "tour", "tests/examples/test_flows.py": "tour"}


def pytest_xdist_auto_num_workers(config) -> int:
    return max(1, min(MAX_TEST_PROCESSES, os.cpu_count() or 1))


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile``, where the files of :data:`ONE_PROCESS` are one unit of work."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return ONE_PROCESS.get(path, path)

    return Scheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """In one process the cluster suite (``cluster``: a standalone master, 2 workers and their executors, or a
    Connect server, beside the driver) runs last, in its own order. In CI the Python matrix's fast suites run
    beside the first minutes of this suite, right after three virtualenvs were written to the disk: the
    cluster tests, a dozen JVMs on two cores writing checkpoints and hot tables, took 114 s and 103 s there
    against 71 s and 54 s on an idle machine (2026-11-28).

    In parallel processes (each file goes to one process, in this order: ``--dist loadfile
    --no-loadscope-reorder``) the files of the longest tests go first, the cluster suite's, then those with a
    slow or reliability test, so that the run does not end on one process working through a long file
    while the other has nothing left."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        items.sort(key=lambda item: item.get_closest_marker("cluster") is not None)  # stable: order kept
        return
    rank: dict[str, int] = {}
    for item in items:
        marks = [i for i, name in enumerate(HEAVY) if item.get_closest_marker(name) is not None]
        rank[item.path] = min(rank.get(item.path, len(HEAVY)), *marks, len(HEAVY))
    items.sort(key=lambda item: rank[item.path])  # stable: each file's tests keep their order
