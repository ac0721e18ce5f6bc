"""Which GROUP BY over one log table the ``agg_log`` strategy keeps (docs/architecture.md, "Incremental
maintenance"): the facts :func:`~materializer.incremental.facts.aggregate_facts` read from the analysed plan,
checked against the input's column types and the table's primary key.

Pure (Spark types in, a reason out), so the planner's decision stays unit-testable without Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from materializer.incremental.facts import GroupAggregate

_INTEGRAL = {"tinyint", "smallint", "int", "bigint"}
_FLOATING = {"float", "double"}
# min/max as Spark orders them, with Python's order being the same: floating columns are left out (Spark
# sorts NaN above every number; Arrow's min/max skip it)
_ORDERED = _INTEGRAL | {"string", "date", "timestamp", "timestamp_ntz", "boolean"}
# group keys Arrow hashes as Spark groups them (floating keys are left out: Spark groups -0.0 with 0.0)
_GROUPABLE = _ORDERED | {"binary"}


def _kind(type_name: str) -> str:
    return "decimal" if type_name.startswith("decimal") else type_name


def log_aggregate_refusal(
    facts: GroupAggregate, schema: StructType, primary_key: Sequence[str], has_expectations: bool
) -> str:
    """Why ``agg_log`` cannot keep this GROUP BY over a log table with input ``schema`` ("": it can)."""
    types = {f.name: _kind(f.dataType.simpleString()) for f in schema.fields}
    if not facts.group:
        return "a global aggregate (Spark's streaming aggregation keeps its one row)"
    if facts.constants:
        return "a literal column"
    for column in facts.group:
        if types.get(column) not in _GROUPABLE:
            return f"GROUP BY column {column} of type {types.get(column)}"
    for agg in facts.aggregations:
        kind = types.get(agg.column) if agg.column else None
        if agg.function == "count_distinct" and kind not in (_GROUPABLE - {"binary"}) | {"decimal"}:
            return f"count(DISTINCT) of a {kind} column"  # the values seen are kept as text
        if agg.function in ("sum", "avg") and kind not in _INTEGRAL | _FLOATING:
            return f"{agg.function} of a {kind} column"
        if agg.function in ("min", "max") and kind not in _ORDERED | {"decimal"}:
            return f"{agg.function} of a {kind} column"
    groups_out = {out for out, src in facts.output if src in facts.group}
    if {src for _, src in facts.output} & set(facts.group) != set(facts.group):
        return "a GROUP BY column is not in the output"
    if groups_out != set(primary_key):
        return "the primary key is not the GROUP BY columns"
    if has_expectations:
        return "expectations on the table"
    return ""
