"""Table selectors: dbt's node-selection syntax over one flow's graph (``--select``, ``--exclude``,
``--full-refresh``).

A selection is a list of strings (the repeated option's values). Within a string, a space is a **union**
and a comma an **intersection**, as in dbt (``"dws.users+ layer:ads"``: either; ``"tag:pii,layer:dwd"``:
both); the strings of a repeated option are a union too. An atom is::

    [@][N]+? BODY +?[N]

    dws.users            the table (layer.name; * and ? glob: ads.*, *.events)
    dws.users+           it and every table downstream; dws.users+1: and the tables reading it directly
    +ads.top             it and every table upstream; 2+ads.top: up to two steps up
    +dws.users+          both ways
    @dws.users           it, everything downstream, and everything those read (what a rebuild touches)
    layer:dws            every table of a layer
    tag:finance          every table tagged finance (the table key ``tags:``)
    table:dws.users      the explicit form of a table name

Graph operators apply to any body (``+tag:finance``). Only tables of the flow are selected: sources and
other flows' tables are walked through by ``+`` but never selected (``dwd.events+``, where another flow
produces ``dwd.events``, selects this flow's tables that read it). Anything that selects nothing is an
error (``SELECTOR_INVALID``) with a did-you-mean: an unknown table, tag, layer or method, and an
intersection that no table satisfies (with a note that a comma intersects). The result is in the flow's
topological order. Pure: no Spark, no store — :func:`spec_tables` resolves against a flow spec,
``materializer.selection`` against a plan.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import networkx as nx

from registry.graph import FlowGraph
from registry.specs.base import did_you_mean
from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.literals import LAYERS

METHODS = ("table", "layer", "tag")
_ATOM = re.compile(
    r"^(?P<at>@)?(?:(?P<up_depth>\d+)?(?P<up>\+))?(?P<body>[^\s,+@]+)(?:(?P<down>\+)(?P<down_depth>\d+)?)?\Z"
)
_TABLE_PATTERN = re.compile(r"^[a-z0-9_*?\[\]]+\.[a-z0-9_*?\[\]]+\Z")
_NAME_PATTERN = re.compile(r"^[a-z0-9_]+\Z")  # a table name without its layer: refused with the candidates
ALL = None  # a depth of None: no limit


@dataclass(frozen=True)
class Atom:
    """One selector method with its graph operators."""

    text: str
    method: str  # table | layer | tag
    value: str
    up: int | None = 0  # steps upstream: 0 none, N up to N, None all the way
    down: int | None = 0  # steps downstream, the same way
    at: bool = False  # dbt's @: downstream, and everything the downstream reads


@dataclass(frozen=True)
class Term:
    """Atoms that must all hold (a comma-joined intersection)."""

    text: str
    atoms: tuple[Atom, ...]


def _error(message: str, option: str, hint: str | None = None) -> TidehouseError:
    return TidehouseError(ErrorCode.SELECTOR_INVALID, message, location=Location(path=option), hint=hint)


def parse_atom(text: str, option: str = "--select") -> Atom:
    """One atom (``2+dws.users``, ``tag:finance+``, ``@layer:dwd``); a malformed one raises."""
    match = _ATOM.match(text)
    if not match:
        raise _error(
            f"{text!r} is not a selector",
            option,
            "write TABLE, TABLE+, +TABLE, N+TABLE, TABLE+N, @TABLE, layer:LAYER or tag:TAG; a table is "
            "layer.name",
        )
    if match["at"] and (match["up"] or match["down"]):
        raise _error(f"{text!r}: @ cannot be combined with +", option, "@X already includes X+")
    body = match["body"]
    method, sep, value = body.partition(":")
    if not sep:
        method, value = "table", body
    elif method not in METHODS:
        raise _error(
            f"{text!r}: unknown selector method {method!r}",
            option,
            did_you_mean(method, METHODS) or f"methods: {', '.join(METHODS)}",
        )
    if not value:
        raise _error(f"{text!r}: {method}: needs a value", option)
    if method == "table" and not _TABLE_PATTERN.match(value) and not _NAME_PATTERN.match(value):
        raise _error(f"{text!r}: a table is written layer.name (globs * and ? allowed: ads.*)", option)

    def depth(flag: str | None, digits: str | None) -> int | None:
        if not flag:
            return 0
        return int(digits) if digits else ALL

    return Atom(
        text,
        method,
        value,
        up=depth(match["up"], match["up_depth"]),
        down=depth(match["down"], match["down_depth"]),
        at=bool(match["at"]),
    )


def parse_selection(texts: Iterable[str], option: str = "--select") -> list[Term]:
    """The terms (a union) of an option's values: each value split at spaces, each part at commas."""
    terms = []
    for text in texts:
        for part in str(text).split():
            atoms = tuple(parse_atom(a, option) for a in part.split(",") if a)
            if not atoms:
                raise _error(f"{part!r} is not a selector", option)
            terms.append(Term(part, atoms))
    return terms


