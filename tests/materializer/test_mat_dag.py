"""The flow DAG: stable ids, deterministic order, cycles named."""

import pytest

from materializer.dag import FlowGraph
from runtime.core.errors import ErrorCode, TidehouseError

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
        ["other.dim", "source:clicks"], ["ods.clicks"], ["dwd.clicks"],
        ["ads.enriched", "dws.items", "dws.users"], ["ads.top"],
    ]
    assert dag.kind("other.dim") == "external"
    assert dag.table_generations()[-1] == ["ads.top"]
    again = FlowGraph.build(["clicks"], dict(reversed(list(TABLES.items()))))
    assert again.generations() == dag.generations()


def test_descendants_in_order():
    dag = FlowGraph.build(["clicks"], TABLES)
    assert dag.descendants(["dws.users"]) == ["dws.users", "ads.top"]
    assert dag.descendants(["dwd.clicks"]) == ["dwd.clicks", "ads.enriched", "dws.items", "dws.users", "ads.top"]
    with pytest.raises(TidehouseError) as err:
        dag.descendants(["dws.nope"])
    assert err.value.code == ErrorCode.INPUT_UNKNOWN_TABLE


def test_cycle_is_named():
    tables = {"dwd.a": {"x": "dwd.b"}, "dwd.b": {"y": "dwd.a"}, "ods.c": {"r": "src"}}
    with pytest.raises(TidehouseError) as err:
        FlowGraph.build(["src"], tables)
    assert err.value.code == ErrorCode.FLOW_CYCLE
    assert "dwd.a --> dwd.b --> dwd.a" in err.value.message or "dwd.b --> dwd.a --> dwd.b" in err.value.message


def test_edges_carry_relation_names():
    dag = FlowGraph.build(["clicks"], TABLES)
    assert ("source:clicks", "ods.clicks", "raw") in dag.edges()
    assert dag.upstream("ads.top") == ["dws.items", "dws.users"]
