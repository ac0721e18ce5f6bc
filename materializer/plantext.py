"""Facts about an analysed query read from Spark's explain text — the same on a classic master and over Spark
Connect, where no JVM object is reachable from Python.

The input is the ``== Analyzed Logical Plan ==`` section of ``EXPLAIN EXTENDED``: a schema line, then one
line per plan node, indented three characters per level under ``+-`` / ``:-`` markers. Subquery plans inside
expressions are printed two levels in, under ``:`` markers: their nodes count among the query's nodes (a
subquery that aggregates makes the query stateful), but not as children. Attributes read ``name#id``; an
event-time column of a ``WATERMARK`` clause carries its delay as ``name#id-T<ms>ms``. A test holds every fact
equal to a reference walk of the JVM plan (``tests/materializer/_jvmshape.py``) over the shipped actions and
the planner's test queries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from materializer.incremental.facts import aggregate_facts, split_top, topn_facts
from materializer.incremental.joinfacts import join_facts
from materializer.incremental.keyfacts import aggregate_keys, row_keys
from materializer.shape import PASS_THROUGH, SqlShape

ANALYZED = "== Analyzed Logical Plan =="
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_ATTR = re.compile(r"(?<![\w`])([A-Za-z_][\w]*)#(\d+)L?(?:-T(\d+)ms)?")
NONDETERMINISTIC = re.compile(
    r"\b(rand|randn|uuid|shuffle|monotonically_increasing_id|spark_partition_id|"
    r"input_file_name|random|try_reflect|reflect)\s*\(",
    re.IGNORECASE,
)
# struct columns the analyser derives from an event-time column (they carry its watermark mark too)
_WINDOW_COLUMNS = frozenset({"window", "session_window"})


@dataclass
class Node:
    name: str
    text: str  # the node's line without its tree markers
    children: list[Node] = field(default_factory=list)
    inner: list[Node] = field(default_factory=list)  # plans of subqueries inside the node's expressions


def analyzed_section(explain: str) -> str:
    """The analysed plan's lines (schema line first) out of an ``EXPLAIN EXTENDED`` text."""
    start = explain.find(ANALYZED)
    if start < 0:
        raise ValueError("no analysed plan in the explain text")
    body = explain[start + len(ANALYZED) :].lstrip("\n")
    end = body.find("\n== ")
    return body if end < 0 else body[:end]


def parse_tree(section: str) -> Node:
    """The node tree of an analysed plan section (its first line, the schema, is skipped)."""
    lines = [line for line in section.splitlines()[1:] if line.strip()]
    if not lines:
        raise ValueError("the analysed plan has no nodes")
    root: Node | None = None
    stack: list[tuple[int, Node]] = []  # (column of the node's name, node)
    for line in lines:
        match = _NAME.search(line)
        if match is None:
            continue
        col = match.start()
        node = Node(match.group(0), line[col:])
        while stack and stack[-1][0] >= col:
            stack.pop()
        if stack:  # a subquery's plan is printed two levels in (under ":  +- "), a child one level
            parent_col, parent = stack[-1]
            (parent.inner if col - parent_col > 3 else parent.children).append(node)
        elif root is None:
            root = node
        else:  # a second top-level line: a continuation of the root's text
            root.text += " " + node.text
            continue
        stack.append((col, node))
    assert root is not None
    return root


def _walk(node: Node):
    yield node
    for child in (*node.inner, *node.children):
        yield from _walk(child)


def _bracket(text: str, start: int) -> str:
    """The text inside the ``[...]`` that opens at ``start`` (nested brackets and parentheses kept)."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] in "[(":
            depth += 1
        elif text[i] in "])":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return text[start + 1 :]


def _output(node: Node) -> list[str] | None:
    """The output attributes (``name#id``) of a projection chain's node, or None when not a plain list."""
    if node.name == "Project":
        items = split_top(_bracket(node.text, node.text.index("[")), angles=True)
        return [item if _ATTR.fullmatch(item) else "?" for item in items]
    if node.name == "SubqueryAlias" and len(node.children) == 1:
        return _output(node.children[0])
    if node.name == "View":
        start = node.text.find("[")
        return split_top(_bracket(node.text, start), angles=True) if start >= 0 else None
    return None


def _identity(root: Node) -> bool:
    """Only projections and aliases over one view, returning exactly the view's attributes in its order."""
    node = root
    while node.name in ("Project", "SubqueryAlias") and len(node.children) == 1:
        node = node.children[0]
    if node.name != "View":
        return False
    top, view = _output(root), _output(node)
    return top is not None and "?" not in top and top == view


def shape_of(explain: str) -> SqlShape:
    """The :class:`SqlShape` of an analysed query from its ``EXPLAIN EXTENDED`` text."""
    section = analyzed_section(explain)
    root = parse_tree(section)
    nodes = list(_walk(root))
    names = frozenset(n.name for n in nodes)
    distinct_agg = any(n.name == "Aggregate" and "DISTINCT" in n.text.upper() for n in nodes)
    session_window = any(
        n.name == "Aggregate"
        and re.search(r"\bsession_window#\d+", _bracket(n.text, n.text.index("[")) if "[" in n.text else "")
        for n in nodes
    )
    watermarks: dict[str, float] = {}
    for n in nodes:
        for name, _id, delay in _ATTR.findall(n.text):
            if delay and name not in _WINDOW_COLUMNS:
                watermarks[name] = int(delay) / 1000.0
    top = root
    while top.name in PASS_THROUGH and len(top.children) == 1:
        top = top.children[0]
    found = NONDETERMINISTIC.search(section)
    join, join_refusal = join_facts(root)
    return SqlShape(
        names,
        top.name,
        found is None,
        f" ({found.group(1).lower()}())" if found else "",
        distinct_agg,
        bool(names & {"GlobalLimit", "LocalLimit"}),
        _identity(root),
        session_window=session_window,
        watermarks=tuple(sorted(watermarks.items())),
        topn=topn_facts(root),
        group_aggregate=aggregate_facts(root),
        aggregate_keys=aggregate_keys(root),
        row_keys=row_keys(root),
        join=join,
        join_refusal=join_refusal,
    )
