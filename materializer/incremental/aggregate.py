"""The ``agg_changelog`` strategy: a GROUP BY with retractable aggregates (and a HAVING of comparisons with
numbers or strings) over one primary-key table, kept with per-key contributions and per-group accumulators
(docs/architecture.md, "Incremental maintenance").

The state is a key-value table (``key string, value binary``): ``c<input key>`` → the key's contribution
(its group and aggregated values), ``g<group>`` → the group's accumulators, ``d<agg><group><value>`` → how
many rows of the group hold that value (``count(DISTINCT)``). Per micro-batch each changed key's last image
replaces its contribution (old one subtracted, new one added), so applying an image twice changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Any

import pyarrow as pa

from materializer.incremental.common import key_tuples
from materializer.incremental.facts import Aggregation, GroupAggregate

BEST = 16  # min/max: the best (value, key) pairs kept per group
SCHEMA = pa.schema([("key", pa.string()), ("value", pa.binary())])
_OPS = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def _rank(value: Any) -> tuple:
    """Sort key of a value as Spark orders it (NaN above every number)."""
    return (1, 0) if isinstance(value, float) and value != value else (0, value)


@dataclass
class Acc:
    """One aggregate's accumulator in one group."""

    count: int = 0  # non-null values
    total: Any = 0  # sum (Fraction for floating values: exact under retraction)
    distinct: int = 0
    best: list = field(default_factory=list)  # min/max: sorted (value, key) pairs
    complete: bool = True  # best holds every value of the group


class Group:
    def __init__(self, aggs: tuple[Aggregation, ...]) -> None:
        self.rows = 0
        self.accs = [Acc() for _ in aggs]


class Aggregator:
    def __init__(self, facts: GroupAggregate, key: tuple[str, ...]) -> None:
        self.facts = facts
        self.key = key
        self.args = sorted({a.column for a in facts.aggregations if a.column})

    def contribution(self, rows: pa.Table) -> dict[str, tuple]:
        """``{key repr: (group, {column: value})}`` of input rows."""
        keys = key_tuples(rows, self.key)
        groups = key_tuples(rows, self.facts.group)
        values = [rows.column(c).to_pylist() for c in self.args]
        return {
            repr(k): (g, dict(zip(self.args, [v[i] for v in values])))
            for i, (k, g) in enumerate(zip(keys, groups))
        }

    def add(self, group: Group, key: str, values: dict, sign: int, distinct: dict) -> None:
        group.rows += sign
        for i, (agg, acc) in enumerate(zip(self.facts.aggregations, group.accs)):
            if agg.column is None:
                continue
            v = values[agg.column]
            if v is None:
                continue
            acc.count += sign
            if agg.function in ("sum", "avg"):
                acc.total += sign * (Fraction(v) if isinstance(v, float) else v)
            elif agg.function == "count_distinct":
                dkey = (i, v)
                before = distinct.get(dkey, 0)
                distinct[dkey] = before + sign
                acc.distinct += (before == 0 and sign > 0) - (before + sign == 0 and sign < 0)
            elif agg.function in ("min", "max"):
                self._best(acc, agg.function, v, key, sign)

    @staticmethod
    def _best(acc: Acc, fn: str, value: Any, key: str, sign: int) -> None:
        pair = (value, key)
        order = (lambda p: (_rank(p[0]), p[1])) if fn == "min" else (lambda p: (_neg(_rank(p[0])), p[1]))
        if sign < 0:
            acc.best = [p for p in acc.best if p[1] != key]
            return
        if acc.complete or (acc.best and order(pair) < order(acc.best[-1])):
            acc.best = sorted([*acc.best, pair], key=order)
            if len(acc.best) > BEST:
                acc.best, acc.complete = acc.best[:BEST], False

    def output(self, group: tuple, g: Group | None, types: dict) -> dict | None:
        """The group's output row (None: no rows, or HAVING fails). A global aggregate has its one row over
        no rows too, as in SQL: counts 0, the other aggregates NULL."""
        if g is None or g.rows <= 0:
            if self.facts.group:
                return None
            g = Group(self.facts.aggregations)
        values = dict(zip(self.facts.group, group))
        values.update(self.facts.constants)
        for agg, acc in zip(self.facts.aggregations, g.accs):
            values[agg.output] = self._final(agg, acc, g.rows, types.get(agg.output))
        for c in self.facts.having:
            v = values[c.column]
            if v is None or not _OPS[c.op](v, c.value):
                return None
        return {out: values[src] for out, src in self.facts.output}

    @staticmethod
    def _final(agg: Aggregation, acc: Acc, rows: int, dtype) -> Any:
        if agg.function == "count":
            return rows if agg.column is None else acc.count
        if agg.function == "count_distinct":
            return acc.distinct
        if acc.count == 0:
            return None
        if agg.function == "sum":
            return float(acc.total) if isinstance(acc.total, Fraction) else acc.total
        if agg.function == "avg":
            if isinstance(acc.total, Decimal) and pa.types.is_decimal(dtype):
                exp = Decimal(1).scaleb(-dtype.scale)
                return (acc.total / acc.count).quantize(exp, rounding=ROUND_HALF_UP)
            return float(Fraction(acc.total) / acc.count)
        return acc.best[0][0] if acc.best else None


def _neg(rank: tuple) -> tuple:
    return tuple(_Reverse(v) for v in rank)


class _Reverse:
    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        self.v = v

    def __lt__(self, other: _Reverse) -> bool:
        return other.v < self.v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reverse) and other.v == self.v

    def __hash__(self) -> int:
        return hash(self.v)
