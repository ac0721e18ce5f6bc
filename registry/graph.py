"""The flow DAG: a thin wrapper over :class:`networkx.DiGraph`, the one graph of a flow.

The registry builds it to find cycles (through other flows' tables too) when a flow is validated; the
materializer builds it to order the tables of a plan, and a :class:`~materializer.plan.FlowPlan` gives it
back from its own edges (``FlowPlan.graph()``: what ``--full-refresh`` drops downstream).

Nodes have stable ids: ``source:<name>`` for a flow's sources and ``<layer>.<name>`` for tables (tables
produced by other flows appear as ``<layer>.<name>`` nodes marked ``external``). An edge ``a -> b`` means
``b`` reads ``a``; it carries the relation name ``b``'s SQL reads it as (``None`` for an edge of another
flow, only there to find cycles through it). The order is :func:`networkx.topological_generations` with
ties sorted by id, so the same flow always yields the same order; a cycle is reported as
``dwd.a --> dwd.b --> dwd.a`` at the input of the flow that closes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import networkx as nx

from runtime.core.errors import ErrorCode, Location, TidehouseError

SOURCE_PREFIX = "source:"
LocationOf = Callable[
    [str], Location
]  # a dotted YAML path ("layers.dwd.clicks.inputs.events") -> where it is


def source_node(name: str) -> str:
    return f"{SOURCE_PREFIX}{name}"


def is_source(node: str) -> bool:
    return node.startswith(SOURCE_PREFIX)


class FlowGraph:
    """Sources and tables of one flow, and which reads which."""

    def __init__(self) -> None:
        self.graph = nx.DiGraph()

    @classmethod
    def build(
        cls,
        sources: Iterable[str],
        tables: Mapping[str, Mapping[str, str]],
        *,
        context: Mapping[str, Mapping[str, str]] | None = None,
        location_of: LocationOf | None = None,
        check: bool = True,
    ) -> FlowGraph:
        """``tables`` maps ``"dwd.clicks"`` to its inputs ``{relation name: source name or "layer.table"}``.

        An input naming a declared source becomes an edge from ``source:<name>``; any other input is a table
        (of this flow, or ``external`` when another flow produces it). ``context``: the tables of other flows
        and their inputs, so that a cycle through them is found too. ``check`` raises the first cycle.
        """
        source_names = set(sources)
        edges = [
            (source_node(ref) if ref in source_names and "." not in ref else ref, table, relation)
            for table in sorted(tables)
            for relation, ref in sorted(tables[table].items())
        ]
        context_edges = [
            (ref, table) for table, inputs in (context or {}).items() for ref in inputs.values() if "." in ref
        ]
        dag = cls.from_edges(tables, edges, sources=source_names, context=context_edges)
        if check:
            dag.check_acyclic(location_of)
        return dag

    @classmethod
    def from_edges(
        cls,
        tables: Iterable[str],
        edges: Iterable[tuple[str, str, str]],
        *,
        sources: Iterable[str] = (),
        context: Iterable[tuple[str, str]] = (),
    ) -> FlowGraph:
        """The graph of ``edges`` ``(upstream node, table, relation)``, as :meth:`edges` returns them (and a
        plan keeps them); ``context`` edges ``(upstream, table)`` belong to other flows."""
        dag = cls()
        for name in sorted(sources):
            dag.graph.add_node(source_node(name), kind="source")
        for table in sorted(tables):
            dag.graph.add_node(table, kind="table")
        for upstream, table in sorted(context):
            for node in (upstream, table):
                if node not in dag.graph:
                    dag.graph.add_node(node, kind="external")
            dag.graph.add_edge(upstream, table, relation=None)
        for upstream, table, relation in edges:  # after the context: this flow's own edges win
            if upstream not in dag.graph:
                dag.graph.add_node(upstream, kind="source" if is_source(upstream) else "external")
            dag.graph.add_edge(upstream, table, relation=relation)
        return dag

    # -- cycles -----------------------------------------------------------------------------------
    def cycle_errors(self, location_of: LocationOf | None = None) -> list[TidehouseError]:
        """One ``FLOW_CYCLE`` error per cycle through this flow's tables (one per strongly connected
        component, sorted), naming the cycle from its smallest table of this flow and located at the first
        input of the cycle that this flow declares."""
        errors = []
        for component in sorted(nx.strongly_connected_components(self.graph), key=sorted):
            first = min(component)
            if len(component) == 1 and not self.graph.has_edge(first, first):
                continue
            own = sorted(n for n in component if self.kind(n) == "table")
            if not own:
                continue
            cycle = nx.find_cycle(self.graph.subgraph(component), source=own[0])
            nodes = [cycle[0][0]] + [edge[1] for edge in cycle]
            a, b = next(((x, y) for x, y in cycle if self.relation(x, y) is not None), cycle[0])
            relation = self.relation(a, b)
            where = f"layers.{b}.inputs.{relation}" if relation is not None else f"layers.{b}"
            errors.append(
                TidehouseError(
                    ErrorCode.FLOW_CYCLE,
                    "cycle: " + " --> ".join(nodes),
                    location=node_location(location_of, where, prefixed=True),
                    hint="a table cannot depend on itself, directly or through other tables",
                )
            )
        return errors

    def check_acyclic(self, location_of: LocationOf | None = None) -> None:
        errors = self.cycle_errors(location_of)
        if errors:
            raise errors[0]

    # -- structure --------------------------------------------------------------------------------
    def generations(self) -> list[list[str]]:
        """Nodes by topological generation; each generation sorted by id."""
        return [sorted(gen) for gen in nx.topological_generations(self.graph)]

    def order(self) -> list[str]:
        return [node for gen in self.generations() for node in gen]

    def table_generations(self) -> list[list[str]]:
        """Only this flow's tables, by generation (empty generations dropped)."""
        out = []
        for gen in self.generations():
            tables = [n for n in gen if self.kind(n) == "table"]
            if tables:
                out.append(tables)
        return out

    def tables(self) -> list[str]:
        return [n for n in self.order() if self.kind(n) == "table"]

    def kind(self, node: str) -> str:
        return self.graph.nodes[node]["kind"]

    def relation(self, upstream: str, table: str) -> str | None:
        return self.graph.edges[upstream, table]["relation"]

    def upstream(self, node: str) -> list[str]:
        return sorted(self.graph.predecessors(node))

    def downstream(self, node: str) -> list[str]:
        return sorted(self.graph.successors(node))

    def descendants(self, nodes: Iterable[str]) -> list[str]:
        """The given tables and every table that reads them, directly or not, in topological order."""
        wanted: set[str] = set()
        for node in nodes:
            if node not in self.graph:
                raise TidehouseError(
                    ErrorCode.INPUT_UNKNOWN_TABLE,
                    f"the flow has no table '{node}'",
                    hint="name a table of the flow as layer.name",
                )
            wanted.add(node)
            wanted |= nx.descendants(self.graph, node)
        return [n for n in self.order() if n in wanted and self.kind(n) == "table"]

    def edges(self) -> list[tuple[str, str, str]]:
        """``(upstream, table, relation)`` of this flow's edges, sorted, for rendering and for a plan."""
        return sorted(
            (a, b, d["relation"]) for a, b, d in self.graph.edges(data=True) if d["relation"] is not None
        )


def node_location(location_of: LocationOf | None, node: str, *, prefixed: bool = False) -> Location | None:
    """Where a table (``layers.<node>``, or the dotted path ``node`` itself when ``prefixed``) is in the flow
    file; ``None`` when unknown. A location is a nicety: it never fails an error report."""
    if location_of is None:
        return None
    try:
        return location_of(node if prefixed else f"layers.{node}")
    except Exception:  # noqa: BLE001 - never fail an error report over its location
        return None
