"""Table selectors over a plan (the syntax: :mod:`registry.selectors`), and a plan cut down to a selection.

``flow plan --select`` prints :func:`subset`; ``flow trigger --full-refresh SEL`` rebuilds
:func:`select_tables` of the plan (and, as always, everything downstream of it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from materializer.plan import FlowPlan
from registry.selectors import Universe


def universe(plan: FlowPlan) -> Universe:
    """The plan's graph and tags, for selectors."""
    return Universe(plan.graph(), {t.name: t.tags for t in plan.tables}, plan.flow)


def select_tables(
    plan: FlowPlan, select: Iterable[str] = (), exclude: Iterable[str] = (), **options: str
) -> list[str]:
    """The tables of ``plan`` a selection selects (every one when ``select`` is empty), in plan order."""
    return universe(plan).select(select, exclude, **options)


def subset(plan: FlowPlan, tables: Iterable[str]) -> FlowPlan:
    """The plan of only ``tables``: their generations, the sources they read, and the edges between what
    is kept (an input outside the selection still shows in each table's ``inputs``)."""
    keep = set(tables)
    kept = tuple(t for t in plan.tables if t.name in keep)
    sources = {i.ref for t in kept for i in t.inputs if i.kind == "source"}
    return replace(
        plan,
        tables=kept,
        sources=tuple(s for s in plan.sources if s.ref in sources),
        generations=tuple(g for g in (tuple(n for n in gen if n in keep) for gen in plan.generations) if g),
        edges=tuple(e for e in plan.edges if e[1] in keep and (e[0] in keep or e[0] in sources)),
    )
