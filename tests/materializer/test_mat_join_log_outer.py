"""join_log with a join that keeps the primary-key input's unmatched rows (users without events): a user's
NULL-padded row is in the output until its first event and gone after. On the executor path the events of
users a batch did not change are joined by tasks there too (materializer.incremental.joinlog, step (3a)
deletes the unmatched rows of users with their first events); hot and lake equal the DuckDB oracle run after
run, on both data paths and moved between them; a filter below the join on the events' side keeps the batch
function."""

from __future__ import annotations

import random
import time

import pytest

from tests._support import scale
from tests.materializer._flowkit import write_batch, write_project
from tests.materializer._killkit import kill_9, trigger_process, wait_for
from tests.materializer._logjoinkit import write_users
from tests.materializer._outerkit import (
    OUTER_ACTIONS,
    OUTER_FLOW,
    OUTER_ORACLE,
    OUTER_RUNS,
    check_outer,
    outer_events,
    outer_run,
)

pytestmark = pytest.mark.spark


def test_joins_keeping_unmatched_users_have_batch_semantics_over_runs(spark, project_dir, data_path, seed):
    """Runs of new events and dimension changes (``OUTER_RUNS``); each run's hot and lake tables equal the
    oracle. On the executor path the unmatched rows of users with their first events are deleted by the tasks
    ((3a)), and the join over filtered events runs the batch function."""
    from runtime.project import Project

    rng = random.Random(seed)
    flow = write_project(project_dir, OUTER_FLOW, OUTER_ACTIONS)
    users: dict[str, str] = {}
    lines: list[str] = []
    project = Project.open()
    try:
        plan = project.plan(flow, spark=spark)
        for table in OUTER_ORACLE:
            assert plan.table(table).strategy == "join_log", plan.table(table).reason
        for run in range(len(OUTER_RUNS)):
            lines += outer_run(rng, users, run, project_dir)
            project.trigger(flow if run == 0 else "testflow", until_idle=True, spark=spark)
            check_outer(project, lines, users, f"run {run}")
        if data_path == "executors":  # the tasks joined events and deleted unmatched rows
            for table in ("ads.users_events", "ads.all_events"):
                writer = plan.table(table).writer_id
                assert project.store.last_seq(table, writer + ":delta") is not None, table
                assert project.store.last_seq(table, writer + ":gone") is not None, table
            big = plan.table("ads.big_events").writer_id  # a filter below: the batch function
            assert project.store.last_seq("ads.big_events", big + ":delta") is None
    finally:
        project.close()


@pytest.mark.slow
@pytest.mark.reliability
@pytest.mark.skipif(scale(True, False), reason="TIDEHOUSE_SCALE=full: kill -9 of the outer joins in tasks")
@pytest.mark.parametrize("data_path", ["executors"], indirect=True)
def test_kill_9_mid_outer_log_join_in_tasks_then_until_idle_is_exact(
    spark, project_dir, home, data_path, seed
):
    """kill -9 of a run on the executor path while its tasks join, delete unmatched rows and write; the next
    run is exact, hot and lake."""
    from runtime.project import Project
    from runtime.storage import open_store

    rng = random.Random(seed)
    write_project(project_dir, OUTER_FLOW, OUTER_ACTIONS)
    users: dict[str, str] = {}
    lines: list[str] = []

    def run(n: int, changed: dict[str, str], who: list[str]) -> None:
        write_users(project_dir, f"users-{n}", users, changed)
        more = outer_events(rng, 100 * n, who, list(range(12)))
        write_batch(project_dir, f"part-{n}", more)
        lines.extend(more)

    run(0, {f"u{i}": rng.choice(["gold", "basic"]) for i in range(12)}, ["u0", "u1"])
    with trigger_process(project_dir, home) as proc:
        store = open_store(str(home / "hot"))
        wait_for(lambda: store.has_table("ads.users_events__state"), 420, "the join's first batch")
        for n in (1, 2, 3):  # the users of one event each: mostly their first, in partitions (3a) clears
            run(n, {f"u{rng.randrange(12)}": "silver"}, [f"u{i}" for i in rng.sample(range(12), 4)])
            time.sleep(rng.uniform(0.3, 2.0))
        kill_9(proc)
    run(4, {"u12": "new"}, ["u3", "u12"])
    project = Project.open()
    try:
        project.trigger("testflow", until_idle=True, spark=spark)
        check_outer(project, lines, users, "after the kill")
    finally:
        project.close()


@pytest.mark.skipif(
    scale(True, False),
    reason="TIDEHOUSE_SCALE=full: outer joins moved between the data paths (CI: inner ones)",
)
def test_outer_log_joins_moved_between_the_data_paths_keep_their_checkpoint_and_state(
    spark, project_dir, seed
):
    """The executor path, then the driver path, then the executor path again, on one checkpoint and one state
    per table: each run equals the oracle, no run after the first reads its inputs whole, and the last run's
    tasks join the events of unchanged users and delete the unmatched rows of users with their first events
    ((3a)) from the state the driver path left."""
    from runtime.project import Project

    rng = random.Random(seed)
    flow = write_project(project_dir, OUTER_FLOW, OUTER_ACTIONS)
    users: dict[str, str] = {}
    lines: list[str] = []
    for run, path in enumerate(("executors", "driver", "executors")):
        (project_dir / "tidehouse.yaml").write_text(f"materializer:\n  data_path: {path}\n")
        more = outer_run(rng, users, run, project_dir)
        lines += more
        project = Project.open()
        try:
            plan = project.plan(flow if run == 0 else "testflow", spark=spark)
            tasks = [
                (t, plan.table(t).writer_id + w)
                for t in ("ads.users_events", "ads.all_events")
                for w in (":delta", ":gone")
            ]
            before = [project.store.last_seq(t, w) if run else None for t, w in tasks]
            report = project.trigger(flow if run == 0 else "testflow", until_idle=True, spark=spark)
            assert report.data_path == path
            check_outer(project, lines, users, f"run {run} ({path})")
            bound = len(more) + len(OUTER_RUNS[run][0] or {}) if run else None  # the events, changed users
            for table in OUTER_ORACLE if run else ():  # no rebuild read the inputs whole
                assert report.tables[table]["rows_in"] <= bound, (table, report.tables[table])
            if run == 2:  # the tasks wrote on the state and output the driver path's run left
                for (table, writer), seq in zip(tasks, before):
                    assert (project.store.last_seq(table, writer) or -1) > (seq or -1), (table, writer)
        finally:
            project.close()
