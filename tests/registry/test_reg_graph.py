"""The flow DAG (registry/graph.py): stable ids, deterministic order, cycles named, one graph for validation
and plans."""

import pytest

from registry.graph import FlowGraph
from runtime.core.errors import ErrorCode, Location, TidehouseError

TABLES = {
    "ods.clicks": {"raw": "clicks"},
    "dwd.clicks": {"events": "ods.clicks"},
    "dws.users": {"events": "dwd.clicks"},
    "dws.items": {"events": "dwd.clicks"},
    "ads.top": {"activity": "dws.users", "items": "dws.items"},
    "ads.enriched": {"events": "dwd.clicks", "dim": "other.dim"},
}


def test_generations_sorted_and_stable():
    dag = FlowGraph.build(["clicks"], TABLES)
    assert dag.generations() == [
        ["other.dim", "source:clicks"],
        ["ods.clicks"],
        ["dwd.clicks"],
        ["ads.enriched", "dws.items", "dws.users"],
        ["ads.top"],
    ]
    assert dag.kind("other.dim") == "external"
    assert dag.table_generations()[-1] == ["ads.top"]
    again = FlowGraph.build(["clicks"], dict(reversed(list(TABLES.items()))))
    assert again.generations() == dag.generations()


def test_descendants_in_order():
    dag = FlowGraph.build(["clicks"], TABLES)
    assert dag.descendants(["dws.users"]) == ["dws.users", "ads.top"]
    assert dag.descendants(["dwd.clicks"]) == [
        "dwd.clicks",
        "ads.enriched",
        "dws.items",
        "dws.users",
        "ads.top",
    ]
    with pytest.raises(TidehouseError) as err:
        dag.descendants(["dws.nope"])
    assert err.value.code == ErrorCode.INPUT_UNKNOWN_TABLE


def test_cycle_is_named():
    tables = {"dwd.a": {"x": "dwd.b"}, "dwd.b": {"y": "dwd.a"}, "ods.c": {"r": "src"}}
    with pytest.raises(TidehouseError) as err:
        FlowGraph.build(["src"], tables)
    assert err.value.code == ErrorCode.FLOW_CYCLE
    assert (
        "dwd.a --> dwd.b --> dwd.a" in err.value.message or "dwd.b --> dwd.a --> dwd.b" in err.value.message
    )


def test_edges_carry_relation_names():
    dag = FlowGraph.build(["clicks"], TABLES)
    assert ("source:clicks", "ods.clicks", "raw") in dag.edges()
    assert dag.upstream("ads.top") == ["dws.items", "dws.users"]


def test_a_graph_rebuilt_from_its_edges_is_the_same_graph():
    """What a plan keeps (its edges) gives back the graph it was built from (FlowPlan.graph())."""
    dag = FlowGraph.build(["clicks"], TABLES)
    again = FlowGraph.from_edges(TABLES, dag.edges(), sources=["clicks"])
    assert again.generations() == dag.generations() and again.edges() == dag.edges()
    assert {n: again.kind(n) for n in again.order()} == {n: dag.kind(n) for n in dag.order()}
    assert again.descendants(["dwd.clicks"]) == dag.descendants(["dwd.clicks"])


def test_cycles_through_other_flows_are_found_and_located_at_this_flows_input():
    def location_of(path):
        return Location("one.yaml", path=path)

    own = {"ods.a": {"raw": "s"}, "dwd.x": {"left": "ods.a", "right": "dwd.y"}}
    other = {"dwd.y": {"events": "dwd.x"}}
    dag = FlowGraph.build(["s"], own, context=other, check=False)
    (error,) = dag.cycle_errors(location_of)
    assert error.code == ErrorCode.FLOW_CYCLE and error.message == "cycle: dwd.x --> dwd.y --> dwd.x"
    assert error.location.path == "layers.dwd.x.inputs.right"
    assert ("dwd.x", "dwd.y", "events") not in dag.edges()  # the other flow's edge is not this flow's
    assert FlowGraph.build(["s"], own, check=False).cycle_errors() == []
