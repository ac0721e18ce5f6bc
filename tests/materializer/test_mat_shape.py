"""The strategy decision, as a table of shapes (no Spark needed)."""

import pytest

from materializer.shape import SqlShape, decide
from runtime.errors import ErrorCode, TidehouseError


def shape(*nodes, top="Project", deterministic=True, distinct=False):
    nodes = frozenset(nodes) | {"Project", "SubqueryAlias", "View", "LogicalRDD"}
    return SqlShape(nodes, top, deterministic, "", distinct, bool({"GlobalLimit"} & nodes))


LOG = [("events", "log")]
SRC = [("raw", "source")]
PK = [("activity", "primary_key")]

CASES = [
    # (shape, inputs, primary key, expected strategy)
    (shape("Filter", top="Filter"), LOG, (), "append"),
    (shape("Filter", top="Filter"), SRC, (), "append"),
    (shape("Join", "Filter", top="Join"), LOG + PK, (), "append"),
    (shape("Filter"), LOG, ("id",), "append"),
    (shape("Aggregate", top="Aggregate"), LOG, ("user_id",), "aggregate"),
    (shape("Aggregate", "Filter", top="Filter"), LOG, ("user_id",), "recompute"),  # HAVING
    (shape("Aggregate", top="Aggregate", distinct=True), LOG, ("user_id",), "recompute"),
    (shape("Aggregate", top="Aggregate"), PK, ("k",), "recompute"),
    (shape("Filter", top="Filter"), PK, ("user_id",), "changelog"),
    (shape("GlobalLimit", "LocalLimit", "Sort", top="GlobalLimit"), PK, ("user_id",), "recompute"),
    (shape("Window", "Filter", top="Filter"), LOG, ("id",), "recompute"),
    (shape("Join", top="Join"), PK + [("dim", "primary_key")], ("id",), "recompute"),
]


@pytest.mark.parametrize("sql_shape,inputs,pk,expected", CASES)
def test_strategy(sql_shape, inputs, pk, expected):
    assert decide("t.x", sql_shape, inputs, primary_key=pk).strategy == expected


REFUSED = [
    (shape("Aggregate", top="Aggregate"), LOG, (), "primary_key"),
    (shape("Sort", top="Sort"), LOG, (), "ORDER BY"),
    (shape("GlobalLimit", "LocalLimit", "Sort", top="GlobalLimit"), LOG, (), "LIMIT"),
    (shape("Filter"), PK, (), "primary_key"),
    (shape("Join"), LOG + [("other", "log")], (), "several append-only"),
    (shape("Project", deterministic=False), LOG, (), "non-deterministic"),
    (shape("Window"), LOG, (), "primary_key"),
]


@pytest.mark.parametrize("sql_shape,inputs,pk,words", REFUSED)
def test_refused_shapes_say_why_and_what_to_do(sql_shape, inputs, pk, words):
    with pytest.raises(TidehouseError) as err:
        decide("t.x", sql_shape, inputs, primary_key=pk)
    assert err.value.code == ErrorCode.SHAPE_UNSUPPORTED
    assert err.value.hint
    assert words in err.value.render()


def test_merge_engine_needs_stateless_sql():
    with pytest.raises(TidehouseError) as err:
        decide("t.x", shape("Aggregate", top="Aggregate"), LOG, primary_key=("k",), merge_engine="aggregate")
    assert err.value.code == ErrorCode.SHAPE_UNSUPPORTED
    assert decide("t.x", shape("Filter"), LOG, primary_key=("k",), merge_engine="aggregate").strategy == "append"


def test_sources_are_only_ingested():
    with pytest.raises(TidehouseError) as err:
        decide("ods.x", shape("Aggregate", top="Aggregate"), SRC, primary_key=("k",))
    assert err.value.code == ErrorCode.SHAPE_UNSUPPORTED
    assert "ingest" in err.value.hint
