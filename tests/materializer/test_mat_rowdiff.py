"""Rows compared as multisets (action tests): duplicates count, order does not, floats within a tolerance."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa

from materializer.rowdiff import diff_rows, normalize, rows_of, same, show


def test_order_is_ignored_and_duplicates_count():
    cols = ["k", "n"]
    assert not diff_rows(cols, [("a", 1), ("b", 2)], [("b", 2), ("a", 1)])
    diff = diff_rows(cols, [("a", 1), ("a", 1)], [("a", 1), ("c", 3)])
    assert (diff.missing, diff.unexpected) == ([("a", 1)], [("c", 3)])


def test_floats_within_the_tolerance():
    assert same(0.1 + 0.2, 0.3, 1e-9) and not same(0.1 + 0.2, 0.3, 0.0)
    assert same(float("nan"), float("nan"), 0.0) and not same(float("nan"), 1.0, 1.0)
    assert same(2, 2.0000001, 1e-6) and not same(True, 1.0, 1.0) and not same("1", 1.0, 1.0)
    assert not diff_rows(["x"], [(1 / 3,), (0.5,)], [(0.5,), (0.3333333333,)], 1e-6)
    diff = diff_rows(["x"], [(1 / 3,)], [(0.3334,)], 1e-6)
    assert diff.missing == [(1 / 3,)] and diff.unexpected == [(0.3334,)]


def test_values_read_from_arrow_are_normalised():
    ts = dt.datetime(2024, 5, 1, 14, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    table = pa.table(
        {
            "t": pa.array([ts], pa.timestamp("us", tz="Europe/Paris")),
            "m": pa.array([[("b", 2), ("a", 1)]], pa.map_(pa.string(), pa.int32())),
            "s": pa.array([{"x": 1, "y": None}], pa.struct([("x", pa.int32()), ("y", pa.string())])),
            "d": pa.array([Decimal("1.50")], pa.decimal128(5, 2)),
        }
    )
    (row,) = rows_of(table, ["t", "m", "s", "d"])
    assert row[0] == dt.datetime(2024, 5, 1, 12)
    assert row[1] == normalize([("a", 1), ("b", 2)])  # a map's order does not matter
    assert [show(v) for v in row] == ["2024-05-01 12:00:00", "{a: 1, b: 2}", "{x: 1, y: NULL}", "1.50"]
    assert not diff_rows(["d"], [(Decimal("1.5"),)], [(Decimal("1.50"),)])
