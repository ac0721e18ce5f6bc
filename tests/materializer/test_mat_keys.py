"""A primary key must name one row of the result: per group of a GROUP BY (and a global aggregate has one
row, also over no input), per input key of a row-wise query over a primary-key table's changelog.

A streaming aggregation (``aggregate``) upserts each changed group's row by the key, never deleting a row:
keyed by an aggregate (``count(*) AS n``) or by fewer columns than the GROUP BY, it kept old rows and mixed
groups. The ``changelog`` strategy upserts and deletes each input row's output by the key: keyed by a non-key
column, rows of different input keys overwrote and deleted each other. Both gave tables unequal to the
batch result, silently. Such tables are recomputed now (equal to the batch result, a duplicate key a clear
error), and ``flow plan`` says why; a key that names the rows keeps the fast strategies."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tests._support import scale
from tests.materializer._flowkit import (
    ACTIONS,
    FLOW,
    ORACLE,
    canon,
    make_events,
    oracle_connection,
    write_batch,
    write_project,
)

pytestmark = pytest.mark.spark

CASES = [
    # (SQL over raw(a string, b double, c timestamp), primary key, refusal for a streaming aggregation)
    ("SELECT a, count(*) AS n FROM raw GROUP BY a", ("a",), ""),
    ("SELECT a AS k, b, count(*) AS n FROM raw GROUP BY a, b", ("k", "b"), ""),
    ("SELECT n, k FROM (SELECT a AS k, count(*) AS n FROM raw GROUP BY a)", ("k",), ""),
    ("SELECT upper(a) AS u, count(*) AS n FROM raw GROUP BY upper(a)", ("u",), ""),
    ("SELECT 'all' AS id, count(*) AS n FROM raw", ("id",), ""),  # a global aggregate: one row
    # the group's key as a field of the latest row (the shipped dedupe_by_key): not known, so not refused
    ("SELECT latest.* FROM (SELECT max_by(struct(*), c) AS latest FROM raw GROUP BY a)", ("a",), ""),
    (
        "SELECT window.start AS ws, a, count(*) AS n FROM raw WATERMARK c DELAY OF INTERVAL 60 SECONDS "
        "GROUP BY window(c, '1 minute'), a",
        ("ws", "a"),
        "",
    ),
    (
        "SELECT window.start AS ws, window.end AS we, a, count(*) AS n FROM raw "
        "GROUP BY window(c, '10 minutes', '5 minutes'), a",
        ("we", "a"),
        "",
    ),
    ("SELECT a, count(*) AS n FROM raw GROUP BY a", ("n",), "holds n, an aggregate's value"),
    ("SELECT a, count(*) AS n FROM raw GROUP BY a", ("a", "n"), "holds n, an aggregate's value"),
    ("SELECT a, count(*) AS n FROM raw GROUP BY a, b", ("a",), "lacks a GROUP BY expression"),
    ("SELECT count(*) AS n, sum(b) AS s FROM raw", ("n",), "holds n, an aggregate's value"),
    (
        "SELECT window.start AS ws, a, count(*) AS n FROM raw GROUP BY window(c, '1 minute'), a",
        ("a",),
        "lacks a GROUP BY expression",
    ),
]


@pytest.fixture(scope="module")
def session(spark):
    from materializer.analyze import struct_of

    s = spark.newSession()
    s.createDataFrame([], struct_of("a string, b double, c timestamp")).createOrReplaceTempView("raw")
    return s


@pytest.mark.parametrize("sql, key, why", CASES)
def test_which_keys_name_the_groups(session, sql, key, why):
    from materializer.analyze import sql_shape
    from materializer.shape import decide

    shape = sql_shape(session.sql(sql))
    assert shape.aggregate_keys is not None
    got = shape.aggregate_keys.refusal(key, whole=True)
    assert (why in got and got) if why else got == ""
    decision = decide("dws.x", shape, [("rows", "log")], primary_key=key, data_path="executors")
    if why:
        assert decision.strategy == "recompute" and why in decision.reason
    elif "window.start" not in sql or "WATERMARK" in sql:
        assert decision.strategy == "aggregate", decision.reason


def test_a_changelog_aggregate_keyed_beyond_its_groups_stays_incremental(session):
    from materializer.analyze import sql_shape

    keys = sql_shape(session.sql("SELECT a, count(*) AS n FROM raw GROUP BY a")).aggregate_keys
    assert keys.refusal(("a", "n"), whole=False) == ""  # agg_changelog moves a row whose key changed
    assert "lacks a GROUP BY" in keys.refusal(("n",), whole=False)


ACT = {
    **ACTIONS,
    "t_totals.sql": """/*---
name: t_totals
description: every event counted, one row
inputs: [events]
---*/
SELECT count(*) AS n, sum(price) AS total FROM events
""",
    "t_per_user.sql": """/*---
name: t_per_user
description: events per user, keyed by the count
inputs: [events]
---*/
SELECT user_id, count(*) AS n FROM events GROUP BY user_id
""",
    "t_everyone.sql": """/*---
name: t_everyone
description: every user's activity at once (a global aggregate over a changelog)
inputs: [activity]
---*/
SELECT 'all' AS id, 7 AS version, count(*) AS users, sum(spend) AS spend, max(events) AS most FROM activity
""",
    "t_ranked.sql": """/*---
name: t_ranked
description: the top 5 users by events, ties sharing a rank
inputs: [activity]
---*/
SELECT * FROM (
  SELECT rank() OVER (ORDER BY events DESC) AS rank, user_id, events FROM activity
) WHERE rank <= 5
""",
    "t_mid_counts.sql": """/*---
name: t_mid_counts
description: users per event count, keyed by the users
inputs: [activity]
---*/
SELECT events, count(*) AS users FROM activity GROUP BY events
""",
}
TABLES = """    totals:
      action: t_totals
      inputs: {events: dwd.clicks}
      primary_key: [n]
    per_user:
      action: t_per_user
      inputs: {events: dwd.clicks}
      primary_key: [user_id, n]
    everyone:
      action: t_everyone
      inputs: {activity: dws.user_activity}
      primary_key: [id]
    counts:
      action: t_mid_counts
      inputs: {activity: dws.user_activity}
      primary_key: [events, users]
