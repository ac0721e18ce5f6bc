"""Table selectors (registry/selectors.py): dbt's syntax over the shipped flows' graphs, without Spark."""

from __future__ import annotations

import pytest

from registry.graph import FlowGraph
from registry.selectors import Universe, parse_atom, spec_tables, spec_universe
from registry.specs import parse_flow
from runtime.core.errors import ErrorCode, TidehouseError
from tests._support import REPO

ECOMMERCE = REPO / "flows" / "ecommerce_activity.yaml"
ATTRIBUTION = REPO / "flows" / "order_attribution.yaml"
ALL = ["ods.events", "dwd.events", "dws.user_activity", "ads.conversion", "ads.top_users"]


@pytest.fixture(scope="module")
def shop():
    return parse_flow(ECOMMERCE)


@pytest.mark.parametrize(
    ("select", "exclude", "expected"),
    [
        ([], [], ALL),
        (["dws.user_activity"], [], ["dws.user_activity"]),
        (["dws.user_activity+"], [], ["dws.user_activity", "ads.conversion", "ads.top_users"]),
        (["+ads.top_users"], [], ["ods.events", "dwd.events", "dws.user_activity", "ads.top_users"]),
        (["+dws.user_activity+"], [], ALL),
        (["1+ads.top_users"], [], ["dws.user_activity", "ads.top_users"]),
        (["dwd.events+1"], [], ["dwd.events", "dws.user_activity"]),
        (["2+ads.conversion"], [], ["dwd.events", "dws.user_activity", "ads.conversion"]),
        (["@dws.user_activity"], [], ALL),
        (["layer:ads"], [], ["ads.conversion", "ads.top_users"]),
        (["ads.*"], [], ["ads.conversion", "ads.top_users"]),
        (["*.events"], [], ["ods.events", "dwd.events"]),
        (["table:dwd.events"], [], ["dwd.events"]),
        (["tag:funnel"], [], ["dws.user_activity", "ads.conversion"]),
        (["tag:funnel+"], [], ["dws.user_activity", "ads.conversion", "ads.top_users"]),
        # a space (or a repeated option) is a union, a comma an intersection
        (["ods.events ads.top_users"], [], ["ods.events", "ads.top_users"]),
        (["ods.events", "ads.top_users"], [], ["ods.events", "ads.top_users"]),
        (["tag:funnel,layer:ads"], [], ["ads.conversion"]),
        (["dws.user_activity+,layer:ads"], [], ["ads.conversion", "ads.top_users"]),
        (["dws.user_activity+"], ["ads.top_users"], ["dws.user_activity", "ads.conversion"]),
        ([], ["layer:ads", "ods.events"], ["dwd.events", "dws.user_activity"]),
    ],
)
def test_selectors_over_the_shipped_ecommerce_flow(shop, select, exclude, expected):
    assert spec_tables(shop, select, exclude) == expected  # the flow's topological order


def test_a_flow_with_two_branches():
    spec = parse_flow(ATTRIBUTION)
    assert spec_tables(spec, ["+ads.revenue_by_channel"]) == spec_universe(spec).tables
    assert spec_tables(spec, ["layer:ods"]) == ["ods.orders", "ods.touches"]
    assert spec_tables(spec, ["ods.touches+"]) == [
        "ods.touches",
        "dws.first_touch",
        "dws.attributed_orders",
        "ads.revenue_by_channel",
    ]
    assert spec_tables(spec, ["+dws.attributed_orders", "dwd.orders"], ["layer:ods"]) == [
        "dwd.orders",
        "dws.first_touch",
        "dws.attributed_orders",
    ]


@pytest.mark.parametrize(
    ("select", "hint"),
    [
        ("dws.user_activty", "did you mean 'dws.user_activity'?"),
        ("user_activity", "did you mean 'dws.user_activity'?"),  # a table is layer.name
        ("events", "did you mean 'ods.events' or 'dwd.events'?"),
        ("dws.nothing*", "tables: ods.events"),
        ("tag:funel", "did you mean 'funnel'?"),
        ("layer:dwx", "did you mean"),
        ("layer:gold", "layers: ods, dwd, dws, ads"),
        ("tags:funnel", "did you mean 'tag'?"),
        ("dwd.events,ads.top_users", "a comma intersects"),  # was a list of tables before selectors
        ("++dwd.events", "write TABLE"),
        ("@dwd.events+", "@X already includes X+"),
        ("layer:", None),
        ("DWD.Events", None),
    ],
)
def test_a_selector_that_selects_nothing_is_an_error_with_a_hint(shop, select, hint):
    with pytest.raises(TidehouseError) as err:
        spec_tables(shop, [select], option="--full-refresh")
    assert err.value.code is ErrorCode.SELECTOR_INVALID and err.value.exit_code == 2
    assert err.value.location.path == "--full-refresh"
    if hint:
        assert hint in (err.value.hint or ""), err.value.render()


