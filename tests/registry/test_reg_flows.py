"""Flow specs that are valid: what the parser produces, and registering flows with pinned actions."""

from __future__ import annotations

import math

import pytest

from registry.service import Registry
from registry.specs import parse_action_text, parse_flow_text
from runtime.core.errors import ErrorCode, TidehouseError
from runtime.core.yamlsource import load_yaml
from tests.registry._reg_helpers import ACTIONS, BASE_FLOW, OTHER_FLOW, dedent, errors_of, write_actions


@pytest.fixture
def registry(tmp_path, registry_url):
    reg = Registry.open(registry_url)
    reg.register_actions([write_actions(tmp_path / "actions")])
    yield reg
    reg.close()


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_yaml_scalars_follow_yaml_1_2_without_timestamps():
    doc = load_yaml(
        "d: 2024-01-31\nt: 12:30\nhex: 0x1F\nneg: -3\nf: 1e3\ninf: -.inf\nq: 'yes'\nb: TRUE\nn: ~\n"
    )
    assert doc.data == {
        "d": "2024-01-31",
        "t": "12:30",
        "hex": 31,
        "neg": -3,
        "f": 1000.0,
        "inf": -math.inf,
        "q": "yes",
        "b": True,
        "n": None,
    }
    assert doc.ambiguous == {}


def test_anchors_and_merge_keys_keep_positions():
    doc = load_yaml("base: &b {buckets: 2, trigger: 1s}\nt:\n  <<: *b\n  trigger: 5s\n", "f.yaml")
    assert doc.data["t"] == {"trigger": "5s", "buckets": 2}
    assert doc.location(("t", "trigger")).line == 4
    assert doc.location(("t", "buckets")).line == 1  # where the merged value is written


def test_parse_flow_orders_layers_and_applies_defaults():
    text = dedent("""
        flow: shop
        trigger: 500ms
        tiering: {interval: 1m}
        defaults: {buckets: 3}
        sources:
          clicks: {format: rate, options: {rowsPerSecond: 10, enabled: true}}
        layers:
          dwd:
            clean: {action: clean, inputs: {events: ods.clicks}, buckets: 1, trigger: 2s}
          ods:
            clicks: {action: ingest, inputs: {raw: clicks}, tiering: {interval: 5s}}
        """)
    spec = parse_flow_text(text, "shop.yaml")
    assert list(spec.layers) == ["ods", "dwd"]
    assert [q for q, _ in spec.tables()] == ["ods.clicks", "dwd.clean"]
    assert spec.table("ods.clicks").buckets == 3 and spec.table("dwd.clean").buckets == 1
    assert spec.trigger_of("ods.clicks") == 0.5 and spec.trigger_of("dwd.clean") == 2.0
    assert spec.tiering_of("ods.clicks") == 5.0 and spec.tiering_of("dwd.clean") == 60.0
    assert spec.sources["clicks"].options == {"rowsPerSecond": "10", "enabled": "true"}
    assert spec.table("dwd.clean").action_name == "clean" and spec.table("dwd.clean").action_version is None
    loc = spec.location_of("layers.dwd.clean.trigger")
    assert (loc.file, loc.line, loc.path) == ("shop.yaml", 9, "layers.dwd.clean.trigger")
    assert spec.location_of("sources.clicks.options.rowsPerSecond").line == 6


def test_flow_spec_is_frozen():
    spec = parse_flow_text(BASE_FLOW)
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        spec.flow = "other"


def test_all_errors_are_reported_together(registry, tmp_path):
    text = BASE_FLOW.replace("action: clean,", "action: clen,").replace("{key: user_id}", "{kye: user_id}")
    path = write(
        tmp_path, "shop.yaml", text + "  ads:\n    top: {action: clean, inputs: {events: dws.nope}}\n"
    )
    with pytest.raises(TidehouseError) as info:
        registry.validate_flow(path)
    codes = sorted(e.code.name for e in errors_of(info.value))
    assert codes == ["ACTION_UNKNOWN", "INPUT_UNKNOWN_TABLE", "PARAM_MISSING", "PARAM_UNKNOWN"]
    lines = info.value.render().splitlines()
    assert len(lines) == 4 and all(line.startswith(f"{path}:") for line in lines)
    assert "did you mean 'clean'?" in lines[0]


def test_register_flow_pins_latest_versions_and_is_idempotent(registry, tmp_path):
    path = write(tmp_path, "shop.yaml", BASE_FLOW)
    first = registry.register_flow(path)
    assert (first.name, first.version, first.unchanged) == ("shop", 1, False)
    assert first.pins == {"ods.clicks": "ingest@1", "dwd.clean": "clean@1", "dws.counts": "count_by_key@1"}
    assert first.source_text == BASE_FLOW
    assert registry.register_flow(path).unchanged
    # a new version of an action: the same file re-registered pins it, as a new flow version
    registry.register_action(dedent(ACTIONS["clean"]).replace("price >=", "price >"))
    second = registry.register_flow(path)
    assert (second.version, second.pins["dwd.clean"]) == (2, "clean@2")
    assert registry.get_flow("shop", 1).pins["dwd.clean"] == "clean@1"
    (listed,) = registry.list_flows()
    assert (listed.version, listed.version_count) == (2, 2)


def test_explicit_versions_are_kept(registry, tmp_path):
    registry.register_action(dedent(ACTIONS["clean"]).replace("price >=", "price >"))
    path = write(tmp_path, "shop.yaml", BASE_FLOW.replace("action: clean,", "action: clean@1,"))
    assert registry.register_flow(path).pins["dwd.clean"] == "clean@1"


