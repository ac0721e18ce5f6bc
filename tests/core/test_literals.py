"""The shared words (runtime/core/literals.py): the spec and the hot store agree on them, and where they
differ on purpose (``last``), the difference is the one written down."""

from __future__ import annotations

import pyarrow as pa
import pytest

from registry.specs import parse_flow_text
from runtime.core import literals as L
from runtime.core.errors import TidehouseError
from runtime.storage.api import TableMeta
from runtime.storage.local import LocalTableStore
from runtime.storage.meta import validate

FLOW = """flow: f
sources: {{s: {{format: rate}}}}
layers:
  ods:
    t:
      action: ingest
      inputs: {{raw: s}}
      primary_key: [k]
{extra}"""
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64()), ("w", pa.int64())])


def test_the_store_accepts_what_flows_may_name_plus_the_implicit_last():
    assert (*L.AGGREGATIONS, L.IMPLICIT_AGGREGATION) == L.STORED_AGGREGATIONS
    assert set(L.STORED_AGGREGATIONS) == set(L.StoredAggregation.__args__)
    assert L.SYSTEM_COLUMNS == ("__offset", "__bucket", "__ts", "__change")
    assert all(L.is_system_column(c) for c in L.SYSTEM_COLUMNS) and not L.is_system_column("_one")


@pytest.mark.parametrize("engine", L.MERGE_ENGINES)
def test_every_merge_engine_is_one_word_for_the_spec_and_the_store(engine):
    aggs = "      aggregations: {v: sum}\n" if engine == "aggregate" else ""
    spec = parse_flow_text(FLOW.format(extra=f"      merge_engine: {engine}\n{aggs}"), "f.yaml")
    table = spec.table("ods.t")
    meta = validate(
        TableMeta(
            "ods.t",
            SCHEMA,
            kind=L.PRIMARY_KEY,
            primary_key=("k",),
            merge_engine=table.merge_engine,
            aggregations=dict(table.aggregations),
        )
    )
    assert meta.merge_engine == engine


@pytest.mark.parametrize("function", L.AGGREGATIONS)
def test_every_aggregation_a_flow_names_the_store_takes(function):
    spec = parse_flow_text(
        FLOW.format(extra=f"      merge_engine: aggregate\n      aggregations: {{v: {function}}}\n"), "f.yaml"
    )
    validate(
        TableMeta(
            "ods.t",
            SCHEMA,
            kind=L.PRIMARY_KEY,
            primary_key=("k",),
            merge_engine="aggregate",
            aggregations=dict(spec.table("ods.t").aggregations),
        )
    )


def test_last_is_not_a_word_of_flows_but_the_default_the_store_spells_out(tmp_path):
    with pytest.raises(TidehouseError) as info:
        parse_flow_text(
            FLOW.format(extra="      merge_engine: aggregate\n      aggregations: {v: sum, w: last}\n"),
            "f.yaml",
        )
    assert info.value.location.path == "layers.ods.t.aggregations.w"
    # in the store, naming `last` is the same as naming nothing: the column takes the incoming value
    store = LocalTableStore(tmp_path, fsync=False)
    try:
        for name, aggs in (
            ("ods.named", {"v": "sum", "w": L.IMPLICIT_AGGREGATION}),
            ("ods.implicit", {"v": "sum"}),
        ):
            store.create_table(
                TableMeta(
                    name,
                    SCHEMA,
                    kind=L.PRIMARY_KEY,
                    primary_key=("k",),
                    merge_engine="aggregate",
                    aggregations=aggs,
                )
            )
            for seq, (v, w) in enumerate([(1, 10), (2, None), (3, 30)]):
                store.write(
                    name,
                    pa.table({"k": ["a"], "v": [v], "w": pa.array([w], pa.int64())}, schema=SCHEMA),
                    writer="t",
                    seq=seq,
                )
        named, implicit = store.scan("ods.named"), store.scan("ods.implicit")
        assert named.to_pylist() == implicit.to_pylist() == [{"k": "a", "v": 6, "w": 30}]
    finally:
        store.close()


def test_kinds_and_system_columns_are_refused_alike():
    with pytest.raises(TidehouseError, match="kind must be"):
        validate(TableMeta("ods.t", SCHEMA, kind="table"))
    with pytest.raises(TidehouseError, match="reserved for system columns"):
        validate(TableMeta("ods.t", pa.schema([("__x", pa.int64())])))
    with pytest.raises(TidehouseError, match="system columns"):
        parse_flow_text(FLOW.format(extra="").replace("primary_key: [k]", "primary_key: [__x]"), "f.yaml")
