"""A HAVING kept incrementally is typed by the column it compares: Spark's explain text prints a string
literal unquoted, so ``max(name) >= '5'`` must compare with the text "5", not the number 5 (a string compared
with an int: the micro-batch failed); comparisons of other types are recomputed, saying why."""

from __future__ import annotations

from dataclasses import replace

import pytest

from materializer.analyze import struct_of
from materializer.incremental.facts import Aggregation, Comparison, GroupAggregate
from materializer.incremental.literals import output_kinds, typed, typed_having

AGGS = (
    Aggregation("count", None, "n"),
    Aggregation("sum", "x", "s"),
    Aggregation("max", "name", "m"),
    Aggregation("min", "d", "first_day"),
    Aggregation("max", "k", "top"),
)
SCHEMA = struct_of("g string, x double, name string, d date, k decimal(10,2)")


def _facts(*having: Comparison) -> GroupAggregate:
    return GroupAggregate(("g",), AGGS, having, (("g", "g"), ("n", "n"), ("m", "m")))


def test_output_kinds():
    assert output_kinds(_facts(), SCHEMA) == {
        "g": "string",
        "n": "bigint",
        "s": "numeric",
        "m": "string",
        "first_day": "date",
        "top": "decimal",
    }


@pytest.mark.parametrize(
    "comparison, value",
    [
        (Comparison("m", ">=", 5, "5"), "5"),  # '5' printed bare: a string column means the text
        (Comparison("m", ">", 5, "5L"), "5L"),
        (Comparison("m", "=", None, "abc"), "abc"),
        (Comparison("g", "!=", None, "x.y"), "x.y"),  # a GROUP BY column
        (Comparison("n", ">", 1, ""), 1),  # cast(1 as bigint): a number
        (Comparison("s", ">", 1.5, "1.5"), 1.5),
        (Comparison("top", "<=", 3, "3"), 3),
    ],
)
def test_a_comparison_takes_its_columns_type(comparison, value):
    typed, why = typed_having(_facts(comparison), SCHEMA)
    assert why == "" and typed is not None
    assert typed.having[0].value == value and type(typed.having[0].value) is type(value)


@pytest.mark.parametrize(
    "comparison, words",
    [
        (Comparison("first_day", ">", None, "2024-01-01"), "first_day of type date"),
        (Comparison("s", ">", None, "abc"), "s of type numeric"),
        (Comparison("m", ">", 5, ""), "m of type string"),  # a cast literal never compares with a string
    ],
)
def test_other_comparisons_are_not_kept(comparison, words):
    typed, why = typed_having(_facts(comparison), SCHEMA)
    assert typed is None and words in why


def test_no_having_is_unchanged():
    facts = _facts()
    assert typed_having(facts, SCHEMA) == (facts, "")


@pytest.mark.spark
@pytest.mark.parametrize(
    "sql, having",
    [
        ("SELECT a, max(name) AS m FROM raw GROUP BY a HAVING max(name) >= '5'", [("m", ">=", "5")]),
        ("SELECT a, max(name) AS m FROM raw GROUP BY a HAVING m < 'x.y'", [("m", "<", "x.y")]),
        (
            "SELECT a, count(*) AS n, min(name) AS lo FROM raw GROUP BY a HAVING count(*) > 1 AND lo <= 'é'",
            [("n", ">", 1), ("lo", "<=", "é")],
        ),
        ("SELECT a, max(k) AS m FROM raw GROUP BY a HAVING max(k) > '5'", [("m", ">", 5)]),
        # != and <> print as NOT (x = y)
        ("SELECT a, max(name) AS m FROM raw GROUP BY a HAVING max(name) != 'x'", [("m", "!=", "x")]),
        ("SELECT a, count(*) AS n FROM raw GROUP BY a HAVING count(*) <> 2", [("n", "!=", 2)]),
        ("SELECT a, count(*) AS n FROM raw GROUP BY a HAVING NOT (count(*) > 2)", None),
        # not read: a blank or a quote in the literal, a date compared
        ("SELECT a, max(name) AS m FROM raw GROUP BY a HAVING max(name) > 'x y'", None),
        ("SELECT a, max(name) AS m FROM raw GROUP BY a HAVING max(name) > 'it''s'", None),
        ("SELECT a, max(d) AS m FROM raw GROUP BY a HAVING max(d) > '2024-01-01'", None),
    ],
)
def test_having_read_from_sparks_plan(spark, sql, having):
    from materializer.analyze import sql_shape

    s = spark.newSession()
    ddl = "a string, name string, k bigint, d date"
    s.createDataFrame([], struct_of(ddl)).createOrReplaceTempView("raw")
    facts = sql_shape(s.sql(sql)).group_aggregate
    typed = typed_having(facts, struct_of(ddl))[0] if facts is not None else None
    if having is None:
        assert typed is None
    else:
        assert typed is not None and [(c.column, c.op, c.value) for c in typed.having] == having


def test_a_having_not_kept_is_recomputed_saying_which_comparison():
    from materializer.shape import SqlShape, decide

    why = typed_having(_facts(Comparison("first_day", ">", None, "2024-01-01")), SCHEMA)[1]
    shape = SqlShape(nodes=frozenset({"Aggregate", "Filter"}), top="Filter", having_refusal=why)
    decision = decide("ads.x", shape, [("rows", "primary_key")], primary_key=("g",))
    assert decision.strategy == "recompute"
    assert "HAVING compares first_day of type date with '2024-01-01'" in decision.reason


OUT = struct_of("id string, version int, n bigint, s double, flag boolean")


