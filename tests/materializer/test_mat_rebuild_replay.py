"""A new state is built from the inputs' *current* rows (agg_changelog, topn, join_changelog), which may be
ahead of the micro-batch that builds it. A run killed between such a batch's output write and its state write
left the output committed under the batch's ``(writer, seq)``; the replay then rebuilt from newer input rows
and its output write was skipped as a replay, while its state held the newer rows: the changes in between
never reached the output (a stale row of ``ads.full_groups`` after a kill -9, seed 2678457651). Reproduced
here without a kill: each incremental table's state is dropped and its checkpoint rolled back to its last
batch that wrote output (that batch replays and builds a new state) while its inputs move on; every table must
still equal the oracle, hot and lake."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from runtime.core.literals import STATE_SUFFIX
from tests.materializer._flowkit import canon, make_events, write_batch, write_project
from tests.materializer._incflow import INC_ACTIONS, INC_FLOW, inc_oracle
from tests.materializer._joinflow import JOIN_ACTIONS, JOIN_FLOW, join_oracle

pytestmark = pytest.mark.spark

# flow, actions, oracle: run 0 builds the states (its first batches may see the whole input: only the writer
# of new states writes), run 1 writes output under each query's own writer, run 2's first batches replay
FLOWS = {
    "joins": (JOIN_FLOW, JOIN_ACTIONS, join_oracle),
    "topn_agg": (INC_FLOW, INC_ACTIONS, inc_oracle),
}
RUNS = (80, 60, 90)  # rows per run; the last moves rows across groups, ranks and join keys
INCREMENTAL = ("agg_changelog", "topn", "join_changelog")


def _replay_rebuild(project, plan) -> list[str]:
    """Per incremental table: drop its state and roll its checkpoint back to the last batch that wrote output
    (its Spark commit and any later offset log entry removed), so its next batch replays that one and builds
    a new state, whose output write the batch already committed."""
    damaged = []
    states = [n for n in project.store.list_tables() if n.endswith(STATE_SUFFIX)]
    for t in plan.tables:
        if t.strategy not in INCREMENTAL:
            continue
        for name in states:
            if name == f"{t.name}{STATE_SUFFIX}" or name.startswith(f"{t.name}__"):
                project.store.drop_table(name)
        wrote = project.store.last_seq(t.name, t.writer_id)
        if wrote is None:  # no batch of the query wrote output (its first built a state): a lost state only
            continue
        ckpt = Path(t.checkpoint)
        for log in ("offsets", "commits"):
            for entry in (ckpt / log).iterdir():
                if entry.name.isdigit() and int(entry.name) >= wrote + (log == "offsets"):
                    entry.unlink()
        damaged.append(t.name)
    return damaged


@pytest.mark.parametrize("flow_name", sorted(FLOWS))
def test_a_replayed_batch_that_builds_a_new_state_from_newer_input_is_exact(
    spark, project_dir, flow_name, seed
):
    from runtime.project import Project

    flow_yaml, actions, oracle = FLOWS[flow_name]
    rng = random.Random(seed)
    flow = write_project(project_dir, flow_yaml, actions)
    lines: list[str] = []
    project = Project.open()
    try:
        for run, n in enumerate(RUNS):
            if run == len(RUNS) - 1:
                damaged = _replay_rebuild(project, project.plan("testflow", spark=spark))
                assert len(damaged) >= 3, damaged
            more = make_events(rng, n, users=30, bad=0)
            write_batch(project_dir, f"part-{run}", more)
            lines += more
            project.trigger(flow if run == 0 else "testflow", until_idle=True, spark=spark)
        for table, rows in oracle(lines).items():
            assert canon(project.store.scan(table)) == rows, f"hot {table}"
            assert canon(project.lake.load(table).scan().to_arrow()) == rows, f"lake {table}"
    finally:
        project.close()
