"""The literals of a GROUP BY the incremental strategies keep, typed: which value each HAVING comparison
and each literal output column ('all' AS id) means.

Spark's explain text prints a string literal without quotes (``HAVING max(name) >= '5'`` reads
``(m#9 >= 5)``), so :func:`~materializer.incremental.facts.aggregate_facts` reads a bare literal as a number
and as text. The column compared decides: a string column compares with the text (binary order, as Spark's
default collation and Arrow compare), a numeric one with the number; a comparison of any other type (dates,
timestamps, booleans: Spark casts the literal, with its own rules) is not kept incrementally. A literal output
column takes the output column's type: a string or an integer (``null`` is never read: it prints as the
string 'null' does).

Pure (Spark types in), so the planner's decision stays unit-testable without Spark.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
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


_INTEGRAL = {"tinyint", "smallint", "int", "bigint"}


def typed_constants(facts: GroupAggregate, output: StructType) -> tuple[GroupAggregate | None, str]:
    """(``facts``, each literal output column's value of its column's type; "") or (None, why not)."""
    if not facts.constants:
        return facts, ""
    types = {f.name: f.dataType.simpleString() for f in output.fields}
    shown = {src: out for out, src in facts.output}
    typed = []
    for name, text in facts.constants:
        kind = types.get(shown.get(name, ""), "")
        literal = str(text)
        if literal == "null" or kind not in _INTEGRAL | {"string"}:
            return None, f"literal column {shown.get(name, name)} of type {kind or 'unknown'} ({literal})"
        if kind == "string":
            typed.append((name, literal))
        else:
            digits = literal.removesuffix("L").removesuffix("S").removesuffix("Y")
            if not digits.lstrip("-").isdigit():
                return None, f"literal column {shown.get(name, name)} of type {kind} ({literal})"
            typed.append((name, int(digits)))
    return replace(facts, constants=tuple(typed)), ""


def forged_having(facts: GroupAggregate, sql: str, values: Iterable[object] = ()) -> str:
    """Why the HAVING read from the plan (typed: :func:`typed_having`) cannot be trusted, or "".

    The plan prints a string literal unquoted and the reading splits the condition at ``AND`` before it reads
    a comparison, so ``max(name) = 'x AND m#9 < 5'`` would read as two comparisons, ``m = 'x'`` and
    ``m < 5``. The second needs a plan attribute (``name#id``) inside the literal, and no literal the reading
    keeps holds a ``#``: when the SQL text (its literals, and its comments with them) or a string value bound
    to its parameters (``values``) holds one, a HAVING with a string comparison is not read but recomputed."""
    if not any(isinstance(c.value, str) for c in facts.having):  # typed: a string comparison's value
        return ""
    bound = json.dumps(list(values), default=str, ensure_ascii=False)  # a '#' is one only inside a string
    where = "the SQL" if "#" in sql else "a parameter" if "#" in bound else ""
    if not where:
        return ""
    return f"HAVING compares a string while {where} holds '#' (a literal could read as a comparison)"


def typed(
    facts: GroupAggregate,
    reads: StructType,
    returns: StructType,
    sql: str = "",
    values: Iterable[object] = (),
) -> tuple[GroupAggregate | None, str]:
    """The GROUP BY (over input columns ``reads``, its SQL ``sql`` returning ``returns``, its parameters bound
    to ``values``) with its HAVING and its literal columns typed (:func:`typed_having`,
    :func:`typed_constants`), or (None, why not: also :func:`forged_having`)."""
    having, why = typed_having(facts, reads)
    if having is not None:
        why = forged_having(having, sql, values)
    if having is None or why:
        return None, why
    return typed_constants(having, returns)