def _global(*constants) -> GroupAggregate:
    return GroupAggregate(
        (),
        (Aggregation("count", None, "n"), Aggregation("sum", "x", "s")),
        (),
        (("id", "id"), ("version", "version"), ("n", "n"), ("s", "s"), ("flag", "flag")),
        constants,
    )


def test_literal_columns_take_their_columns_type():
    from materializer.incremental.literals import typed_constants

    typed, why = typed_constants(_global(("id", "all"), ("version", "7")), OUT)
    assert why == "" and typed.constants == (("id", "all"), ("version", 7))
    for constant, words in (
        (("id", "null"), "literal column id of type string (null)"),  # NULL and 'null' print alike
        (("flag", "true"), "literal column flag of type boolean"),
        (("version", "7.5"), "literal column version of type int (7.5)"),
    ):
        typed, why = typed_constants(_global(constant), OUT)
        assert typed is None and words in why


def test_a_global_aggregate_has_its_row_over_no_rows():
    from materializer.incremental.aggregate import Aggregator, Group

    facts = replace(_global(("id", "all")), output=(("id", "id"), ("n", "n"), ("s", "s")))
    agg = Aggregator(facts, ("k",))
    assert agg.output((), None, {}) == {"id": "all", "n": 0, "s": None}
    grouped = replace(facts, group=("g",), output=(("g", "g"), ("n", "n")))
    assert Aggregator(grouped, ("k",)).output(("a",), Group(grouped.aggregations), {}) is None


@pytest.mark.spark
def test_a_global_aggregate_read_from_sparks_plan(spark):
    from materializer.analyze import sql_shape

    s = spark.newSession()
    s.createDataFrame([], struct_of("a string, x double")).createOrReplaceTempView("raw")
    df = s.sql("SELECT 'all' AS id, count(*) AS n, sum(x) AS s FROM raw")
    facts = sql_shape(df).group_aggregate
    assert facts is not None and facts.group == () and facts.constants == (("id", "all"),)
    assert facts.describe() == "global aggregate: count(*), sum(x)"
    got, _ = typed(facts, struct_of("a string, x double"), df.schema)
    assert got.constants == (("id", "all"),)


# -- a literal that reads as a comparison --------------------------------------------------------------------
FORGED = "SELECT a, max(name) AS m FROM raw GROUP BY a HAVING max(name) = 'x AND m#1 < 5'"


@pytest.mark.spark
def test_a_literal_holding_a_comparison_reads_as_two_in_the_plan(spark):
    """Why :func:`forged_having` exists: the plan prints the literal unquoted, and the reading splits it."""
    from materializer.analyze import sql_shape

    s = spark.newSession()
    ddl = "a string, name string"
    s.createDataFrame([], struct_of(ddl)).createOrReplaceTempView("raw")
    df = s.sql(FORGED)
    facts = sql_shape(df).group_aggregate
    assert facts is not None
    assert [(c.column, c.op, c.text) for c in facts.having] == [("m", "=", "x"), ("m", "<", "5")]
    got, why = typed(facts, struct_of(ddl), df.schema, FORGED)
    assert got is None
    assert why == "HAVING compares a string while the SQL holds '#' (a literal could read as a comparison)"


@pytest.mark.parametrize(
    "having, sql, values, refused",
    [
        ((Comparison("m", "=", None, "x"),), "... HAVING m = 'x AND m#1 < 5'", (), "the SQL"),
        ((Comparison("m", "=", None, "x"),), "... HAVING m = :v", ("x AND m#1 < 5",), "a parameter"),
        ((Comparison("m", "=", None, "x"),), "... HAVING m = :v", ([{"k": "a#1"}],), "a parameter"),
        ((Comparison("m", "=", None, "x"),), "... HAVING m = 'x'", ("y", 3, ["z"]), ""),
        # no string comparison: a literal with '#' cannot have split into a comparison
        ((Comparison("n", ">", 1, "1"),), "-- count#1\n... HAVING n > 1", (), ""),
        ((), "SELECT '#'", (), ""),
    ],
)
def test_a_string_comparison_is_not_read_when_a_literal_may_hold_an_attribute(having, sql, values, refused):
    from materializer.incremental.literals import forged_having

    facts = typed_having(_facts(*having), SCHEMA)[0]
    why = forged_having(facts, sql, values)
    assert (refused in why) if refused else why == ""


@pytest.mark.spark
def test_a_forged_having_is_recomputed_saying_why(spark, project_dir):
    """Over a primary-key table the GROUP BY would be ``agg_changelog``, reading the parameter's text as two
    comparisons; it is recomputed (always the batch result), and the plan says why."""
    from runtime.project import Project
    from tests.materializer._flowkit import ACTIONS, flow_head, write_project

    actions = {
        **ACTIONS,
        "t_last.sql": """/*---
name: t_last
description: the last user per event count, when it is a given one
inputs: [activity]
params:
  who: {type: string, default: "u1 AND last_user#1 < u5"}
---*/
SELECT events, max(user_id) AS last_user FROM activity GROUP BY events HAVING max(user_id) = :who
""",
    }
    flow = flow_head("a HAVING whose parameter reads as two comparisons") + (
        "  ads:\n    last:\n      action: t_last\n      inputs: {activity: dws.user_activity}\n"
        "      primary_key: [events]\n"
    )
    path = write_project(project_dir, flow, actions)
    project = Project.open()
    try:
        table = project.plan(path, spark=spark).table("ads.last")
    finally:
        project.close()
    assert table.strategy == "recompute", table.reason
    assert "HAVING compares a string while a parameter holds '#'" in table.reason, table.reason
