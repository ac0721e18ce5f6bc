"""How the suite runs: its order in one process, and its split over parallel processes (pytest-xdist,
``-n auto`` in pyproject.toml's addopts; ``-n 0`` runs in one process). A plugin of tests/conftest.py."""

from __future__ import annotations

import os

# A run in parallel processes uses at most this many: each process starts its own SparkSession (and the
# servers its tests need), and 2 keep the 2 cores here busy (README suite in CI 23:25 -> 18:35, 2026-11-29).
MAX_TEST_PROCESSES = 2
HEAVY = ("cluster", "slow", "reliability")


# Files that go to one process together, as one unit of work (name -> files): the README's tour, a costly
# session fixture (tests/examples/conftest.py, ~100 s) that one process then builds once; the cluster suite,
# a dozen JVMs per file, whose two files side by side on this machine's 2 cores (and next to another heavy
# file each) took 172 and 174 s against 72 and 54 s one after the other (2026-11-29).
TOGETHER = {
    "tour": ("tests/examples/test_action_tests.py", "tests/examples/test_flows.py"),
    "cluster": ("tests/cluster/test_cluster_flows.py", "tests/cluster/test_connect_flows.py"),
}
ONE_PROCESS = {path: name for name, paths in TOGETHER.items() for path in paths}


def pytest_xdist_auto_num_workers(config) -> int:
    return max(1, min(MAX_TEST_PROCESSES, os.cpu_count() or 1))


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile``, where each group of files of :data:`TOGETHER` is one unit of work."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return ONE_PROCESS.get(path, path)

    return Scheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """In one process (``-n 0``) the cluster suite (``cluster``: a standalone master, 2 workers and their
    executors, or a Connect server, beside the driver) runs last, in its own order.

    In parallel processes (each file, or each group of :data:`TOGETHER`, goes to one process, in this order:
    ``--dist loadfile --no-loadscope-reorder``) the files of the longest tests go first, the cluster suite's,
    then those with a slow or reliability test, so that the run does not end on one process working through
    a long file while the other has nothing left."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        items.sort(key=lambda item: item.get_closest_marker("cluster") is not None)  # stable: order kept
        return
    rank: dict[str, int] = {}
    for item in items:
        marks = [i for i, name in enumerate(HEAVY) if item.get_closest_marker(name) is not None]
        rank[item.path] = min(rank.get(item.path, len(HEAVY)), *marks, len(HEAVY))
    items.sort(key=lambda item: rank[item.path])  # stable: each file's tests keep their order
