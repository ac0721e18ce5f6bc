"""The flow DAG: a thin wrapper over :class:`networkx.DiGraph`.

Nodes have stable ids: ``source:<name>`` for a flow's sources and ``<layer>.<name>`` for tables (tables
produced by other flows appear as ``<layer>.<name>`` nodes marked ``external``). An edge ``a -> b`` means
``b`` reads ``a``. The order is :func:`networkx.topological_generations` with ties sorted by id, so the
same flow always yields the same order; a cycle is reported with :func:`networkx.find_cycle` as
``dwd.a --> dwd.b --> dwd.a``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import networkx as nx

from runtime.core.errors import ErrorCode, Location, TidehouseError

SOURCE_PREFIX = "source:"


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
        location_of=None,
    ) -> FlowGraph:
        """``tables`` maps ``"dwd.clicks"`` to its inputs ``{relation name: source name or "layer.table"}``.

        An input naming a declared source becomes an edge from ``source:<name>``; any other input is a table
        (of this flow, or ``external`` when another flow produces it).
        """
        dag = cls()
        source_names = set(sources)
        for name in sorted(source_names):
            dag.graph.add_node(source_node(name), kind="source")
        for table in sorted(tables):
            dag.graph.add_node(table, kind="table")
        for table in sorted(tables):
            for relation, ref in sorted(tables[table].items()):
                upstream = source_node(ref) if ref in source_names and "." not in ref else ref
                if upstream not in dag.graph:
                    dag.graph.add_node(upstream, kind="external")
                dag.graph.add_edge(upstream, table, relation=relation)
        dag.check_acyclic(location_of)
        return dag

    # -- structure --------------------------------------------------------------------------------
    def check_acyclic(self, location_of=None) -> None:
        try:
            cycle = nx.find_cycle(self.graph)
        except nx.NetworkXNoCycle:
            return
        nodes = [edge[0] for edge in cycle] + [cycle[0][0]]
        location = location_of(f"layers.{nodes[0]}") if location_of else None
        raise TidehouseError(
            ErrorCode.FLOW_CYCLE,
            f"the flow has a cycle: {' --> '.join(nodes)}",
            location=location,
            hint="a table cannot read itself, directly or through other tables",
        )

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

    def upstream(self, node: str) -> list[str]:
        return sorted(self.graph.predecessors(node))

    def downstream(self, node: str) -> list[str]:
        return sorted(self.graph.successors(node))

    def descendants(self, nodes: Iterable[str]) -> list[str]:
        """The given tables and every table that reads them, directly or not, in topological order."""
        wanted: set[str] = set()
        for node in nodes:
            if node not in self.graph:
                raise TidehouseError(ErrorCode.INPUT_UNKNOWN_TABLE, f"the flow has no table '{node}'",
                                     hint="name a table of the flow as layer.name")
            wanted.add(node)
            wanted |= nx.descendants(self.graph, node)
        return [n for n in self.order() if n in wanted and self.kind(n) == "table"]

    def edges(self) -> list[tuple[str, str, str]]:
        """``(upstream, table, relation)`` sorted, for rendering."""
        return sorted((a, b, d["relation"]) for a, b, d in self.graph.edges(data=True))


def node_location(location_of, node: str) -> Location | None:
    if location_of is None:
        return None
    try:
        return location_of(f"layers.{node}")
    except Exception:  # a location is a nicety; never fail an error report over it
        return None
