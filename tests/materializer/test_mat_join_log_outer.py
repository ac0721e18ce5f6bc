"""join_log with a join that keeps the primary-key input's unmatched rows (users without events): a user's
NULL-padded row is in the output until its first event and gone after. On the executor path the events of
users a batch did not change are joined by tasks there too (materializer.incremental.joinlog, step (3a)
deletes the unmatched rows of users with their first events); hot and lake equal the DuckDB oracle run after
run, on both data paths; a filter below the join on the events' side keeps the batch function."""

from __future__ import annotations

import json
import random
import time

import pyarrow as pa
import pytest

from tests._support import scale
from tests.materializer._flowkit import canon, oracle_connection, write_batch, write_project
from tests.materializer._killkit import kill_9, trigger_process, wait_for
from tests.materializer._logjoinkit import CLEAN, TIER_ACTIONS, TIER_FLOW, write_users

pytestmark = pytest.mark.spark

OUTER_ACTIONS = {
    **TIER_ACTIONS,
    "t_users_events.sql": """/*---
name: t_users_events
description: every user with their events, a user without events once (left join, the events on the right)
inputs: [events, users]
---*/
SELECT coalesce(e.item_id, concat('none-', u.user_id)) AS item_id, u.user_id, u.tier, e.price
FROM users u LEFT JOIN events e ON e.user_id = u.user_id
""",
    "t_all_events.sql": """/*---
name: t_all_events
description: events and users, each without a match once (full join)
inputs: [events, users]
---*/
SELECT coalesce(e.item_id, concat('none-', u.user_id)) AS item_id, e.user_id, u.tier
FROM events e FULL JOIN users u ON e.user_id = u.user_id
""",
    "t_big_events.sql": """/*---
name: t_big_events
description: every user with their events over 10, a user without such events once (a filter below the join)
inputs: [events, users]
---*/
SELECT coalesce(e.item_id, concat('none-', u.user_id)) AS item_id, u.user_id, u.tier
FROM users u LEFT JOIN (SELECT * FROM events WHERE price > 10) e ON e.user_id = u.user_id
""",
}
OUTER_FLOW = (
    TIER_FLOW.split("  ads:\n")[0]
    + """  ads:
    users_events:
      action: t_users_events
      inputs: {events: dwd.clicks, users: dws.users}
      primary_key: [item_id]
      buckets: 2
    all_events:
      action: t_all_events
      inputs: {events: dwd.clicks, users: dws.users}
      primary_key: [item_id]
    big_events:
      action: t_big_events
      inputs: {events: dwd.clicks, users: dws.users}
      primary_key: [item_id]
"""
)
OUTER_ORACLE = {
    "ads.users_events": (
        "SELECT coalesce(e.item_id, concat('none-', u.user_id)) AS item_id, u.user_id, u.tier, e.price "
        f"FROM users u LEFT JOIN ({CLEAN}) e ON e.user_id = u.user_id"
    ),
    "ads.all_events": (
        "SELECT coalesce(e.item_id, concat('none-', u.user_id)) AS item_id, e.user_id, u.tier "
        f"FROM ({CLEAN}) e FULL JOIN users u ON e.user_id = u.user_id"
    ),
    "ads.big_events": (
        "SELECT coalesce(e.item_id, concat('none-', u.user_id)) AS item_id, u.user_id, u.tier "
        f"FROM users u LEFT JOIN (SELECT * FROM ({CLEAN}) WHERE price > 10) e ON e.user_id = u.user_id"
    ),
}


def check_outer(project, lines: list[str], users: dict[str, str], when: str) -> None:
    con = oracle_connection(lines)
    con.register("users", pa.table({"user_id": list(users), "tier": list(users.values())}))
    for table, sql in OUTER_ORACLE.items():
        want = canon(con.sql(sql).to_arrow_table())
        assert canon(project.store.scan(table)) == want, f"{when}: hot {table}"
        assert canon(project.lake.load(table).scan().to_arrow()) == want, f"{when}: lake {table}"


def _events(rng: random.Random, start: int, users: list[str], pool: list[int]) -> list[str]:
    """An event of each of ``users``, then as many of users drawn from ``pool`` (u8-u11 join no user at
    first)."""
    picks = users + [f"u{rng.choice(pool)}" for _ in users]
    return [
        json.dumps(
            {
                "user_id": user,
                "event_type": "buy",
                "item_id": f"e{start + i}",
                "price": round(rng.uniform(0.5, 20), 2),
                "ts": "2024-01-01T00:00:00Z",
            }
        )
        for i, user in enumerate(picks)
    ]


def test_joins_keeping_unmatched_users_have_batch_semantics_over_runs(spark, project_dir, data_path, seed):
    """Runs of new events and dimension changes; each run's hot and lake tables equal the oracle. u4-u7 have
    no event in run 0 and get their first in runs 1 and 2 while unchanged (on the executor path: their
    unmatched rows deleted by the tasks, (3a)); u2's and u3's tiers change in the batches of their events,
    u1's without events, u8 joins the dimension in run 2."""
    from runtime.project import Project

    rng = random.Random(seed)
    flow = write_project(project_dir, OUTER_FLOW, OUTER_ACTIONS)
    users: dict[str, str] = {}
    lines: list[str] = []
    runs = [  # (the users changed, the users of one event each, the users of the others)
        (
            {f"u{i}": rng.choice(["gold", "basic"]) for i in range(8)},
            ["u0", "u1", "u2", "u3"],
            [0, 1, 2, 3, 8, 9],
        ),
        ({"u2": "silver", "u1": "silver"}, ["u4", "u5", "u2", "u0"], [0, 2, 3, 4, 5, 9, 10]),
        ({"u3": "silver", "u8": "basic"}, ["u6", "u7", "u3", "u8", "u4"], list(range(12))),
    ]
    project = Project.open()
    try:
        plan = project.plan(flow, spark=spark)
        for table in OUTER_ORACLE:
            assert plan.table(table).strategy == "join_log", plan.table(table).reason
        for run, (changed, who, pool) in enumerate(runs):
            write_users(project_dir, f"users-{run}", users, changed)
            more = _events(rng, 100 * run, who, pool)
            write_batch(project_dir, f"part-{run}", more)
            lines += more
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
        more = _events(rng, 100 * n, who, list(range(12)))
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
