"""Which output columns of a query identify its rows, read from the analysed plan's node tree: what a
table's primary key must (and must not) be for a strategy that upserts by it to keep the batch result.

* :func:`aggregate_keys` — a GROUP BY's groups: a streaming aggregation upserts each changed group's row by
  the key and never deletes a row, so a key holding an aggregate's value or missing a GROUP BY expression
  keeps old rows and mixes groups.
* :func:`row_keys` — a row-wise query over one primary-key input (the ``changelog`` strategy): an output row
  is upserted and deleted by the key, so a key that is not the input's key (renamed or not), or a query that
  makes several rows of one (``explode``), deletes and overwrites the rows of other input keys.

Only what the plan shows for sure refuses a key: a column the plan does not tell about (an expression, a
field of a struct) is trusted. Pure (the :class:`~materializer.plantext.Node` tree in, facts out).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from materializer.incremental.facts import PASS, _brackets, split_top

if TYPE_CHECKING:
    from materializer.plantext import Node

# an attribute as a plan prints it: name#id, L for a long, -T<ms>ms for an event-time column with a watermark
_KEY_ATTR = re.compile(r"^([A-Za-z_]\w*#\d+)L?(?:-T\d+ms)?$")
_ALIAS_AT_END = re.compile(r"^(.*) AS ([A-Za-z_]\w*#\d+)L?$")
# an aggregate function's result as a whole (a field of it, as latest.order_id of max_by(struct(*), ts),
# is not one: it may be the group's key)
_AGGREGATE_CALL = re.compile(
    r"^(?:count|sum|avg|mean|min|max|count_if|any_value|first|last|collect_list|collect_set|array_agg|"
    r"stddev\w*|variance|var_\w+|median|mode|percentile\w*|approx_\w+|bool_and|bool_or|every|some|"
    r"bit_and|bit_or|bit_xor|listagg|string_agg|try_sum|try_avg|max_by|min_by)\(.*\)$"
)


@dataclass(frozen=True)
class AggregateKeys:
    """Which output columns of a GROUP BY are known to identify its groups, and which are known to be
    aggregate values: what a primary key over it must, and must not, be. A column of neither kind (an
    expression, a field of a ``max_by(struct(*), ...)``) is unknown, and never the reason for a refusal."""

    groups: int  # how many GROUP BY expressions (0: a global aggregate, one row)
    # (output column, the GROUP BY expressions it is: their indices; () for a literal): a GROUP BY expression
    # itself, renamed or not, a window's start or end, or a literal
    keys: tuple[tuple[str, tuple[int, ...]], ...]
    values: tuple[str, ...] = ()  # output columns that are an aggregate function's result, renamed or not

    def refusal(self, primary_key: tuple[str, ...] | list[str], *, whole: bool) -> str:
        """Why ``primary_key`` does not name one row per group ("": it does, or that is not known).
        ``whole``: no key column may be an aggregate value (a streaming aggregation upserts by the key and
        never deletes a row whose key moved); else such columns may be in it (the strategy deletes the row
        under the old key)."""
        keys = dict(self.keys)
        shown = ", ".join(primary_key)
        values = [column for column in primary_key if column in self.values]
        if whole and values:
            return (
                f"the primary key ({shown}) holds {', '.join(values)}, an aggregate's value: a streaming "
                "aggregation would keep a group's rows under its old values"
            )
        covered = {i for column in primary_key for i in keys.get(column, ())}
        known = all(column in keys or column in self.values for column in primary_key)
        if known and covered != set(range(self.groups)):
            return f"the primary key ({shown}) does not identify a group: it lacks a GROUP BY expression"
        return ""


def aggregate_keys(root: Node) -> AggregateKeys | None:
    """The :class:`AggregateKeys` of the Aggregate at the top of a plan (under projections, aliases and a
    HAVING filter), or None when there is none there."""
    projections: list[Node] = []
    node = root
    while node.name in (*PASS, "Filter") and len(node.children) == 1 and not node.inner:
        if node.name == "Project":
            projections.append(node)
        node = node.children[0]
    if node.name != "Aggregate" or node.inner:
        return None
    lists = _brackets(node.text)
    grouping, outputs = ([], lists[0]) if len(lists) == 1 else (split_top(lists[0]), lists[1])
    index = {item: i for i, item in enumerate(grouping)}
    keys: dict[str, tuple[int, ...]] = {}  # output attribute (name#id) -> the groups it is
    values: set[str] = set()  # output attributes that are aggregate values
    for item in split_top(outputs):
        expr, name = _named(item)
        field = expr.rsplit(".", 1)[0] if expr.endswith((".start", ".end")) else None
        if name is None:
            continue
        if expr in index:
            keys[name] = (index[expr],)
        elif field in index and field.startswith("window#"):  # a window's start or end names the window
            keys[name] = (index[field],)
        elif "#" not in expr and "(" not in expr:  # a literal
            keys[name] = ()
        elif _AGGREGATE_CALL.match(expr):
            values.add(name)
    for project in reversed(projections):  # bottom up: plain attributes and renames keep what they are
        passed: dict[str, tuple[int, ...]] = {}
        kept: set[str] = set()
        for item in split_top(_brackets(project.text)[0]):
            expr, name = _named(item)
            source = _KEY_ATTR.match(expr)
            if name is None or source is None:
                continue
            if source.group(1) in keys:
                passed[name] = keys[source.group(1)]
            elif source.group(1) in values:
                kept.add(name)
        keys, values = passed, kept
    return AggregateKeys(
        len(grouping),
        tuple((k.split("#")[0], v) for k, v in keys.items()),
        tuple(sorted(v.split("#")[0] for v in values)),
    )


def _named(item: str) -> tuple[str, str | None]:
    """(expression, ``name#id`` of the attribute it outputs or None) of an output list's item."""
    alias = _ALIAS_AT_END.match(item)
    if alias is not None:
        return alias.group(1), alias.group(2)
    plain = _KEY_ATTR.match(item)
    return item, plain.group(1) if plain is not None else None


@dataclass(frozen=True)
class RowKeys:
    """The output columns of a row-wise query over one input that are one of the input's columns, passed
    through or renamed; and whether the query makes several rows of one (a ``Generate``: ``explode``)."""

    columns: tuple[tuple[str, str], ...]  # (output column, input column)
    generates: bool = False

    def refusal(self, primary_key: tuple[str, ...] | list[str], input_key: tuple[str, ...]) -> str:
        """Why ``primary_key`` cannot follow the input's changelog row by row ("": it can, or that is not
        known): every key column is an input column, yet they do not hold the input's key ``input_key``, or
        one input row makes several."""
        columns = dict(self.columns)
        if not primary_key or any(column not in columns for column in primary_key):
            return ""
        held = {columns[column] for column in primary_key}
        shown = ", ".join(primary_key)
        if not set(input_key) <= held:
            return (
                f"the primary key ({shown}) does not hold the input's key ({', '.join(input_key)}): rows of "
                "different input keys would overwrite and delete each other"
            )
        if self.generates:
            return f"the primary key ({shown}) holds no generated column, yet one input row makes several"
        return ""


_ROW_WISE = ("Project", "Filter", "SubqueryAlias", "Sort", "Generate")


def row_keys(root: Node) -> RowKeys | None:
    """The :class:`RowKeys` of a chain of projections, filters, sorts and generators over one input's view,
    or None for any other plan."""
    projections: list[Node] = []
    generates = False
    node = root
    while node.name in _ROW_WISE and len(node.children) == 1 and not node.inner:
        if node.name == "Project":
            projections.append(node)
        generates = generates or node.name == "Generate"
        node = node.children[0]
    if node.name != "View" or node.inner:
        return None
    lists = _brackets(node.text)
    if not lists:
        return None
    columns: dict[str, str] = {}  # attribute (name#id) -> input column
    for item in split_top(lists[0]):
        attr = _KEY_ATTR.match(item)
        if attr is None:
            return None
        columns[attr.group(1)] = attr.group(1).split("#")[0]
    for project in reversed(projections):  # bottom up: plain attributes and renames keep their input column
        passed: dict[str, str] = {}
        for item in split_top(_brackets(project.text)[0]):
            expr, name = _named(item)
            source = _KEY_ATTR.match(expr)
            if name is not None and source is not None and source.group(1) in columns:
                passed[name] = columns[source.group(1)]
        columns = passed
    return RowKeys(tuple((k.split("#")[0], v) for k, v in columns.items()), generates)
