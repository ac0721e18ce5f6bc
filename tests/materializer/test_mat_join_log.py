"""join_log: a join of a log table (events) with primary-key tables (a user's activity, and the users with few
events, which users leave) into a primary-key table has batch semantics — every event row shows its user's
current activity, so each new event revises the joined rows of its user already written, and a user leaving
the dimension turns a left join's columns to NULL. Hot and lake equal the DuckDB oracle over runs, on both
data paths, and after a kill -9 mid-run. On the executor path the events of users a batch did not change are
joined and written by tasks (materializer.incremental.joinlog), tested with a dimension of its own source —
also over Spark Connect (tests/cluster) and, with TIDEHOUSE_SCALE=full, on the object store."""

from __future__ import annotations

import json
import random
import time
from collections import Counter

import pyarrow as pa
import pytest

from tests._support import scale
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
from tests.materializer._logjoinkit import (
    CLEAN,
    TIER_ACTIONS,
    TIER_FLOW,
    TIER_ORACLE,
    Events,
    check_tiers,
    tier_run,
    write_users,
)

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
        if data_path == "executors":  # events of users dws.low_users no longer changes: joined by tasks
            writer = plan.table("ads.low_enriched").writer_id + ":delta"
            assert project.store.last_seq("ads.low_enriched", writer) is not None
            assert project.store.last_seq("ads.low_enriched__state", writer) is not None
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


# -- the executor path's tasks: events joined with a dimension that changes rarely ---------------------------
def run_tiers(spark, project_dir, seed: int, runs: int) -> dict[str, int | None]:
    """The tier flow's runs (:func:`tier_run`), each to idle and then equal to the oracle, hot and lake; per
    joined table, and for ``ads.tiered``'s quarantined violators, the last batch its tasks wrote
    (``<writer>:delta``; None: never)."""
    from runtime.project import Project

    rng = random.Random(seed)
    events = Events(rng)
    flow = write_project(project_dir, TIER_FLOW, TIER_ACTIONS)
    lines: list[str] = []
    users: dict[str, str] = {}
    project = Project.open()
    try:
        plan = project.plan(flow, spark=spark)
        assert {plan.table(t).strategy for t in TIER_ORACLE} == {"join_log"}
        for run in range(runs):
            lines += tier_run(rng, events, users, run, project_dir)
            project.trigger(flow if run == 0 else "testflow", until_idle=True, spark=spark)
            check_tiers(project, lines, users)
        tasks = {t: project.store.last_seq(t, plan.table(t).writer_id + ":delta") for t in TIER_ORACLE}
        quarantine, writer = "ads.tiered__quarantine", plan.table("ads.tiered").writer_id + ":delta:qe"
        return {**tasks, quarantine: project.store.last_seq(quarantine, writer)}
    finally:
        project.close()


@pytest.mark.parametrize("data_path", ["executors"], indirect=True)  # the driver path: the test below
def test_log_join_in_tasks_joins_unchanged_partitions_from_the_state(spark, project_dir, data_path, seed):
    """On the executor path the events of users the batch did not change are joined and written by tasks,
    the users' rows read from the join's state; the result is the batch SQL's, hot and lake, and the tasks
    quarantine the violators of ``ads.tiered``'s expectation (run 3's events of platinum users)."""
    for table, delta in run_tiers(spark, project_dir, seed, 4).items():
        assert delta is not None, table


@pytest.mark.slow
@pytest.mark.reliability
@pytest.mark.parametrize("data_path", ["executors"], indirect=True)
def test_kill_9_mid_log_join_in_tasks_then_until_idle_is_exact(spark, project_dir, home, data_path, seed):
    """kill -9 of a run on the executor path while its tasks join and write; the next run is exact."""
    from runtime.project import Project
    from runtime.storage import open_store

    rng = random.Random(seed)
    events = Events(rng)
    write_project(project_dir, TIER_FLOW, TIER_ACTIONS)
    lines: list[str] = []
    users: dict[str, str] = {}
    lines += tier_run(rng, events, users, 0, project_dir)
    with trigger_process(project_dir, home) as proc:
        store = open_store(str(home / "hot"))
        wait_for(lambda: store.has_table("ads.tiered__state"), 420, "the join's first batch")
        for run in (1, 2):
            lines += tier_run(rng, events, users, run, project_dir)
            time.sleep(rng.uniform(0.3, 2.0))
        kill_9(proc)
    lines += tier_run(rng, events, users, 3, project_dir)
    project = Project.open()
    try:
        project.trigger("testflow", until_idle=True, spark=spark)
        check_tiers(project, lines, users)
    finally:
        project.close()


def test_an_event_key_from_two_users_fails_the_batch_on_both_paths(spark, project_dir, data_path, seed):
    """An item id an earlier event of another user holds: the batch fails with TH243 — on the executor path
    refused by the task that writes the key, as the driver path refuses it — and writes nothing of it."""
    from runtime.core.errors import ErrorCode, TidehouseError
    from runtime.project import Project

    rng = random.Random(seed)
    events = Events(rng)
    flow = write_project(project_dir, TIER_FLOW, TIER_ACTIONS)
    users: dict[str, str] = {}
    lines = tier_run(rng, events, users, 0, project_dir)
    project = Project.open()
    try:
        project.trigger(flow, until_idle=True, spark=spark)
        first = next(e for e in map(json.loads, lines) if e["price"] >= 1.0)  # one dwd.clicks kept
        other = next(u for u in users if u != first["user_id"])
        write_batch(project_dir, "part-1", [json.dumps({**first, "user_id": other, "price": 9.5})])
        with pytest.raises(TidehouseError) as err:
            project.trigger("testflow", until_idle=True, spark=spark)
        assert err.value.code is ErrorCode.PRIMARY_KEY_INVALID, err.value.render()
        assert "two join key values" in err.value.message, err.value.render()
        check_tiers(project, lines, users)  # the refused event is in neither table
    finally:
        project.close()