"""
CLEAN = ORACLE["dwd.clicks"]
EXPECTED = {
    "ads.totals": f"SELECT count(*) AS n, sum(price) AS total FROM ({CLEAN})",
    "ads.per_user": f"SELECT user_id, count(*) AS n FROM ({CLEAN}) GROUP BY user_id",
    "ads.counts": f"SELECT events, count(*) AS users FROM ({ORACLE['dws.user_activity']}) GROUP BY events",
    "ads.everyone": (
        "SELECT 'all' AS id, 7 AS version, count(*) AS users, sum(spend) AS spend, max(events) AS most "
        f"FROM ({ORACLE['dws.user_activity']})"
    ),
}


def test_aggregates_keyed_by_their_values_equal_the_batch_result(spark, project_dir, data_path, seed):
    if data_path == "executors" and not scale(0, 1):
        pytest.skip("the same strategies on the executor path: TIDEHOUSE_SCALE=full runs it too")
    from runtime.project import Project

    rng = random.Random(seed)
    flow = write_project(project_dir, FLOW.replace("  ads:\n", "  ads:\n" + TABLES), ACT)
    project = Project.open()
    lines: list[str] = []
    try:
        plan = project.plan(flow, spark=spark)
        assert plan.table("ads.totals").strategy == "recompute"
        assert "holds n, an aggregate's value" in plan.table("ads.totals").reason
        assert plan.table("ads.per_user").strategy == "recompute"
        assert plan.table("ads.counts").strategy == "agg_changelog"  # keyed beyond its group: rows move
        assert plan.table("ads.everyone").strategy == "agg_changelog", plan.table("ads.everyone").reason
        for run in range(scale(2, 3)):  # the first run has no input: a global aggregate still has its row
            more = make_events(rng, 40 * (run > 0), bad=0)
            write_batch(project_dir, f"part-{run}", more)
            lines += more
            project.trigger(flow if run == 0 else "testflow", until_idle=True, spark=spark)
            con = oracle_connection(lines)
            for name, sql in EXPECTED.items():
                assert canon(project.store.scan(name)) == canon(con.sql(sql).to_arrow_table()), (name, run)
    finally:
        project.close()


ROW_CASES = [
    # (SQL over activity(user_id string, events bigint, tags array<string>) keyed by user_id, key, refusal)
    ("SELECT user_id, events FROM activity WHERE events < 3", ("user_id",), ""),
    ("SELECT user_id AS u, upper(user_id) AS up, events FROM activity", ("u",), ""),
    ("SELECT * FROM (SELECT user_id, events FROM activity) WHERE events > 1", ("user_id", "events"), ""),
    ("SELECT upper(user_id) AS up, events FROM activity", ("up",), ""),  # an expression: trusted
    ("SELECT user_id, explode(tags) AS tag FROM activity", ("user_id", "tag"), ""),
    ("SELECT user_id, events FROM activity WHERE events < 3", ("events",), "does not hold the input's key"),
    ("SELECT user_id, explode(tags) AS tag FROM activity", ("user_id",), "holds no generated column"),
]


@pytest.mark.parametrize("sql, key, why", ROW_CASES)
def test_which_keys_follow_a_changelog_row_by_row(spark, sql, key, why):
    from materializer.analyze import sql_shape, struct_of
    from materializer.shape import decide

    s = spark.newSession()
    ddl = "user_id string, events bigint, tags array<string>"
    s.createDataFrame([], struct_of(ddl)).createOrReplaceTempView("activity")
    shape = sql_shape(s.sql(sql))
    assert shape.row_keys is not None
    got = shape.row_keys.refusal(key, ("user_id",))
    assert (why in got and got) if why else got == ""
    decision = decide(
        "ads.x", replace(shape, row_key_refusal=got), [("activity", "primary_key")], primary_key=key
    )
    assert decision.strategy == ("recompute" if why else "changelog"), decision.reason
    if why:
        assert why in decision.reason


BAD_KEYS = {
    # ``SELECT user_id, events ... WHERE events < 3`` keyed by events: followed row by row, two users with the
    # same count overwrote each other and one leaving deleted the other's row (the table silently held 1 or 2
    # rows of many); recomputed now, the duplicate key a clear error
    "small": ("t_small", "events", "recompute"),
    # rank() gives tied rows one rank: keyed by the rank, the top-N's rows overwrote each other (the table
    # held 2 of its 5+ rows, silently); the difference written is checked for one row per key first now
    "ranked": ("t_ranked", "rank", "topn"),
}


def test_a_key_that_names_several_rows_fails_clearly_instead_of_losing_rows(spark, project_dir):
    from runtime.core.errors import ErrorCode, TidehouseError
    from runtime.project import Project

    write_project(project_dir, FLOW, ACT)
    write_batch(project_dir, "part-0", make_events(random.Random(3), 60, users=30, bad=0))  # ties, counts 1-2
    project = Project.open()
    try:
        for name, (action, key, strategy) in BAD_KEYS.items():  # one at a time: each run fails on its table
            table = (
                f"    {name}:\n      action: {action}\n      inputs: {{activity: dws.user_activity}}\n"
                f"      primary_key: [{key}]\n"
            )
            flow = write_project(project_dir, FLOW.replace("  ads:\n", "  ads:\n" + table), ACT)
            planned = project.plan(flow, spark=spark).table(f"ads.{name}")
            assert planned.strategy == strategy, planned.reason
            if strategy == "recompute":
                assert "does not hold the input's key (user_id)" in planned.reason
            with pytest.raises(TidehouseError) as err:
                project.trigger(flow, until_idle=True, spark=spark)
            assert err.value.code == ErrorCode.PRIMARY_KEY_INVALID and f"ads.{name}" in err.value.message
    finally:
        project.close()
