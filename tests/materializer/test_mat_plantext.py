"""The planner reads an analysed plan from Spark's explain text (so it runs over Spark Connect too); every
fact it reads equals the reference walk of the JVM plan, on edge queries and every shipped flow's tables."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.materializer._jvmshape import jvm_shape

pytestmark = pytest.mark.spark
REPO = Path(__file__).resolve().parents[2]

QUERIES = [
    "SELECT * FROM raw",
    "TABLE raw",
    "SELECT a, b, c FROM raw",
    "SELECT a AS a, b, c FROM raw",
    "SELECT b, a, c FROM raw",
    "SELECT * FROM (SELECT * FROM raw) t",
    "SELECT a, count(*) AS n, sum(b) AS s FROM raw GROUP BY a",
    "SELECT a, count(DISTINCT b) AS n FROM raw GROUP BY a",
    "SELECT a, count(*) AS n FROM raw GROUP BY a HAVING count(*) > 1",
    "SELECT * FROM (SELECT a, b, row_number() OVER (PARTITION BY a ORDER BY b DESC) AS r FROM raw) "
    "WHERE r <= 2",
    "SELECT a, b FROM raw ORDER BY b DESC LIMIT 3",
    "SELECT a, b FROM raw ORDER BY b",
    "SELECT DISTINCT a FROM raw",
    "SELECT r.a, d.v FROM raw r JOIN dim d ON r.a = d.k",
    "SELECT a FROM raw WHERE a IN (SELECT k FROM dim GROUP BY k)",
    "SELECT a, (SELECT max(v) FROM dim) AS top FROM raw",
    "SELECT a, rand() AS x FROM raw",
    "SELECT a, uuid() AS x FROM raw",
    "SELECT session_window(c, '5 minutes') AS sw, a, count(*) AS n FROM raw GROUP BY 1, 2",
    "SELECT window.start AS ws, a, count(*) AS n FROM raw WATERMARK c DELAY OF INTERVAL 60 SECONDS "
    "GROUP BY window(c, '1 minute'), a",
    "SELECT a, count(*) AS n FROM raw WATERMARK c DELAY OF INTERVAL 2 MINUTES GROUP BY a",
    "SELECT a FROM raw UNION ALL SELECT k FROM dim",
    "SELECT a FROM raw EXCEPT SELECT k FROM dim",
    "SELECT a, explode(array(1, 2)) AS e FROM raw",
]


@pytest.fixture(scope="module")
def session(spark):
    from materializer.analyze import struct_of

    s = spark.newSession()
    s.createDataFrame([], struct_of("a string, b double, c timestamp")).createOrReplaceTempView("raw")
    s.createDataFrame([], struct_of("k string, v bigint")).createOrReplaceTempView("dim")
    return s


def reference_facts(shape):
    """The facts the reference JVM walk reads (the incremental shapes are read from the text only: their own
    tests are tests/materializer/test_mat_incremental*.py, test_mat_join_changelog*.py and
    test_mat_aggregate_keys.py)."""
    from dataclasses import replace

    return replace(
        shape, topn=None, group_aggregate=None, join=None, join_refusal="", aggregate_keys=None, row_keys=None
    )


@pytest.mark.parametrize("sql", QUERIES)
def test_explain_text_reads_what_the_jvm_plan_holds(session, sql):
    from materializer.analyze import sql_shape

    df = session.sql(sql)
    assert reference_facts(sql_shape(df)) == jvm_shape(df)


def test_every_shipped_flow_table_reads_the_same_from_text_and_jvm(spark, project_dir, monkeypatch):
    from materializer import analyze
    from runtime.core.refs import FlowRef
    from runtime.project import Project

    seen: list[str] = []
    real = analyze.sql_shape

    def both(df):
        text = real(df)
        assert reference_facts(text) == jvm_shape(df), analyze.explain_text(df)
        seen.append(text.top)
        return text

    monkeypatch.setattr(analyze, "sql_shape", both)
    shutil.rmtree(project_dir / "actions")
    shutil.copytree(REPO / "actions", project_dir / "actions")
    project = Project.open()
    upstream: dict = {}
    try:
        for flow in ("ecommerce_activity", "order_attribution", "shop_trends"):
            shutil.copy(REPO / "flows" / f"{flow}.yaml", project_dir / "flows")
            resolved = project._resolve(FlowRef(path=project_dir / "flows" / f"{flow}.yaml"), spark)
            plan = analyze.build_plan(project, resolved, spark, upstream=upstream)
            upstream.update({t.name: t for t in plan.tables})
            project.registry.register_flow(project_dir / "flows" / f"{flow}.yaml")  # as a trigger does
    finally:
        project.close()
    assert len(seen) == len(upstream) >= 14
