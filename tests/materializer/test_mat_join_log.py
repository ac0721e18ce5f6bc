"""join_log: a join of a log table (events) with primary-key tables (a user's activity, and the users with few
events, which users leave) into a primary-key table has batch semantics — every event row shows its user's
current activity, so each new event revises the joined rows of its user already written, and a user leaving
the dimension turns a left join's columns to NULL. Hot and lake equal the DuckDB oracle over runs, on both
data paths, and after a kill -9 mid-run."""

from __future__ import annotations

import json
import random
import time
from collections import Counter

import pytest

from tests.materializer._flowkit import (
    ACTIONS,
    ORACLE,
    canon,
    flow_head,
    oracle_connection,
    write_batch,
    write_project,
)
from tests.materializer._killkit import kill_9, trigger_process, wait_for

pytestmark = pytest.mark.spark

LOG_JOIN_ACTIONS = {
    **ACTIONS,
    "t_low_enrich.sql": """/*---
name: t_low_enrich
description: events with their user's count while the user has few events (left join)
inputs: [events, low]
---*/
SELECT e.item_id, e.user_id, e.price, l.events AS low_events
FROM events e LEFT JOIN low l ON e.user_id = l.user_id
""",
}
LOG_JOIN_FLOW = flow_head("join_log, events joined with changing dimensions").replace(
    "      buckets: 2\n",
    """      buckets: 2
    low_users:
      action: t_small
      inputs: {activity: dws.user_activity}
      primary_key: [user_id]
  ads:
    enriched:
      action: t_enrich
      inputs: {events: dwd.clicks, activity: dws.user_activity}
      primary_key: [item_id]
      buckets: 2
    low_enriched:
      action: t_low_enrich
      inputs: {events: dwd.clicks, low: dws.low_users}
      primary_key: [item_id]
""",
)
LOW = f"SELECT user_id, events FROM ({ORACLE['dws.user_activity']}) WHERE events < 3"
CLEAN = ORACLE["dwd.clicks"]
LOG_JOIN_ORACLE = {
    "ads.enriched": (
        f"SELECT e.user_id, e.item_id, a.events AS user_events FROM ({CLEAN}) e "
        f"JOIN ({ORACLE['dws.user_activity']}) a ON e.user_id = a.user_id"
    ),
    "ads.low_enriched": (
        f"SELECT e.item_id, e.user_id, e.price, l.events AS low_events FROM ({CLEAN}) e "
        f"LEFT JOIN ({LOW}) l ON e.user_id = l.user_id"
    ),
}


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


def check(project, lines: list[str]) -> None:
    con = oracle_connection(lines)
    for table, sql in LOG_JOIN_ORACLE.items():
        want = canon(con.sql(sql).to_arrow_table())
        assert canon(project.store.scan(table)) == want, f"hot {table}"
        assert canon(project.lake.load(table).scan().to_arrow()) == want, f"lake {table}"


def test_log_joins_have_batch_semantics_over_runs(spark, project_dir, data_path, seed):
    from runtime.project import Project

    events = Events(random.Random(seed))
    flow = write_project(project_dir, LOG_JOIN_FLOW, LOG_JOIN_ACTIONS)
    lines: list[str] = []
    project = Project.open()
    try:
        plan = project.plan(flow, spark=spark)
        for table in LOG_JOIN_ORACLE:
            t = plan.table(table)
            assert t.strategy == "join_log", t.reason
            assert "batch semantics" in t.reason and t.exceptions == ()  # no processing-time lookup
        revised = Counter()
        for run, n in enumerate((40, 50, 60)):
            more = events.make(n)
            write_batch(project_dir, f"part-{run}", more)
            lines += more
            before = {r["item_id"]: r for r in project.store.scan("ads.enriched").to_pylist()} if run else {}
            project.trigger(flow if run == 0 else "testflow", until_idle=True, spark=spark)
            check(project, lines)
            after = {r["item_id"]: r for r in project.store.scan("ads.enriched").to_pylist()}
            revised["enriched"] += sum(1 for k, r in before.items() if after[k] != r)
        # the point of batch semantics: rows written in an earlier run were revised by later dimension changes
        assert revised["enriched"] > 0
        low = project.store.scan("ads.low_enriched").column("low_events").to_pylist()
        assert None in low  # users who left dws.low_users: their events lost the join's columns
    finally:
        project.close()


@pytest.mark.slow
@pytest.mark.reliability
def test_kill_9_mid_log_join_then_until_idle_is_exact(spark, project_dir, home, seed):
    from runtime.project import Project
    from runtime.storage import open_store

    rng = random.Random(seed)
    events = Events(rng)
    write_project(project_dir, LOG_JOIN_FLOW, LOG_JOIN_ACTIONS)
    lines = events.make(60)
    write_batch(project_dir, "part-0", lines)
    with trigger_process(project_dir, home) as proc:
        store = open_store(str(home / "hot"))
        wait_for(lambda: store.has_table("ads.enriched__state"), 420, "the join's first batch")
        for part in (1, 2, 3):  # dimension changes and new events while the join runs
            more = events.make(40)
            write_batch(project_dir, f"part-{part}", more)
            lines += more
            time.sleep(rng.uniform(0.3, 2.0))
        kill_9(proc)
    last = events.make(30)
    write_batch(project_dir, "part-4", last)
    lines += last
    project = Project.open()
    try:
        project.trigger("testflow", until_idle=True, spark=spark)
        check(project, lines)
    finally:
        project.close()
