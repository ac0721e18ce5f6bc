"""The shipped flows and the action library register and validate together (fast, no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.examples._library import ACTIONS, REPO

FLOWS = sorted((REPO / "flows").glob("*.yaml"))


def test_at_least_two_flows_ship():
    names = {p.stem for p in FLOWS}
    assert {"ecommerce_activity", "order_attribution", "shop_trends"} <= names


@pytest.fixture
def registry(tmp_path):
    from registry.service import Registry

    reg = Registry.open(f"sqlite:///{tmp_path / 'registry.db'}")
    yield reg
    reg.close()


def test_library_registers_and_is_idempotent(registry):
    first = registry.register_actions([ACTIONS])
    assert len(first) >= 10 and all(v.version == 1 for v in first)
    again = registry.register_actions([ACTIONS])
    assert [(v.name, v.version, v.unchanged) for v in again] == [(v.name, 1, True) for v in first]


def test_flows_validate_and_register_pinned(registry):
    registry.register_actions([ACTIONS])
    ordered = sorted(FLOWS, key=lambda p: p.stem == "shop_trends")  # it reads ecommerce_activity's dwd.events
    for flow in ordered:
        version = registry.register_flow(flow)
        assert version.version == 1
        assert set(version.pins) == {name for name, _ in version.spec.tables()}
        assert all(ref.endswith("@1") for ref in version.pins.values())


def test_a_flow_reading_another_flows_table_needs_it_registered(registry):
    from runtime.core.errors import TidehouseError

    registry.register_actions([ACTIONS])
    with pytest.raises(TidehouseError) as info:
        registry.register_flow(REPO / "flows" / "shop_trends.yaml")
    codes = {e.code.value for e in getattr(info.value, "errors", [info.value])}
    assert "TH232" in codes  # INPUT_UNKNOWN_TABLE: dwd.events


@pytest.mark.parametrize("flow", FLOWS, ids=lambda p: p.stem)
def test_every_table_layer_reads_only_earlier_or_same_layer(flow: Path):
    from registry.specs import LAYERS, parse_flow

    spec = parse_flow(flow)
    for name, table in spec.tables():
        layer = name.split(".")[0]
        for bound in table.inputs.values():
            if layer == "ods":
                assert bound in spec.sources
            else:
                assert LAYERS.index(bound.split(".")[0]) <= LAYERS.index(layer)


def test_flow_sources_point_at_generated_data(tmp_path):
    from registry.specs import parse_flow
    from runtime.scaffold.generate import write_sample_data

    write_sample_data(tmp_path / "data", events=300)
    for flow in FLOWS:
        for name, source in parse_flow(flow).sources.items():
            folder = tmp_path / source.path
            assert folder.is_dir() and list(folder.glob("part-*.json")), (
                f"{flow.name}: {name} -> {source.path}"
            )
