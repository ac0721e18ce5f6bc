"""Which SQL the incremental strategies keep, read from the analysed plan's node tree (never the SQL text).

:func:`topn_facts` and :func:`aggregate_facts` take the tree :mod:`materializer.plantext` parses out of
Spark's explain text and return the facts a strategy needs at run time, or None when the plan is not exactly
a shape they understand (docs/architecture.md, "Incremental maintenance"). The facts are plain frozen data:
they go into the plan (``TablePlan.incremental``) and its JSON.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from materializer.plantext import Node

_ATTR = r"([A-Za-z_]\w*)#(\d+)L?"
_ORDER = re.compile(rf"^{_ATTR} (ASC|DESC) NULLS (FIRST|LAST)$")
_RANK_FN = re.compile(
    r"^(row_number|rank|dense_rank)\((.*?)\) windowspecdefinition\((.*)\) AS " + _ATTR + "$"
)
_LIMIT = re.compile(rf"^\({_ATTR} (<=|<|=) (?:cast\()?(\d+)(?: as int\))?\)$")
_AGG = re.compile(rf"^(count|sum|avg|min|max)\((distinct )?(1|{_ATTR})\) AS {_ATTR}$")
_ATTR_ONLY = re.compile(rf"^{_ATTR}$")
_ALIAS = re.compile(rf"^{_ATTR} AS {_ATTR}$")
_NUMBER = r"-?\d+(?:\.\d+)?(?:E-?\d+)?[LDSY]?|-?\d+BD"
_COMPARE = re.compile(
    rf"^{_ATTR} (<=|>=|<|>|=|!=) (?:cast\(({_NUMBER}) as \w+(?:\(\d+,\d+\))?\)|({_NUMBER}))$"
)
# a bare literal the explain text prints without quotes: a string one only when nothing in it could be read as
# the condition's structure (no blank, bracket, quote or '#'); anything else is not read at all
_COMPARE_TEXT = re.compile(rf"^{_ATTR} (<=|>=|<|>|=|!=) ([\w.:@/+-]+)$")
# a literal output column ('all' AS id), read only when plain (as a HAVING's string literal)
_CONSTANT = re.compile(r"^(-?[\w.:@/+]+) AS ([A-Za-z_]\w*)#\d+L?$")
PASS = ("Project", "SubqueryAlias")
WINDOW_FUNCTIONS = ("row_number", "rank", "dense_rank")


@dataclass(frozen=True)
class OrderKey:
    column: str  # an input column
    descending: bool
    nulls_first: bool


@dataclass(frozen=True)
class TopN:
    function: str  # row_number | rank | dense_rank
    limit: int  # rows with rank <= limit are the result
    order: tuple[OrderKey, ...]
    # (output column, input column or None for the rank) when the SQL's output is only those, renamed or not:
    # then the result is computed with Arrow; None: the SQL computes more, and Spark runs it
    output: tuple[tuple[str, str | None], ...] | None = None
    partition: tuple[str, ...] = ()  # PARTITION BY input columns (a top N per partition)

    def describe(self) -> str:
        keys = ", ".join(f"{k.column} {'DESC' if k.descending else 'ASC'}" for k in self.order)
        per = f"PARTITION BY {', '.join(self.partition)} " if self.partition else ""
        return f"top {self.limit} by {self.function}() over ({per}ORDER BY {keys})"


@dataclass(frozen=True)
class Aggregation:
    function: str  # count | count_distinct | sum | avg | min | max
    column: str | None  # the input column (None: count(1))
    output: str  # the Aggregate's output attribute name


@dataclass(frozen=True)
class Comparison:
    """``column op value`` in a HAVING. The explain text prints a string literal unquoted, so a bare literal
    is read as both a number (when it looks like one) and its ``text``; which of them the comparison means is
    decided by the column's type (:func:`materializer.incremental.literals.typed_having`)."""

    column: str  # an Aggregate output name
    op: str
    value: float | int | str | None  # None: the literal is not a number (a string, once typed)
    text: str = ""  # the bare literal as printed ("" when Spark cast it: never a string)


@dataclass(frozen=True)
class GroupAggregate:
    group: tuple[str, ...]  # input columns (none: a global aggregate, one row even over no rows)
    aggregations: tuple[Aggregation, ...]
    having: tuple[Comparison, ...]
    # (output column, Aggregate output name) in output order
    output: tuple[tuple[str, str], ...]
    # (Aggregate output name, literal) of the literal columns ('all' AS id): the literal as the plan prints
    # it, then (:func:`materializer.incremental.literals.typed`) a value of the output column's type
    constants: tuple[tuple[str, object], ...] = ()

    def describe(self) -> str:
        aggs = ", ".join(
            f"{a.function}({a.column or '*'})".replace("count_distinct(", "count(DISTINCT ")
            for a in self.aggregations
        )
        text = f"GROUP BY {', '.join(self.group)}: {aggs}" if self.group else f"global aggregate: {aggs}"
        if self.having:
            shown = [(c, repr(c.value) if isinstance(c.value, str) else c.value) for c in self.having]
            text += " HAVING " + " AND ".join(f"{c.column} {c.op} {value}" for c, value in shown)
        return text


