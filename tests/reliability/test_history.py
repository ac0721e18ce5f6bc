"""The lake is every table's history: with retention of one second and tiny segments, over several runs with
more input and a ``kill -9`` of a running flow, every reader still gets every row exactly once.

Readers covered (docs/architecture.md, "History"): the 4-layer flow itself (append, aggregate, changelog and
recompute tables); a flow whose queries were stopped while retention trimmed their inputs past their
checkpointed offsets (a log input read by a Spark stream, a primary-key input followed by its changelog:
resync); and a flow added after retention that reads an existing table from its start (a copy of the log, a
recompute over it). Every hot table (``tidehouse query``: lake + hot tail) and every lake table (plain
pyiceberg) equals the batch oracle as a multiset.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from tests.materializer._flowkit import (
    canon,
    make_events,
    oracle,
    oracle_connection,
    write_batch,
    write_project,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.reliability]

EXTRA_ACTIONS = {
    "t_items.sql": "/*---\nname: t_items\ndescription: events per item\ninputs: [events]\n---*/\n"
    "SELECT item_id, count(*) AS n FROM events GROUP BY item_id\n",
    "t_copy.sql": "/*---\nname: t_copy\ndescription: the rows as they are\ninputs: [events]\n---*/\n"
    "SELECT * FROM events\n",
    "t_distinct.sql": "/*---\nname: t_distinct\ndescription: distinct users per item, recomputed\n"
    "inputs: [events]\n---*/\n"
    "SELECT item_id, count(DISTINCT user_id) AS users FROM events GROUP BY item_id\n",
}
LATE = """flow: late
trigger: 100ms
layers:
  dws:
    items: {action: t_items, inputs: {events: dwd.clicks}, primary_key: [item_id]}
  ads:
    low2: {action: t_small, inputs: {activity: dws.user_activity}, primary_key: [user_id]}
"""
NEWCOMER = """flow: newcomer
trigger: 100ms
layers:
  dwd:
    copy: {action: t_copy, inputs: {events: dwd.clicks}}
  dws:
    distinct_users: {action: t_distinct, inputs: {events: dwd.clicks}, primary_key: [item_id]}
"""
CLEAN = "lower(event_type) IN ('click', 'view', 'buy') AND price >= 1.0"
MORE_ORACLE = {
    "dws.items": f"SELECT item_id, count(*) AS n FROM raw WHERE {CLEAN} GROUP BY item_id",
    "ads.low2": (
        f"SELECT user_id, count(*) AS events FROM raw WHERE {CLEAN} GROUP BY user_id HAVING count(*) < 3"
    ),
    "dwd.copy": f"SELECT user_id, lower(event_type) AS event_type, item_id, price, ts FROM raw WHERE {CLEAN}",
    "dws.distinct_users": (
        f"SELECT item_id, count(DISTINCT user_id) AS users FROM raw WHERE {CLEAN} GROUP BY item_id"
    ),
}


def _kill_mid_run(project_dir, home, rng, lines: list[str]) -> None:
    """Run `tidehouse flow trigger testflow` (continuous, tiering every second), feed it, wait until tiering
    has trimmed the hot log under it, then kill -9 its whole process group."""
    from runtime.storage import open_store

    env = dict(os.environ, TIDEHOUSE_HOME=str(home))
    log_path = project_dir.parent / "trigger.log"
    with open(log_path, "wb") as log_file:  # a file, not a pipe: a full pipe would block the child
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from runtime.cli import run; run()",
                "flow",
                "trigger",
                "testflow",
                "--duration",
                "400",
            ],
            cwd=project_dir,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            store = open_store(str(home / "hot"))
            before = sum(store.end_offsets("dws.user_activity"))
            for part in range(3):
                batch = make_events(rng, 60, users=20, bad=1)
                lines += batch
                write_batch(project_dir, f"run2-{part}", batch)
                time.sleep(1.0)
            deadline = time.time() + 300
            while time.time() < deadline:  # it caught up with new input, and retention trimmed under it
                assert proc.poll() is None, (
                    "the flow stopped: " + log_path.read_text(errors="replace")[-3000:]
                )
                if (
                    sum(store.end_offsets("dws.user_activity")) > before
                    and min(store.start_offsets("dwd.clicks")) > 0
                ):
                    break
                time.sleep(0.5)
            else:
                raise AssertionError(
                    "the running flow never caught up and trimmed: "
                    + log_path.read_text(errors="replace")[-3000:]
                )
            time.sleep(rng.uniform(0.0, 2.0))
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)


def test_every_reader_gets_every_row_once_after_retention_and_a_kill_9(spark, project_dir, home, seed):
    from runtime.project import Project

    (project_dir / "tidehouse.yaml").write_text(
        "storage:\n  retention: 1s\n  segment_bytes: 2048\n  fsync: false\n"
    )
    path = write_project(project_dir)
    for name, text in EXTRA_ACTIONS.items():
        (project_dir / "actions" / name).write_text(text)
    (project_dir / "flows" / "late.yaml").write_text(LATE)
    (project_dir / "flows" / "newcomer.yaml").write_text(NEWCOMER)
    rng = random.Random(seed)
    lines = make_events(rng, 150, users=20)
    write_batch(project_dir, "run1", lines)
    project = Project.open()
    try:
        project.trigger(path, until_idle=True, spark=spark)  # run 1
        project.trigger(project_dir / "flows" / "late.yaml", until_idle=True, spark=spark)  # then it stops
        late_read = {t: project.store.end_offsets(t) for t in ("dwd.clicks", "dws.user_activity")}
        time.sleep(1.3)
        project.close()  # the primary-key state has one writer process at a time: the flow's, now
        _kill_mid_run(project_dir, home, rng, lines)  # run 2, killed
        more = make_events(rng, 120, users=20)
        lines += more
        write_batch(project_dir, "run3", more)
        time.sleep(1.3)
        project.trigger("testflow", until_idle=True, spark=spark)  # run 3 resumes; its final tiering trims
        for table, read_upto in late_read.items():  # retention went past what flow `late` has read
            firsts = project.store.start_offsets(table)
            assert any(f > r for f, r in zip(firsts, read_upto)), (
                f"{table}: first {firsts}, late read {read_upto}"
            )

        project.trigger("late", until_idle=True, spark=spark)  # its offsets were trimmed meanwhile
        project.trigger(
            project_dir / "flows" / "newcomer.yaml", until_idle=True, spark=spark
        )  # from the start

        expected = {
            name: bag
            for name, bag in oracle(lines).items()
            if name.count(".") == 1 and "quarantine" not in name
        }
        con = oracle_connection(lines)
        expected.update({name: canon(con.sql(sql).to_arrow_table()) for name, sql in MORE_ORACLE.items()})
        for table, want in expected.items():
            assert canon(project.query(f"SELECT * FROM {table}")) == want, f"hot {table}"
            assert canon(project.lake.load(table).scan().to_arrow()) == want, f"lake {table}"
    finally:
        project.close()
