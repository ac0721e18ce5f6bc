"""The join_log tests' events and their dimension of its own source (the executor path's tasks join the
events of users a batch did not change): the flow, its actions, its input and its batch oracle."""

from __future__ import annotations

import json
import random

from tests.materializer._flowkit import ACTIONS, ORACLE, canon, oracle_connection, write_batch

CLEAN = ORACLE["dwd.clicks"]


class Events:
    """Events with a unique item id each (the joined tables' primary key)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.n = rng, 0

    def make(self, count: int) -> list[str]:
        out = []
        for _ in range(count):
            self.n += 1
            out.append(
                json.dumps(
                    {
                        "user_id": f"u{self.rng.randrange(12)}",
                        "event_type": self.rng.choice(["click", "view", "buy"]),
                        "item_id": f"e{self.n}",
                        "price": round(self.rng.uniform(0.5, 20), 2),  # under 1.0: dropped by dwd
                        "ts": f"2024-01-01T00:{self.rng.randrange(60):02d}:00Z",
                    }
                )
            )
        return out


TIER_ACTIONS = {
    **ACTIONS,
    "t_tier.sql": """/*---
name: t_tier
description: events with their user's tier (inner join)
inputs: [events, users]
---*/
SELECT e.item_id, e.user_id, e.price, u.tier
FROM events e JOIN users u ON e.user_id = u.user_id
""",
    "t_tier_all.sql": """/*---
name: t_tier_all
description: events with their user's tier, NULL for an unknown user (left join)
inputs: [events, users]
---*/
SELECT e.item_id, e.user_id, u.tier
FROM events e LEFT JOIN users u ON e.user_id = u.user_id
""",
}
TIER_FLOW = """flow: testflow
description: join_log, events joined with a dimension of its own source
trigger: 100ms
tiering: {interval: 1s}
sources:
  clicks:
    format: json
    path: data/clicks
    schema: "user_id string, event_type string, item_id string, price double, ts timestamp"
  users:
    format: json
    path: data/users
    schema: "user_id string, tier string"
layers:
  ods:
    clicks: {action: t_ingest, inputs: {raw: clicks}}
    users: {action: t_ingest, inputs: {raw: users}}
  dwd:
    clicks: {action: t_clean, inputs: {events: ods.clicks}, params: {min_price: 1.0}}
  dws:
    users: {action: t_ingest, inputs: {raw: ods.users}, primary_key: [user_id]}
  ads:
    tiered:
      action: t_tier
      inputs: {events: dwd.clicks, users: dws.users}
      primary_key: [item_id]
      buckets: 2
      expect: [{name: not_platinum, condition: "tier <> 'platinum'", on_violation: quarantine}]
    tiered_all:
      action: t_tier_all
      inputs: {events: dwd.clicks, users: dws.users}
      primary_key: [item_id]
"""
TIER_ORACLE = {
    "ads.tiered": (
        f"SELECT e.item_id, e.user_id, e.price, u.tier FROM ({CLEAN}) e JOIN users u "
        "ON e.user_id = u.user_id WHERE u.tier <> 'platinum'"
    ),
    "ads.tiered_all": (
        f"SELECT e.item_id, e.user_id, u.tier FROM ({CLEAN}) e LEFT JOIN users u ON e.user_id = u.user_id"
    ),
}


def write_users(project_dir, name: str, users: dict[str, str], changed: dict[str, str]) -> None:
    """A file of the users source with ``changed`` (user -> tier), which ``users`` then holds."""
    folder = project_dir / "data" / "users"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = project_dir / "data" / f".{name}.tmp"
    tmp.write_text("".join(json.dumps({"user_id": u, "tier": t}) + "\n" for u, t in changed.items()))
    tmp.rename(folder / f"{name}.json")
    users.update(changed)


def check_joined(project, lines: list[str], users: dict[str, str], oracle: dict[str, str], when: str = ""):
    """Hot and lake tables equal ``oracle``'s SQL over the events ``lines`` and the dimension ``users`` (the
    view ``users``); returns the oracle's DuckDB connection."""
    import pyarrow as pa

    con = oracle_connection(lines)
    con.register("users", pa.table({"user_id": list(users), "tier": list(users.values())}))
    for table, sql in oracle.items():
        want = canon(con.sql(sql).to_arrow_table())
        assert canon(project.store.scan(table)) == want, f"{when}hot {table}"
        assert canon(project.lake.load(table).scan().to_arrow()) == want, f"{when}lake {table}"
    return con


def check_tiers(project, lines: list[str], users: dict[str, str]) -> None:
    """Hot and lake tables equal the oracle; ``ads.tiered``'s quarantine holds each of its violators (the
    events of platinum users) once."""
    con = check_joined(project, lines, users, TIER_ORACLE)
    violators = con.sql(TIER_ORACLE["ads.tiered"].replace("<> 'platinum'", "= 'platinum'")).fetchall()
    store, quarantine = project.store, "ads.tiered__quarantine"
    raws = store.scan(quarantine).column("raw").to_pylist() if store.has_table(quarantine) else []
    got = sorted((r["item_id"], r["user_id"], r["price"], r["tier"]) for r in map(json.loads, raws))
    assert got == sorted(violators), "quarantine of ads.tiered"


def tier_run(rng: random.Random, events: Events, users: dict[str, str], run: int, project_dir) -> list[str]:
    """Run ``run``'s input: new events every run; the dimension in runs 0 and 2 (a few tiers change) and 3
    (a new user), so runs 1 and 3 join most events with users the batch did not change."""
    if run == 0:
        write_users(
            project_dir, "users-0", users, {f"u{i}": rng.choice(["gold", "basic"]) for i in range(12)}
        )
    elif run == 2:
        write_users(project_dir, "users-2", users, {f"u{i}": "platinum" for i in rng.sample(range(12), 3)})
    elif run == 3:
        write_users(project_dir, "users-3", users, {"u12": "new"})
    more = events.make(40)
    if run == 3:  # users the dimension has (u12, added meanwhile) and never has (u13)
        more += [
            json.dumps({**json.loads(line), "user_id": f"u{12 + k % 2}"})
            for k, line in enumerate(events.make(20))
        ]
    write_batch(project_dir, f"part-{run}", more)
    return more
