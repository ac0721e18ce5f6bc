"""Which joins the ``join_changelog`` strategy keeps, read from the analysed plan's node tree (never the SQL
text; docs/architecture.md, "Incremental maintenance").

Recognized: from the top, ``Project``/``Filter``/``SubqueryAlias`` nodes (row-wise: no subquery inside),
then ONE ``Join`` (inner, left/right/full outer) whose condition is a conjunction of ``a = b`` between plain
attributes, one of each side, and on each side ``Project``/``Filter``/``SubqueryAlias`` down to the View of
an input (two different inputs). A side's key attribute must be a column of its input, passed through or
renamed (``k AS key``): the strategy computes each input row's join key from its columns. With such a join
every output row that join key value ``k`` produces depends only on the input rows whose join key is ``k``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from materializer.incremental.facts import _brackets, _conjuncts, split_top

if TYPE_CHECKING:
    from materializer.plantext import Node

_ATTR = r"([A-Za-z_]\w*)#(\d+)L?"
_JOIN = re.compile(r"^Join (\w+)(?:, (.*))?$")
_EQUAL = re.compile(rf"^{_ATTR} = {_ATTR}$")
_ATTR_ONLY = re.compile(rf"^{_ATTR}$")
_ALIAS = re.compile(rf"^{_ATTR} AS {_ATTR}$")
_VIEW = re.compile(r"^View \(`([^`]+)`, \[")
KINDS = {"Inner": "inner", "LeftOuter": "left", "RightOuter": "right", "FullOuter": "full"}
ROW_WISE = ("Project", "Filter", "SubqueryAlias")


@dataclass(frozen=True)
class EquiJoin:
    kind: str  # inner | left | right | full
    left: str  # the input (view) name of the join's left side
    right: str
    keys: tuple[tuple[str, str], ...]  # (left input column, right input column), one per equality
    filtered: tuple[str, ...] = ()  # the sides ("l", "r") with a Filter below the join (it may drop rows)

    def describe(self) -> str:
        on = " AND ".join(f"{self.left}.{a} = {self.right}.{b}" for a, b in self.keys)
        return f"{self.kind} join of {self.left} and {self.right} ON {on}"


def _side(node: Node) -> tuple[str, dict[str, str], bool] | str:
    """(the input's view name, ``{attribute id: input column}``, whether a Filter is on the way) of one side
    of the join, or why not."""
    chain = []
    while node.name in ROW_WISE:
        if len(node.children) != 1 or node.inner:
            return "a subquery inside one side of the join"
        chain.append(node)
        node = node.children[0]
    view = _VIEW.match(node.text) if node.name == "View" else None
    if view is None or node.inner:
        return f"{node.name} below the join (each side must be one input, projected and filtered)"
    groups = _brackets(node.text)
    columns: dict[str, str] = {}
    for item in split_top(groups[0]) if groups else []:
        m = _ATTR_ONLY.match(item)
        if m is not None:
            columns[m.group(2)] = m.group(1)
    for above in reversed(chain):  # renames of input columns, bottom-up
        if above.name != "Project":
            continue
        for item in split_top(_brackets(above.text)[0]):
            a = _ALIAS.match(item)
            if a is not None and a.group(2) in columns:
                columns[a.group(4)] = columns[a.group(2)]
    return view.group(1), columns, any(above.name == "Filter" for above in chain)


def join_facts(root: Node) -> tuple[EquiJoin | None, str]:
    """(the equi-join of two inputs, "") or (None, why not); (None, "") when the plan has no join at all
    near its top."""
    node = root
    while node.name in ROW_WISE:
        if len(node.children) != 1 or node.inner:
            return None, "a subquery above the join"
        node = node.children[0]
    if node.name != "Join":
        return None, f"{node.name} above the join" if _has_join(node) else ""
    m = _JOIN.match(node.text)
    if m is None or len(node.children) != 2 or node.inner:
        return None, "a join this strategy does not read"
    kind = KINDS.get(m.group(1))
    if kind is None:
        return None, f"{m.group(1)} join (inner and outer equi-joins are kept incrementally)"
    if not m.group(2):
        return None, "a join without condition"
    sides = [_side(child) for child in node.children]
    for side in sides:
        if isinstance(side, str):
            return None, side
    (left, lcols, lfilter), (right, rcols, rfilter) = sides  # type: ignore[misc]
    if left == right:
        return None, "a self-join"
    keys = []
    for part in _conjuncts(m.group(2)):
        eq = _EQUAL.match(part)
        if eq is None:
            return None, f"join condition {part!r} is not an equality of two columns"
        a, b = eq.group(2), eq.group(4)
        if a in lcols and b in rcols:
            keys.append((lcols[a], rcols[b]))
        elif b in lcols and a in rcols:
            keys.append((lcols[b], rcols[a]))
        else:
            return None, f"join condition {part!r} does not compare an input column of each side"
    filtered = tuple(side for side, has in (("l", lfilter), ("r", rfilter)) if has)
    return EquiJoin(kind, left, right, tuple(keys), filtered), ""


def _has_join(node: Node) -> bool:
    return node.name == "Join" or any(_has_join(c) for c in (*node.children, *node.inner))