TIER_ONLY_ACTIONS = {
    **TIER_ACTIONS,
    "t_tier_only.sql": """/*---
name: t_tier_only
description: events with their user's tier, without the user (two users' events can give equal rows)
inputs: [events, users]
---*/
SELECT e.item_id, u.tier FROM events e JOIN users u ON e.user_id = u.user_id
""",
}
TIER_ONLY_FLOW = TIER_FLOW.split("    tiered_all:")[0].replace("action: t_tier\n", "action: t_tier_only\n")


def test_one_key_with_equal_values_from_two_users_in_a_batch_fails_it_on_both_paths(
    spark, project_dir, data_path
):
    """Two events with one item id in a batch, of a user whose tier the batch changes (the executor path's
    driver step joins it) and of a user it does not (its tasks join it), both giving the same row: the
    batch fails with TH243 on both paths, as a key produced twice (the tasks are given the driver step's
    keys; the table's values could not tell it from a replay's own write)."""
    from runtime.core.errors import ErrorCode, TidehouseError
    from runtime.project import Project

    flow = write_project(project_dir, TIER_ONLY_FLOW, TIER_ONLY_ACTIONS)
    users: dict[str, str] = {}
    write_users(project_dir, "users-0", users, {"u0": "gold", "u1": "basic"})

    def event(user: str, item: str) -> str:
        ts = "2024-01-01T00:00:00Z"
        return json.dumps({"user_id": user, "event_type": "buy", "item_id": item, "price": 5.0, "ts": ts})

    write_batch(project_dir, "part-0", [event("u0", "e0"), event("u1", "e1")])
    project = Project.open()
    try:
        project.trigger(flow, until_idle=True, spark=spark)
        assert canon(project.store.scan("ads.tiered")) == canon(
            pa.table({"item_id": ["e0", "e1"], "tier": ["gold", "basic"]})
        )
        write_users(project_dir, "users-1", users, {"u0": "basic"})  # u0 changes, u1 does not
        write_batch(project_dir, "part-1", [event("u0", "x"), event("u1", "x")])
        with pytest.raises(TidehouseError) as err:
            project.trigger("testflow", until_idle=True, spark=spark)
        assert err.value.code is ErrorCode.PRIMARY_KEY_INVALID, err.value.render()
        assert "yields several rows for primary key ('x',)" in err.value.message, err.value.render()
    finally:
        project.close()


@pytest.mark.skipif(scale(True, False), reason="TIDEHOUSE_SCALE=full: join_log in tasks on the object store")
def test_log_join_in_tasks_on_the_object_store(spark, project_dir, seaweedfs, postgres, seed):
    """The executor path's join_log with the hot store on SeaweedFS + PostgreSQL and the lake in the REST
    catalog: the driver and the tasks take turns writing the output's and the state's buckets (the object
    store's shared writers); hot and lake equal the oracle run after run."""
    from tests.services import shared_settings, write_project_file

    settings = shared_settings(seaweedfs, postgres, registry=False)
    write_project_file(
        project_dir, settings, {"materializer": {"data_path": "executors"}, "tiering": {"executor_rows": 0}}
    )
    assert run_tiers(spark, project_dir, seed, 3)["ads.tiered"] is not None  # run 1: written by tasks


def test_a_log_join_moved_between_the_data_paths_keeps_its_checkpoint_and_state(spark, project_dir, seed):
    """The driver path, then the executor path (whose stream carries the log's rows), then the driver path
    again, on one checkpoint and one state: each run equals the oracle (the driver path's runs of the tier
    flow) and nothing is rebuilt."""
    from runtime.project import Project

    rng = random.Random(seed)
    events = Events(rng)
    flow = write_project(project_dir, TIER_FLOW, TIER_ACTIONS)
    lines: list[str] = []
    users: dict[str, str] = {}
    for run, path in enumerate(("driver", "executors", "driver")):
        (project_dir / "tidehouse.yaml").write_text(f"materializer:\n  data_path: {path}\n")
        more = tier_run(rng, events, users, run + 1 if run else 0, project_dir)
        lines += more
        project = Project.open()
        try:
            report = project.trigger(flow if run == 0 else "testflow", until_idle=True, spark=spark)
            assert report.data_path == path
            check_tiers(project, lines, users)
            if run:  # the run's new events and changed users (at most 3): no rebuild read the inputs whole
                assert report.tables["ads.tiered"]["rows_in"] <= len(more) + 3, report.tables["ads.tiered"]
            if path == "executors":  # and its tasks joined the events of unchanged users
                writer = project.plan("testflow", spark=spark).table("ads.tiered").writer_id + ":delta"
                assert project.store.last_seq("ads.tiered", writer) is not None
        finally:
            project.close()
