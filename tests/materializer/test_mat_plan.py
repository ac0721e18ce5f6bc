"""Plans: strategies per table, deterministic JSON, SQL errors and refused shapes with locations."""

from __future__ import annotations

import json

import pytest

from runtime.core.errors import ErrorCode, TidehouseError
from tests.materializer._flowkit import ACTIONS, FLOW, write_project

pytestmark = pytest.mark.spark


def _plan(path):
    from runtime.project import Project

    project = Project.open()
    try:
        return project.plan(path)
    finally:
        project.close()


def test_plan_strategies_and_deterministic_json(spark, project_dir):
    path = write_project(project_dir)
    plan = _plan(path)
    strategies = {t.name: t.strategy for t in plan.tables}
    assert strategies == {
        "ods.clicks": "append",
        "dwd.clicks": "append",
        "dws.user_activity": "agg_log",  # a GROUP BY over a log table, on the driver path (local[2])
        "ads.low_users": "changelog",
        "ads.top_users": "topn",  # a global top-N over a primary-key table: kept incrementally
    }
    assert plan.generations == (
        ("ods.clicks",),
        ("dwd.clicks",),
        ("dws.user_activity",),
        ("ads.low_users", "ads.top_users"),
    )
    # the plan gives back the graph it was made of (what --full-refresh drops downstream)
    assert plan.graph().table_generations() == [list(g) for g in plan.generations]
    assert plan.graph().descendants(["dws.user_activity"]) == [
        "dws.user_activity",
        "ads.low_users",
        "ads.top_users",
    ]
    assert {t.name for t in plan.tables if t.passthrough} == {"ods.clicks"}  # t_ingest: SELECT * FROM raw
    assert "written as they are" in plan.table("ods.clicks").reason
    dwd = plan.table("dwd.clicks")
    assert {p.name: p.value for p in dwd.params} == {"min_price": 1.0, "valid": ["click", "view", "buy"]}
    assert plan.table("ods.clicks").quarantine == "ods.clicks__quarantine"
    assert plan.table("dws.user_activity").ddl == "`user_id` string, `events` bigint, `spend` double"
    assert plan.table("dws.user_activity").checkpoint.endswith(
        f"testflow/dws.user_activity/{plan.table('dws.user_activity').fingerprint[:12]}"
    )
    again = _plan(path)
    assert again.to_json() == plan.to_json()
    assert json.loads(plan.to_json())["tables"][0]["name"] == "ods.clicks"
    assert "ads_top_users" in plan.to_mermaid()


def test_fingerprint_follows_upstream_changes(spark, project_dir):
    path = write_project(project_dir)
    before = _plan(path)
    path.write_text(FLOW.replace("min_price: 1.0", "min_price: 2.0"))
    after = _plan(path)
    for name in ("dwd.clicks", "dws.user_activity", "ads.low_users", "ads.top_users"):
        assert before.table(name).fingerprint != after.table(name).fingerprint, name
    assert before.table("ods.clicks").fingerprint == after.table("ods.clicks").fingerprint
    # the trigger does not change what a table holds: same fingerprint, same checkpoint
    path.write_text(FLOW.replace("trigger: 100ms", "trigger: 2s"))
    assert _plan(path).table("dwd.clicks").fingerprint == before.table("dwd.clicks").fingerprint


def test_sql_error_points_at_action_file_and_flow_table(spark, project_dir):
    actions = dict(ACTIONS)
    actions["t_clean.sql"] = ACTIONS["t_clean.sql"].replace("item_id, price", "item_idd, price")
    path = write_project(project_dir, actions=actions)
    with pytest.raises(TidehouseError) as err:
        _plan(path)
    e = err.value
    assert e.code == ErrorCode.ACTION_SQL_INVALID
    assert e.location.file.endswith("t_clean.sql")
    assert (e.location.line, e.location.col) == (9, 50)  # where item_idd stands in the SELECT line
    assert "layers.dwd.clicks" in e.message and "item_idd" in e.message


def test_unsupported_shape_is_refused_at_the_flow_table(spark, project_dir):
    flow = FLOW.replace(
        """      primary_key: [user_id]
      buckets: 2""",
        "      buckets: 2",
    )  # an aggregation into a log table
    path = write_project(project_dir, flow=flow)
    with pytest.raises(TidehouseError) as err:
        _plan(path)
    e = err.value
    assert e.code == ErrorCode.SHAPE_UNSUPPORTED
    assert e.location.path == "layers.dws.user_activity"
    assert e.location.line == 17  # the table's mapping (its first key, action:)
    assert "primary_key" in e.hint


def test_nondeterministic_sql_is_refused(spark, project_dir):
    actions = dict(ACTIONS)
    actions["t_clean.sql"] = ACTIONS["t_clean.sql"].replace(
        "item_id, price", "item_id, price * rand() AS price"
    )
    path = write_project(project_dir, actions=actions)
    with pytest.raises(TidehouseError) as err:
        _plan(path)
    assert err.value.code == ErrorCode.SHAPE_UNSUPPORTED
    assert "rand()" in err.value.message


def test_cli_plan_json_and_text(spark, project_dir, run_cli):
    write_project(project_dir)
    code, out, err = run_cli("flow", "plan", "flows/testflow.yaml", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert [t["strategy"] for t in data["tables"]] == [
        "append",
        "append",
        "agg_log",
        "changelog",
        "topn",
    ]
    code, out, _ = run_cli("flow", "plan", "flows/testflow.yaml")
    assert code == 0 and "strategy topn" in out and "generation 3 (ads)" in out
    code, _, err = run_cli("flow", "plan", "flows/nope.yaml")
    assert code == 2 and "nope.yaml" in err


@pytest.mark.parametrize(
    "sql, identity",
    [
        ("SELECT * FROM raw", True),
        ("select a, b, c from raw", True),
        ("SELECT raw.* FROM raw", True),
        ("SELECT * FROM (SELECT * FROM raw) t", True),
        ("SELECT a, b FROM raw", False),  # drops a column
        ("SELECT b, a, c FROM raw", False),  # reorders
        ("SELECT a AS a, b, c FROM raw", False),  # an alias is a new column (kept conservative)
        ("SELECT a, b, CAST(c AS string) AS c FROM raw", False),
        ("SELECT *, 1 AS d FROM raw", False),
        ("SELECT * FROM raw WHERE a IS NOT NULL", False),
        ("SELECT DISTINCT * FROM raw", False),
        ("SELECT * FROM raw ORDER BY a", False),
        ("SELECT * FROM raw UNION ALL SELECT * FROM raw", False),
        ("SELECT * FROM raw LIMIT 5", False),
    ],
)
def test_identity_sql_is_recognised(spark, sql, identity):
    """Only SQL that returns its one input unchanged may skip running (the pass-through of ``ingest``)."""
    from materializer.analyze import sql_shape, struct_of

    session = spark.newSession()
    session.createDataFrame([], struct_of("a string, b double, c timestamp")).createOrReplaceTempView("raw")
    assert sql_shape(session.sql(sql)).identity is identity