class Universe:
    """What selectors resolve against: one flow's graph and the tags of its tables."""

    def __init__(
        self, graph: FlowGraph, tags: Mapping[str, Iterable[str]] | None = None, flow: str = ""
    ) -> None:
        self.graph = graph
        self.flow = flow
        self.tables = graph.tables()  # topological order
        self.external = sorted(n for n in graph.graph if graph.kind(n) == "external")  # other flows' tables
        self.tags = {t: tuple((tags or {}).get(t, ())) for t in self.tables}

    def _base(self, atom: Atom, option: str) -> set[str]:
        where = f"flow {self.flow}" if self.flow else "the flow"
        if atom.method == "table":
            if "." not in atom.value:
                named = [t for t in self.tables if t.split(".", 1)[1] == atom.value]
                raise _error(
                    f"{atom.text!r}: a table is written layer.name",
                    option,
                    (
                        f"did you mean {' or '.join(repr(t) for t in named)}?"
                        if named
                        else f"tables: {', '.join(self.tables)}"
                    ),
                )
            found = {t for t in self.tables if fnmatch.fnmatchcase(t, atom.value)}
            if not found:  # another flow's table this flow reads: a start for `+` (dwd.events+)
                found = {n for n in self.external if fnmatch.fnmatchcase(n, atom.value)}
            if not found:
                raise _error(
                    f"{atom.text!r}: {where} has no table {atom.value}",
                    option,
                    did_you_mean(atom.value, self.tables) or f"tables: {', '.join(self.tables)}",
                )
            return found
        if atom.method == "layer":
            if atom.value not in LAYERS:
                raise _error(
                    f"{atom.text!r}: no layer {atom.value!r}",
                    option,
                    did_you_mean(atom.value, LAYERS) or f"layers: {', '.join(LAYERS)}",
                )
            found = {t for t in self.tables if t.split(".", 1)[0] == atom.value}
            if not found:
                present = sorted({t.split(".", 1)[0] for t in self.tables}, key=LAYERS.index)
                raise _error(
                    f"{atom.text!r}: {where} has no table in layer {atom.value}",
                    option,
                    f"its layers: {', '.join(present)}",
                )
            return found
        known = sorted({tag for tags in self.tags.values() for tag in tags})
        found = {t for t, tags in self.tags.items() if atom.value in tags}
        if not found:
            raise _error(
                f"{atom.text!r}: no table of {where} is tagged {atom.value!r}",
                option,
                did_you_mean(atom.value, known)
                or (f"its tags: {', '.join(known)}" if known else "its tables have no tags: (a table key)"),
            )
        return found

    def _walk(self, start: set[str], depth: int | None, graph: nx.DiGraph) -> set[str]:
        out: set[str] = set()
        for node in start:
            out |= set(nx.single_source_shortest_path_length(graph, node, cutoff=depth))
        return out

    def atom(self, atom: Atom, option: str = "--select") -> set[str]:
        """The tables one atom selects."""
        base = self._base(atom, option)
        g = self.graph.graph
        nodes = set(base)
        if atom.at:
            below = self._walk(base, ALL, g)
            nodes = below | self._walk(below, ALL, g.reverse(copy=False))
        if atom.down != 0:
            nodes |= self._walk(base, atom.down, g)
        if atom.up != 0:
            nodes |= self._walk(base, atom.up, g.reverse(copy=False))
        selected = {n for n in nodes if self.graph.kind(n) == "table"}
        if not selected:  # only other flows' tables: name what this flow reads them with
            outside = ", ".join(sorted(base))
            raise _error(
                f"{atom.text!r}: {outside} is another flow's table, which this flow only reads",
                option,
                f"{atom.value}+ selects the tables of this flow that read it",
            )
        return selected

    def terms(self, terms: list[Term], option: str) -> set[str]:
        out: set[str] = set()
        for term in terms:
            found = set.intersection(*(self.atom(a, option) for a in term.atoms))
            if not found:  # each atom selected something: only an intersection can come out empty
                raise _error(
                    f"{term.text!r} selects no table: no table is in all of "
                    + ", ".join(a.text for a in term.atoms),
                    option,
                    "a comma intersects (dbt's syntax): for a union separate selectors with a space "
                    "(quoted) or repeat the option",
                )
            out |= found
        return out

    def select(
        self,
        select: Iterable[str] = (),
        exclude: Iterable[str] = (),
        *,
        option: str = "--select",
        exclude_option: str = "--exclude",
    ) -> list[str]:
        """The selected tables in topological order: every table when ``select`` is empty."""
        chosen = parse_selection(select, option)
        dropped = parse_selection(exclude, exclude_option)
        wanted = self.terms(chosen, option) if chosen else set(self.tables)
        wanted -= self.terms(dropped, exclude_option)
        if not wanted:
            raise _error(
                "the selection leaves no table", option, f"{exclude_option} removed every selected table"
            )
        return [t for t in self.tables if t in wanted]

    def upstream_roots(self, tables: Iterable[str]) -> list[str]:
        """The tables of ``tables`` that read none of the others, directly or not: what ``--full-refresh``
        needs to name to rebuild them all (it rebuilds everything downstream of what it names)."""
        chosen = set(tables)
        g = self.graph.graph
        return [t for t in self.tables if t in chosen and not (nx.ancestors(g, t) & chosen)]


def spec_universe(spec) -> Universe:
    """The universe of a flow spec (:class:`~registry.specs.FlowSpec`), without Spark."""
    tables = dict(spec.tables())
    graph = FlowGraph.build(spec.sources.keys(), {t: dict(s.inputs) for t, s in tables.items()}, check=False)
    return Universe(graph, {t: s.tags for t, s in tables.items()}, spec.flow)


def spec_tables(spec, select: Iterable[str] = (), exclude: Iterable[str] = (), **options: str) -> list[str]:
    """The tables of a flow spec that a selection selects, in topological order."""
    return spec_universe(spec).select(select, exclude, **options)
