"""The strategy decision, as a table of shapes (no Spark needed)."""

import pytest

from materializer.shape import SqlShape, batch_exceptions, decide
from runtime.core.errors import ErrorCode, Location, TidehouseError


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
    (shape("Join", "Filter", top="Join"), LOG + PK, ("id",), "recompute"),  # no equi-join facts: batch-exact
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
    (shape("Join", "Filter", top="Join"), LOG + PK, (), "lookups: processing_time"),
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
    assert (
        decide("t.x", shape("Filter"), LOG, primary_key=("k",), merge_engine="aggregate").strategy == "append"
    )


def test_sources_are_only_ingested():
    with pytest.raises(TidehouseError) as err:
        decide("ods.x", shape("Aggregate", top="Aggregate"), SRC, primary_key=("k",))
    assert err.value.code == ErrorCode.SHAPE_UNSUPPORTED
    assert "ingest" in err.value.hint


# -- processing-time lookups only where a flow asks for them -----------------------------------------------


def test_processing_time_lookups_are_an_explicit_choice():
    join = shape("Join", "Filter", top="Join")
    for pk in ((), ("id",)):  # a log table, and a primary-key table otherwise recomputed
        decision = decide("t.x", join, LOG + PK, primary_key=pk, lookups_at="processing_time")
        assert decision.strategy == "append" and "lookups: processing_time" in decision.reason
        assert [e.kind for e in batch_exceptions(decision.strategy, join, LOG + PK)] == ["lookup"]
    # without it, a primary-key table keeps batch semantics, and the reason names the choice
    recomputed = decide("t.x", join, LOG + PK, primary_key=("id",))
    assert recomputed.strategy == "recompute" and "lookups: processing_time" in recomputed.reason


@pytest.mark.parametrize(
    "sql_shape,inputs,pk,words",
    [
        (shape("Filter"), LOG, (), "reads no primary-key table"),  # nothing to look up
        (shape("Aggregate", top="Aggregate"), LOG + PK, ("k",), "not stateless (Aggregate)"),
        (shape("Join"), PK + [("dim", "primary_key")], ("k",), "0 append-only inputs"),
        (shape("Join", "Sort"), LOG + PK, (), "ORDER BY"),  # a log table's own refusals still apply
    ],
)
def test_processing_time_lookups_that_cannot_apply_are_refused(sql_shape, inputs, pk, words):
    where = Location("flow.yaml", 7, 5, "layers.dwd.x.lookups")
    with pytest.raises(TidehouseError) as err:
        decide("t.x", sql_shape, inputs, primary_key=pk, lookups_at="processing_time", lookups_location=where)
    assert err.value.code == ErrorCode.SHAPE_UNSUPPORTED
    assert words in err.value.render()
    if "ORDER BY" not in words:
        assert err.value.location == where


# -- what Spark cannot run as a streaming aggregation is recomputed, never started -------------------------


def test_session_windows_are_recomputed_not_aggregated_in_update_mode():
    sessions = SqlShape(
        shape("Aggregate").nodes, "Aggregate", session_window=True, watermarks=(("ts", 60.0),)
    )
    decision = decide("dws.sessions", sessions, LOG, primary_key=("user_id", "session_start"))
    assert decision.strategy == "recompute"
    assert "session window" in decision.reason


def test_an_aggregation_spark_refuses_in_update_mode_is_recomputed_with_sparks_reason():
    refused = SqlShape(shape("Aggregate").nodes, "Aggregate", streaming_refusal="some operator Spark refuses")
    decision = decide("dws.x", refused, LOG, primary_key=("k",))
    assert decision.strategy == "recompute"
    assert "some operator Spark refuses" in decision.reason


# -- the named exceptions to the batch result ---------------------------------------------------------------


def test_lookups_of_an_append_table_are_a_batch_exception():
    (exc,) = batch_exceptions(
        "append", shape("Join"), [("ods.orders", "log"), ("dws.customers", "primary_key")]
    )
    assert exc.kind == "lookup" and "dws.customers" in exc.detail


def test_a_watermark_is_a_batch_exception_only_for_a_streaming_aggregation():
    windowed = SqlShape(shape("Aggregate").nodes, "Aggregate", watermarks=(("ts", 60.0),))
    (exc,) = batch_exceptions("aggregate", windowed, LOG)
    assert exc.kind == "watermark" and "ts - 1m" in exc.detail
    # recomputed (or stateless) SQL runs in batch, where a WATERMARK clause drops nothing
    assert batch_exceptions("recompute", windowed, LOG) == ()
    assert (
        batch_exceptions("append", SqlShape(shape("Filter").nodes, "Filter", watermarks=(("ts", 60.0),)), LOG)
        == ()
    )


def test_batch_exact_strategies_have_no_exception():
    assert batch_exceptions("aggregate", shape("Aggregate", top="Aggregate"), LOG) == ()
    assert batch_exceptions("recompute", shape("Join"), PK + [("dim", "primary_key")]) == ()
    assert batch_exceptions("changelog", shape("Filter"), PK) == ()
