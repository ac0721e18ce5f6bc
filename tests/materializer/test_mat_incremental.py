"""The incremental strategies (topn, agg_changelog) equal the batch oracle, hot and lake, over several
--until-idle runs with rows leaving their input (rows leave a top-N, groups leave a HAVING filter, a max's
current extreme is deleted), on both data paths."""

from __future__ import annotations

import random

import pytest

from tests.materializer._flowkit import canon, make_events, write_batch, write_project
from tests.materializer._incflow import INC_ACTIONS, INC_FLOW, STRATEGIES, inc_oracle

pytestmark = pytest.mark.spark


def check(project, lines) -> None:
    expected = inc_oracle(lines)
    for table, rows in expected.items():
        assert canon(project.store.scan(table)) == rows, f"hot {table}"
        assert canon(project.lake.load(table).scan().to_arrow()) == rows, f"lake {table}"


def test_incremental_tables_equal_the_oracle_over_runs(spark, project_dir, data_path, seed):
    from runtime.project import Project

    rng = random.Random(seed)
    flow = write_project(project_dir, INC_FLOW, INC_ACTIONS)
    lines: list[str] = []
    project = Project.open()
    try:
        plan = project.plan(flow, spark=spark)
        for table, strategy in STRATEGIES.items():
            assert plan.table(table).strategy == strategy, plan.table(table).reason
        for run, n in enumerate((80, 90, 120)):
            more = make_events(rng, n, users=30, bad=0)
            write_batch(project_dir, f"part-{run}", more)
            lines += more
            project.trigger(flow if run == 0 else "testflow", until_idle=True, spark=spark)
            check(project, lines)
        assert project.store.has_table("ads.top_mid__state")
    finally:
        project.close()
