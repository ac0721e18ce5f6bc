"""The HAVING of a GROUP BY the incremental strategies keep, typed: which literal each comparison means.

Spark's explain text prints a string literal without quotes (``HAVING max(name) >= '5'`` reads
``(m#9 >= 5)``), so :func:`~materializer.incremental.facts.aggregate_facts` reads a bare literal as a number
and as text. The column compared decides: a string column compares with the text (binary order, as Spark's
default collation and Arrow compare), a numeric one with the number; a comparison of any other type (dates,
timestamps, booleans: Spark casts the literal, with its own rules) is not kept incrementally.

Pure (Spark types in), so the planner's decision stays unit-testable without Spark.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from materializer.incremental.facts import GroupAggregate

_NUMERIC = {"tinyint", "smallint", "int", "bigint", "float", "double", "decimal"}


def output_kinds(facts: GroupAggregate, schema: StructType) -> dict[str, str]:
    """The kind of each Aggregate output the HAVING may name: its Spark type name, ``decimal`` for any
    decimal, ``numeric`` for a sum or an average."""
    types = {f.name: f.dataType.simpleString() for f in schema.fields}
    kinds = {column: types.get(column, "") for column in facts.group}
    for agg in facts.aggregations:
        if agg.function in ("count", "count_distinct"):
            kinds[agg.output] = "bigint"
        elif agg.function in ("min", "max"):
            kinds[agg.output] = types.get(agg.column or "", "")
        else:
            kinds[agg.output] = "numeric"
    return {name: "decimal" if kind.startswith("decimal") else kind for name, kind in kinds.items()}


def typed_having(facts: GroupAggregate, schema: StructType) -> tuple[GroupAggregate | None, str]:
    """(``facts``, each comparison's value of its column's type; "") or (None, why it cannot be kept)."""
    if not facts.having:
        return facts, ""
    kinds = output_kinds(facts, schema)
    typed = []
    for c in facts.having:
        kind = kinds.get(c.column, "")
        if kind == "string" and c.text:
            typed.append(replace(c, value=c.text))
        elif (kind in _NUMERIC or kind == "numeric") and isinstance(c.value, (int, float)):
            typed.append(c)
        else:
            return None, f"HAVING compares {c.column} of type {kind or 'unknown'} with {c.text or c.value!r}"
    return replace(facts, having=tuple(typed)), ""