def _brackets(text: str) -> list[str]:
    """The top-level ``[...]`` groups of a node's text, in order."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            if depth == 0:
                start = i + 1
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                out.append(text[start:i])
    return out


def split_top(items: str, *, angles: bool = False) -> list[str]:
    """The comma-separated items of a list, split at depth 0 only (brackets and parentheses nest; with
    ``angles`` also ``<...>``, as in type names), stripped; a blank tail is no item."""
    opening, closing = ("[(<", "])>") if angles else ("[(", "])")
    out, depth, cur = [], 0, []
    for ch in items:
        if ch in opening:
            depth += 1
        elif ch in closing:
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _unwrap(text: str) -> str:
    """``text`` without parentheses that enclose all of it."""
    while text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, ch in enumerate(text):
            depth += 1 if ch == "(" else -1 if ch == ")" else 0
            if depth == 0 and i < len(text) - 1:
                return text
        text = text[1:-1].strip()
    return text


def _conjuncts(condition: str) -> list[str]:
    """The parts of a condition joined by ``AND`` (an ``OR`` stays inside one part). Spark nests a chain of
    them to the left, ``((a AND b) AND c)``: each part is split again."""
    text, parts, depth, start = _unwrap(condition), [], 0, 0
    for i, ch in enumerate(text):
        depth += 1 if ch == "(" else -1 if ch == ")" else 0
        if depth == 0 and text.startswith(" AND ", i):
            parts.append(text[start:i])
            start = i + 5
    parts.append(text[start:])
    if len(parts) == 1:
        return [text]
    return [c for p in parts for c in _conjuncts(p.strip())]


def _down(node: Node) -> Node:
    while node.name in PASS and len(node.children) == 1 and not node.inner:
        node = node.children[0]
    return node


def _view_columns(node: Node) -> dict[str, str] | None:
    """``{attribute id: input column}`` of the input's View under a Project/SubqueryAlias chain."""
    node = _down(node)
    if node.name != "View" or node.inner:
        return None
    groups = _brackets(node.text)
    if not groups:
        return None
    out = {}
    for item in split_top(groups[0]):
        m = _ATTR_ONLY.match(item)
        if m is None:
            return None
        out[m.group(2)] = m.group(1)
    return out


def topn_facts(root: Node) -> TopN | None:
    """A top-N over the one input (global, or per PARTITION BY of input columns), or None."""
    flt = _down(root)
    if flt.name != "Filter" or len(flt.children) != 1 or flt.inner:
        return None
    limit = _LIMIT.match(flt.text[len("Filter ") :].strip())
    window = _down(flt.children[0])
    if limit is None or window.name != "Window" or len(window.children) != 1 or window.inner:
        return None
    groups = _brackets(window.text)
    exprs = split_top(groups[0]) if groups else []
    if len(groups) not in (2, 3) or len(exprs) != 1:  # a PARTITION BY prints a group before the order
        return None
    fn = _RANK_FN.match(exprs[0])
    if fn is None or fn.group(5) != limit.group(2):
        return None
    columns = _view_columns(window.children[0])
    if columns is None:
        return None
    partition = []
    for item in split_top(groups[1]) if len(groups) == 3 else []:
        m = _ATTR_ONLY.match(item)
        if m is None or columns.get(m.group(2)) != m.group(1):
            return None
        partition.append(m.group(1))
    order = []
    for item in split_top(groups[-1]):
        m = _ORDER.match(item)
        if m is None or columns.get(m.group(2)) != m.group(1):
            return None
        order.append(OrderKey(m.group(1), m.group(3) == "DESC", m.group(4) == "FIRST"))
    op, n = limit.group(3), int(limit.group(4))
    if op == "<":
        n -= 1
    elif op == "=" and n != 1:
        return None
    if n < 1 or not order:
        return None
    return TopN(fn.group(1), n, tuple(order), _topn_output(root, fn.group(5), columns), tuple(partition))


