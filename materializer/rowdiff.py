"""Rows compared as multisets: which rows one side has that the other lacks, floats within a tolerance.

Used by action tests (:mod:`materializer.actiontest`) to compare an action's batch result with the expected
rows, and a stream's hot and lake tables with the batch result. Order never matters; a row that appears
twice must appear twice. Values are normalised first (:func:`normalize`): timestamps to naive UTC, maps to
key-sorted pairs, structs to dicts; floats are equal when ``math.isclose`` says so with ``rel_tol`` and
``abs_tol`` both the tolerance (NaN equals NaN).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


def normalize(value: Any) -> Any:
    """A comparable, hashable form of a value read from Arrow (``to_pylist``)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if isinstance(value, dict):
        return _Struct(tuple((k, normalize(v)) for k, v in value.items()))
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):  # an Arrow map
            return _Map(tuple(sorted(((normalize(k), normalize(v)) for k, v in value), key=repr)))
        return tuple(normalize(v) for v in value)
    return value


class _Struct(tuple):
    """A struct value: ``(name, value)`` pairs in field order."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k}: {show(v)}" for k, v in self) + "}"


class _Map(tuple):
    """A map value: ``(key, value)`` pairs sorted by key."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{show(k)}: {show(v)}" for k, v in self) + "}"


def show(value: Any) -> str:
    """How a normalised value reads in a diff: ``NULL``, numbers and strings plainly, times ISO."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, (_Struct, _Map)):
        return repr(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return str(value)


def rows_of(table: pa.Table, columns: Sequence[str]) -> list[tuple]:
    """The rows of ``columns`` of an Arrow table as tuples of normalised values."""
    data = table.select(list(columns)).to_pylist()
    return [tuple(normalize(row[c]) for c in columns) for row in data]


def same(a: Any, b: Any, tolerance: float) -> bool:
    """Whether two normalised values are equal (floats within ``tolerance``)."""
    if isinstance(a, float) or isinstance(b, float):
        if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
            return False
        if isinstance(a, bool) or isinstance(b, bool):  # one is a float: a boolean never equals it
            return False
        a, b = float(a), float(b)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=tolerance, abs_tol=tolerance)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y, tolerance) for x, y in zip(a, b))
    return a == b


def _coarse(value: Any) -> Any:
    """A key equal for every two values :func:`same` may call equal (floats blurred)."""
    if isinstance(value, (float, int)) and not isinstance(value, bool):
        return 0.0
    if isinstance(value, tuple):
        return (type(value).__name__,) + tuple(_coarse(v) for v in value)
    return value


@dataclass
class RowDiff:
    """What ``actual`` lacks of ``expected`` (``missing``) and has beyond it (``unexpected``)."""

    columns: list[str]
    missing: list[tuple] = field(default_factory=list)
    unexpected: list[tuple] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.missing or self.unexpected)


def diff_rows(
    columns: Sequence[str], expected: Sequence[tuple], actual: Sequence[tuple], tolerance: float = 0.0
) -> RowDiff:
    """The multiset difference of two row lists (each row a tuple of normalised values of ``columns``)."""
    pool: dict[Any, list[tuple]] = defaultdict(list)
    for row in actual:
        pool[_coarse(row)].append(row)
    missing = []
    for row in expected:
        candidates = pool.get(_coarse(row), [])
        for i, other in enumerate(candidates):
            if same(row, other, tolerance):
                del candidates[i]
                break
        else:
            missing.append(row)
    unexpected = [row for rows in pool.values() for row in rows]
    return RowDiff(list(columns), sorted(missing, key=repr), sorted(unexpected, key=repr))
