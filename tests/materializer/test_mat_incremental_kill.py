"""kill -9 of a running `tidehouse flow trigger` whose ADS tables are kept by topn and agg_changelog (their
state tables mid-update), then `--until-idle` with more input: every table equals the oracle, hot and lake."""

from __future__ import annotations

import random
import time

import pytest

from tests._support import scale
from tests.materializer._flowkit import canon, make_events, write_batch, write_project
from tests.materializer._incflow import INC_ACTIONS, INC_FLOW, inc_oracle
from tests.materializer._killkit import kill_9, trigger_process, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.reliability]


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
    with trigger_process(project_dir, home) as proc:
        store = open_store(str(home / "hot"))
        wait_for(
            lambda: store.has_table("ads.mid_groups__state") and store.has_table("ads.top_mid__state"),
            420,
            "the incremental tables' first batches",
        )
        for part in (1, 2):  # changes arrive while the incremental queries run
            more = make_events(rng, 60, users=30, bad=0)
            write_batch(project_dir, f"part-{part}", more)
            lines += more
            time.sleep(rng.uniform(0.5, 2.5))
        kill_9(proc)
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
