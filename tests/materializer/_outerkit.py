"""The outer join_log tests' flow (joins that keep the users without events), its actions, input and batch
oracle: tests/materializer/test_mat_join_log_outer.py, and over Spark Connect tests/cluster."""

from __future__ import annotations

import json
import random

from tests.materializer._flowkit import write_batch
from tests.materializer._logjoinkit import CLEAN, TIER_ACTIONS, TIER_FLOW, check_joined, write_users

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
    check_joined(project, lines, users, OUTER_ORACLE, f"{when}: ")


def outer_events(rng: random.Random, start: int, users: list[str], pool: list[int]) -> list[str]:
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


# (the users changed, the users of one event each, the users of as many others): u4-u7 have no event in
# run 0 and get their first in runs 1 and 2 while unchanged; u2's and u3's tiers change in the batches of
# their events, u1's without events, u8 joins the dimension in run 2
OUTER_RUNS = [
    (None, ["u0", "u1", "u2", "u3"], [0, 1, 2, 3, 8, 9]),
    ({"u2": "silver", "u1": "silver"}, ["u4", "u5", "u2", "u0"], [0, 2, 3, 4, 5, 9, 10]),
    ({"u3": "silver", "u8": "basic"}, ["u6", "u7", "u3", "u8", "u4"], list(range(12))),
]


def outer_run(rng: random.Random, users: dict[str, str], run: int, project_dir) -> list[str]:
    """Write run ``run``'s input (:data:`OUTER_RUNS`; run 0: tiers of u0-u7 at random): its events' lines."""
    changed, who, pool = OUTER_RUNS[run]
    if changed is None:
        changed = {f"u{i}": rng.choice(["gold", "basic"]) for i in range(8)}
    write_users(project_dir, f"users-{run}", users, changed)
    more = outer_events(rng, 100 * run, who, pool)
    write_batch(project_dir, f"part-{run}", more)
    return more