def _topn_output(root: Node, rank_id: str, columns: dict[str, str]) -> tuple | None:
    """The top-N's output columns as (name, input column or None for the rank), or None when one of them is
    computed (anything but an attribute passed through or renamed, down to the rank or the input's View)."""
    if root.name != "Project" or root.inner:
        return None
    source: dict[str, str | None] = {}  # attribute id -> the id it renames (None: computed)
    node: Node | None = root
    while node is not None and node.name != "View":
        if node.name == "Project":
            for item in split_top(_brackets(node.text)[0]):
                a = _ALIAS.match(item)
                if a is not None:
                    source[a.group(4)] = a.group(2)
                elif _ATTR_ONLY.match(item) is None:
                    named = re.search(rf" AS {_ATTR}$", item)
                    if named is None:
                        return None
                    source[named.group(2)] = None
        node = node.children[0] if len(node.children) == 1 else None
    out = []
    for item in split_top(_brackets(root.text)[0]):
        m, a = _ATTR_ONLY.match(item), _ALIAS.match(item)
        if m is not None:
            name, ref = m.group(1), m.group(2)
        elif a is not None:
            name, ref = a.group(3), a.group(2)
        else:
            return None
        seen: set[str] = set()
        while ref in source and ref not in seen and ref != rank_id:
            seen.add(ref)
            ref = source[ref]
            if ref is None:
                return None
        if ref == rank_id:
            out.append((name, None))
        elif ref in columns:
            out.append((name, columns[ref]))
        else:
            return None
    return tuple(out)


def aggregate_facts(root: Node) -> GroupAggregate | None:
    """A GROUP BY of input columns with retractable aggregates and an optional HAVING of comparisons with
    literals (untyped until :func:`materializer.incremental.literals.typed_having`), or None."""
    top = root
    output: list[tuple[str, str]] | None = None
    if top.name == "Project" and len(top.children) == 1 and not top.inner:
        output = []
        for item in split_top(_brackets(top.text)[0]):
            m, a = _ATTR_ONLY.match(item), _ALIAS.match(item)
            if m is not None:
                output.append((m.group(1), m.group(1)))
            elif a is not None:
                output.append((a.group(3), a.group(1)))
            else:
                return None
        top = top.children[0]
    node = _down(top)
    having: list[Comparison] = []
    if node.name == "Filter" and len(node.children) == 1 and not node.inner:
        for part in _conjuncts(node.text[len("Filter ") :].strip()):
            negated = part.startswith("NOT (") and part.endswith(")")  # x != y prints NOT (x = y)
            if negated:
                part = _unwrap(part[len("NOT ") :])
            m = _COMPARE.match(part)
            if m is None:
                t = _COMPARE_TEXT.match(part)
                if t is None:
                    return None
                comparison = Comparison(t.group(1), t.group(3), None, t.group(4))
            else:
                literal = (m.group(4) or m.group(5)).rstrip("LDSY").removesuffix("B")
                value = float(literal) if any(c in literal for c in ".E") else int(literal)
                comparison = Comparison(m.group(1), m.group(3), value, m.group(5) or "")
            if negated and comparison.op != "=":
                return None
            having.append(replace(comparison, op="!=") if negated else comparison)
        node = _down(node.children[0])
    if node.name != "Aggregate" or len(node.children) != 1 or node.inner:
        return None
    columns = _view_columns(node.children[0])
    lists = _brackets(node.text)  # a global aggregate prints its outputs only
    if columns is None or len(lists) not in (1, 2):
        return None
    group = []
    for item in split_top(lists[0]) if len(lists) == 2 else []:
        m = _ATTR_ONLY.match(item)
        if m is None or columns.get(m.group(2)) != m.group(1):
            return None
        group.append(m.group(1))
    aggs, names, constants = [], [], []
    for item in split_top(lists[-1]):
        m, a, c = _ATTR_ONLY.match(item), _AGG.match(item), _CONSTANT.match(item)
        if m is not None and m.group(1) in group:
            names.append(m.group(1))
            continue
        if c is not None:
            constants.append((c.group(2), c.group(1)))
            names.append(c.group(2))
            continue
        if a is None:
            return None
        fn, distinct, arg = a.group(1), bool(a.group(2)), a.group(3)
        column = None if arg == "1" else a.group(4)
        if column is not None and columns.get(a.group(5)) != column:
            return None
        if (column is None and fn != "count") or (distinct and fn != "count"):
            return None
        aggs.append(Aggregation("count_distinct" if distinct else fn, column, a.group(6)))
        names.append(a.group(6))
    if not aggs or any(c.column not in names for c in having):
        return None
    if output is None:
        output = [(n, n) for n in names]
    if any(src not in names for _, src in output):
        return None
    return GroupAggregate(tuple(group), tuple(aggs), tuple(having), tuple(output), tuple(constants))
