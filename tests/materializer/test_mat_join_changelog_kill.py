"""kill -9 of a running `tidehouse flow trigger` whose ADS tables join two primary-key tables with
join_changelog while both sides change (their state tables mid-update), then `--until-idle` with more input:
every table equals the oracle, hot and lake."""

from __future__ import annotations

import random
import time

import pytest

from materializer.incremental.common import REBUILD
from tests._support import scale
from tests.materializer._flowkit import canon, make_events, write_batch, write_project
from tests.materializer._joinflow import JOIN_ACTIONS, JOIN_FLOW, join_oracle
from tests.materializer._killkit import kill_9, trigger_process, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.reliability]


JOINS = ("ads.by_events", "ads.with_group", "ads.group_events")


def _state_seq(store, table: str) -> int:
    """The batch id of the last state write of a join table (-1: none yet, or the one that built it)."""
    info = store.batch_info(f"{table}__state", 0)
    return -1 if info is None or info.writer.endswith(REBUILD) else info.seq


def test_kill_9_mid_join_run_then_until_idle_is_exact(spark, project_dir, data_path, home, seed):
    if data_path == "executors" and not scale(0, 1):
        pytest.skip("the executor path runs the same join batch function: TIDEHOUSE_SCALE=full kills it too")
    from runtime.project import Project
    from runtime.storage import open_store

    rng = random.Random(seed)
    write_project(project_dir, JOIN_FLOW, JOIN_ACTIONS)
    lines = make_events(rng, 80, users=30, bad=0)
    write_batch(project_dir, "part-0", lines)
    with trigger_process(project_dir, home) as proc:
        store = open_store(str(home / "hot"))
        wait_for(
            lambda: all(store.has_table(f"{t}__state") for t in JOINS), 420, "the join tables' first batches"
        )
        more = make_events(rng, 60, users=30, bad=0)
        write_batch(project_dir, "part-1", more)
        lines += more
        # the join tables' states written by a batch after their first (the rebuild): they follow changes
        wait_for(lambda: all(_state_seq(store, t) >= 1 for t in JOINS), 300, "incremental join batches")
        for part in (2, 3):  # changes arrive while the incremental queries run
            more = make_events(rng, 60, users=30, bad=0)
            write_batch(project_dir, f"part-{part}", more)
            lines += more
            time.sleep(rng.uniform(0.3, 2.0))
        kill_9(proc)
    last = make_events(rng, 70, users=30, bad=0)
    write_batch(project_dir, "part-4", last)
    lines += last
    project = Project.open()
    try:
        project.trigger("testflow", until_idle=True, spark=spark)
        for table, rows in join_oracle(lines).items():
            assert canon(project.store.scan(table)) == rows, f"hot {table}"
            assert canon(project.lake.load(table).scan().to_arrow()) == rows, f"lake {table}"
    finally:
        project.close()