def test_registered_flow_revalidates_with_its_pins(registry, tmp_path):
    registry.register_flow(write(tmp_path, "shop.yaml", BASE_FLOW))
    # the latest clean now needs a parameter; the registered flow is pinned to clean@1 and stays valid
    changed = dedent(ACTIONS["clean"]).replace(
        "min_price: {type: double, default: 0.0}", "min_price: {type: double}"
    )
    assert registry.register_action(changed).version == 2
    assert registry.validate_registered_flow("shop").pins["dwd.clean"] == "clean@1"
    with pytest.raises(TidehouseError) as info:
        registry.validate_flow(tmp_path / "shop.yaml")  # unpinned, the file resolves to clean@2
    assert info.value.code is ErrorCode.PARAM_MISSING


def test_tables_of_other_flows_can_be_read_but_not_produced(registry, tmp_path):
    registry.register_flow(write(tmp_path, "other.yaml", OTHER_FLOW))
    reader = BASE_FLOW + "  ads:\n    shared_view: {action: clean, inputs: {events: dwd.shared}}\n"
    assert registry.validate_flow(write(tmp_path, "shop.yaml", reader)).flow == "shop"
    clash = BASE_FLOW.replace(
        "  dws:\n", "    shared: {action: clean, inputs: {events: ods.clicks}}\n  dws:\n"
    )
    with pytest.raises(TidehouseError) as info:
        registry.register_flow(write(tmp_path, "clash.yaml", clash))
    assert info.value.code is ErrorCode.TABLE_DUPLICATE
    assert "flow 'other'" in info.value.message and "other.yaml:9:" in info.value.message
    # a new version of the same flow may keep its own tables
    assert registry.register_flow(write(tmp_path, "other2.yaml", OTHER_FLOW + "\n# v2\n")).version == 2


def test_cycle_across_flows_is_named(registry, tmp_path):
    one = dedent("""
        flow: one
        sources: {s: {format: rate}}
        layers:
          ods: {a: {action: ingest, inputs: {raw: s}}}
          dwd: {x: {action: join2, inputs: {left: ods.a, right: dwd.y}}}
        """)
    two = dedent("""
        flow: two
        layers:
          dwd: {y: {action: clean, inputs: {events: dwd.x}}}
        """)
    # `two` reads dwd.x of flow one, which is not registered yet: unknown table
    with pytest.raises(TidehouseError) as info:
        registry.register_flow(write(tmp_path, "two.yaml", two))
    assert info.value.code is ErrorCode.INPUT_UNKNOWN_TABLE
    with pytest.raises(TidehouseError):
        registry.register_flow(write(tmp_path, "one.yaml", one))  # dwd.y unknown as well
    # once both exist in the registry, the cycle through both flows is found
    relaxed = one.replace("right: dwd.y", "right: ods.a")
    registry.register_flow(write(tmp_path, "one.yaml", relaxed))
    registry.register_flow(write(tmp_path, "two.yaml", two))
    with pytest.raises(TidehouseError) as info:
        registry.validate_flow(write(tmp_path, "one3.yaml", one))
    assert info.value.code is ErrorCode.FLOW_CYCLE
    assert "dwd.x --> dwd.y --> dwd.x" in info.value.message


def test_local_actions_resolve_before_registration(registry, tmp_path):
    text = BASE_FLOW.replace("action: clean,", "action: brand_new,")
    path = write(tmp_path, "shop.yaml", text)
    with pytest.raises(TidehouseError):
        registry.validate_flow(path)
    local = parse_action_text(dedent(ACTIONS["clean"]).replace("name: clean", "name: brand_new"))
    assert registry.validate_flow(path, local_actions=[local]).flow == "shop"
    check = registry.check_flow(registry.validate_flow(path, local_actions=[local]), local_actions=[local])
    assert check.resolved["dwd.clean"].version is None and check.resolved["ods.clicks"].ref == "ingest@1"


def test_register_actions_parses_everything_before_storing(registry, tmp_path):
    folder = tmp_path / "more"
    folder.mkdir()
    (folder / "good.sql").write_text("/*---\nname: good\n---*/\nSELECT 1\n")
    (folder / "bad.sql").write_text("/*---\nname: Bad\n---*/\nSELECT 1\n")
    with pytest.raises(TidehouseError):
        registry.register_actions([folder])
    assert "good" not in {a.name for a in registry.list_actions()}


def test_two_files_defining_one_action_are_refused(registry, tmp_path):
    folder = tmp_path / "dups"
    folder.mkdir()
    (folder / "a.sql").write_text("/*---\nname: same\n---*/\nSELECT 1\n")
    (folder / "b.sql").write_text("/*---\nname: same\n---*/\nSELECT 2\n")
    with pytest.raises(TidehouseError) as info:
        registry.register_actions([folder])
    assert info.value.code is ErrorCode.ACTION_DUPLICATE and "a.sql" in info.value.message


def test_source_schema_may_mark_required_columns_but_action_contracts_may_not():
    text = dedent("""
        flow: shop
        sources:
          clicks: {format: json, path: x,
                   schema: "id bigint NOT NULL, `the kind` string not null, price double"}
        layers:
          ods:
            clicks: {action: ingest, inputs: {raw: clicks}}
        """)
    assert parse_flow_text(text, "shop.yaml").sources["clicks"].schema_.startswith("id bigint NOT NULL")
    with pytest.raises(TidehouseError, match="NOT NULL is for source schemas only"):
        parse_action_text("/*---\nname: a\noutput: 'a bigint NOT NULL'\n---*/\nSELECT 1 AS a\n")