def test_excluding_everything_is_an_error(shop):
    with pytest.raises(TidehouseError) as err:
        spec_tables(shop, ["layer:ads"], ["ads.*"])
    assert err.value.code is ErrorCode.SELECTOR_INVALID and err.value.location.path == "--select"
    with pytest.raises(TidehouseError) as err:
        spec_tables(shop, [], ["dws.nope"])  # an unknown table is an error in --exclude too
    assert err.value.location.path == "--exclude"


def test_a_layer_the_flow_does_not_have():
    spec = parse_flow(REPO / "flows" / "shop_trends.yaml")  # dws and ads only
    with pytest.raises(TidehouseError) as err:
        spec_tables(spec, ["layer:ods"])
    assert "its layers: dws, ads" in err.value.hint


def test_atoms_parse():
    atom = parse_atom("2+tag:finance+3")
    assert (atom.method, atom.value, atom.up, atom.down, atom.at) == ("tag", "finance", 2, 3, False)
    atom = parse_atom("+dws.users")
    assert (atom.method, atom.value, atom.up, atom.down) == ("table", "dws.users", None, 0)
    assert parse_atom("@layer:dwd").at


def test_walks_go_through_other_flows_tables_and_sources_but_select_only_this_flows():
    tables = {
        "ods.clicks": {"raw": "clicks"},
        "dwd.clicks": {"events": "ods.clicks"},
        "dws.users": {"events": "dwd.clicks"},
        "ads.enriched": {"events": "dwd.clicks", "dim": "other.dim"},
    }
    universe = Universe(FlowGraph.build(["clicks"], tables), flow="f")
    assert universe.select(["+ads.enriched"]) == ["ods.clicks", "dwd.clicks", "ads.enriched"]
    assert universe.select(["@dws.users"]) == ["ods.clicks", "dwd.clicks", "dws.users"]
    assert universe.upstream_roots(["dwd.clicks", "dws.users", "ads.enriched"]) == ["dwd.clicks"]
    assert universe.upstream_roots(["dws.users", "ads.enriched"]) == ["ads.enriched", "dws.users"]


def test_tags_are_strict_and_unique(tmp_path):
    text = ECOMMERCE.read_text(encoding="utf-8")
    cases = (
        ("[Funnel]", ErrorCode.SPEC_BAD_IDENTIFIER, "tags[0]"),
        ("[a, a]", ErrorCode.SPEC_BAD_VALUE, "tags[1]"),
    )
    for bad, code, where in cases:
        path = tmp_path / "f.yaml"
        path.write_text(text.replace("tags: [funnel]  ", f"tags: {bad}  ", 1), encoding="utf-8")
        with pytest.raises(TidehouseError) as err:
            parse_flow(path)
        error = getattr(err.value, "errors", [err.value])[0]
        assert error.code is code and error.location.path == f"layers.dws.user_activity.{where}"
    assert spec_universe(parse_flow(ECOMMERCE)).tags["dws.user_activity"] == ("funnel",)


def test_another_flows_table_starts_a_walk_but_is_never_selected():
    spec = parse_flow(REPO / "flows" / "shop_trends.yaml")  # reads dwd.events of ecommerce_activity
    readers = spec_tables(spec, ["dwd.events+1"])
    assert readers and all(t.split(".")[0] in ("dws", "ads") for t in readers)
    assert spec_tables(spec, ["dwd.events+"]) == spec_universe(spec).tables
    for lonely in ("dwd.events", "+dwd.events"):
        with pytest.raises(TidehouseError) as err:
            spec_tables(spec, [lonely])
        assert "another flow" in err.value.message and "dwd.events+" in err.value.hint
