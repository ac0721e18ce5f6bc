"""``materializer/diff.py`` on hand-made plans (no Spark): every kind of change, and that "rebuild" is always
the fingerprint's verdict."""

from __future__ import annotations

from dataclasses import replace

import pytest

from materializer.diff import diff_plans
from materializer.plan import Expectation, FlowPlan, Input, Param, SourcePlan, TablePlan, table_fingerprint

SOURCE = SourcePlan("raw", "json", "/data/raw", "id string, v double", fingerprint="src-1")


def _table(name: str, inputs: tuple[Input, ...], **fields) -> TablePlan:
    base = dict(
        name=name,
        layer=name.split(".")[0],
        kind="log",
        strategy="append",
        reason="",
        action="a@1",
        action_path=None,
        sql_line=1,
        sql="SELECT *\nFROM x\nWHERE v > :min",
        params=(Param("min", "double", 0.0),),
        inputs=inputs,
        ddl="`id` string, `v` double",
        primary_key=(),
        merge_engine="last_row",
        aggregations=(),
        buckets=1,
        bucket_key=(),
        trigger=1.0,
        tiering_interval=30.0,
        expect=(),
        quarantine=None,
        fingerprint="",
        checkpoint="",
    )
    base.update(fields)
    return TablePlan(**base)


def _plan(tables: list[TablePlan], source: SourcePlan = SOURCE, version: int | None = 1) -> FlowPlan:
    """A plan with fingerprints derived as build_plan derives them (topological order given)."""
    known = {source.ref: source.fingerprint}
    done = []
    for t in tables:
        upstream = {i.ref: known.get(i.ref, f"external:{i.ddl}") for i in t.inputs}
        fp = table_fingerprint(t, upstream)
        known[t.name] = fp
        done.append(replace(t, fingerprint=fp, checkpoint=f"/ckpt/{t.name}/{fp[:12]}"))
    edges = tuple((i.ref, t.name, i.name) for t in tables for i in t.inputs)
    generations = tuple((t.name,) for t in tables)
    return FlowPlan("f", version, (source,), tuple(done), generations, edges)


def _flow(**changes) -> FlowPlan:
    """ods.raw <- source raw; dwd.clean <- ods.raw; dws.agg <- dwd.clean (with ``changes`` per table)."""
    ods = _table(
        "ods.raw", (Input("x", "source:raw", "source", "`id` string, `v` double"),), **changes.get("ods", {})
    )
    dwd = _table("dwd.clean", (Input("x", "ods.raw", "log", ods.ddl),), **changes.get("dwd", {}))
    dws = _table("dws.agg", (Input("x", "dwd.clean", "log", dwd.ddl),), **changes.get("dws", {}))
    return _plan([ods, dwd, dws], changes.get("source", SOURCE))


def test_no_change():
    diff = diff_plans(_flow(), _flow(), "f.yaml")
    assert not diff.differs and diff.rebuild == [] and diff.command is None


@pytest.mark.parametrize(
    ("dwd", "field", "detail"),
    [
        ({"ddl": "`id` string, `v` bigint, `w` int"}, "ddl", ("+ w int", "v double -> bigint")),
        ({"ddl": "`id` string"}, "ddl", ("- v double",)),
        ({"ddl": "`v` double, `id` string"}, "ddl", ("column order id, v -> v, id",)),
        ({"params": (Param("min", "double", 2.0),)}, "params", (":min 0.0 (double) -> 2.0 (double)",)),
        ({"params": ()}, "params", (":min 0.0 (double) -> unset",)),
        (
            {"expect": (Expectation("pos", "v > 0", "drop"),)},
            "expect",
            ("+ pos: v > 0 (drop)",),
        ),
        ({"primary_key": ("id",), "kind": "primary_key"}, "primary_key", ()),
        ({"buckets": 4}, "buckets", ()),
        ({"merge_engine": "first_row"}, "merge_engine", ()),
    ],
)
def test_a_change_in_the_fingerprint_rebuilds_the_table_and_downstream(dwd, field, detail):
    diff = diff_plans(_flow(), _flow(dwd=dwd), "f.yaml")
    tables = {t.table: t for t in diff.tables}
    change = next(c for c in tables["dwd.clean"].changes if c.field == field)
    assert change.rebuild and change.detail == detail
    assert diff.rebuild == ["dwd.clean", "dws.agg"] and diff.full_refresh == ("dwd.clean",)
    assert tables["dws.agg"].reasons == ("reads dwd.clean, which is rebuilt",)
    assert tables["ods.raw"].status == "unchanged"


def test_the_sql_as_a_unified_diff():
    diff = diff_plans(_flow(), _flow(dwd={"sql": "SELECT *\nFROM x\nWHERE v >= :min", "action": "a@2"}))
    change = {c.field: c for c in diff.tables[1].changes}
    assert not change["action"].rebuild and change["sql"].rebuild
    assert change["sql"].detail[:2] == ("--- a@1", "+++ a@2")
    assert "-WHERE v > :min" in change["sql"].detail and "+WHERE v >= :min" in change["sql"].detail
    assert "REBUILD: sql changed" in diff.to_text()


@pytest.mark.parametrize(
    "dws",
    [
        {"trigger": 5.0},
        {"tiering_interval": 60.0},
        {"freshness": 120.0},
        {"tags": ("pii",)},
        {"action": "a@3"},
    ],
)
def test_settings_outside_the_fingerprint_never_rebuild(dws):
    diff = diff_plans(_flow(), _flow(dws=dws))
    (table,) = [t for t in diff.tables if t.status == "changed"]
    assert table.table == "dws.agg" and not table.rebuild and diff.rebuild == []
    assert [c.field for c in table.changes] == list(dws) and not table.changes[0].rebuild
    assert table.reasons[0].endswith(" only")


def test_a_source_change_rebuilds_what_reads_it():
    source = replace(SOURCE, ddl="id string, v double, w int", fingerprint="src-2")
    diff = diff_plans(_flow(), _flow(source=source))
    assert [(s.source, s.status, [c.field for c in s.changes]) for s in diff.sources] == [
        ("raw", "changed", ["ddl"])
    ]
    assert diff.rebuild == ["ods.raw", "dwd.clean", "dws.agg"] and diff.full_refresh == ("ods.raw",)
    assert diff.tables[0].reasons == ("reads source raw, whose definition changed",)


def test_another_flows_table_whose_schema_changed():
    def flow(ddl: str) -> FlowPlan:
        return _plan([_table("dws.t", (Input("x", "dwd.other", "log", ddl),))])

    diff = diff_plans(flow("`id` string"), flow("`id` string, `n` int"))
    assert diff.rebuild == ["dws.t"] and diff.tables[0].reasons == (
        "reads dwd.other of another flow, whose schema changed",
    )


def test_added_removed_and_not_registered():
    two = _plan([_table("ods.raw", (Input("x", "source:raw", "source", "`id` string"),))])
    three = _flow()
    diff = diff_plans(two, three)
    assert diff.added == ["dwd.clean", "dws.agg"] and diff.rebuild == []
    back = diff_plans(three, two)
    assert back.removed == ["dwd.clean", "dws.agg"]
    fresh = diff_plans(None, three, "f.yaml")
    assert fresh.version is None and fresh.added == ["ods.raw", "dwd.clean", "dws.agg"]
    assert [s.status for s in fresh.sources] == ["added"] and "not registered" in fresh.to_text()
    assert fresh.to_dict()["added"] == fresh.added


OTHER = """flow: other
layers:
  dws:
    items: {action: x, inputs: {events: dwd.clean}}
    unrelated: {action: x, inputs: {events: dwd.elsewhere}}
  ads:
    top: {action: y, inputs: {items: dws.items}}
"""


def test_other_flows_that_read_a_rebuilt_or_removed_table_are_named():
    from registry.specs import parse_flow_text

    others = {"other": parse_flow_text(OTHER, "<other>")}
    diff = diff_plans(_flow(), _flow(dwd={"buckets": 2}), "f.yaml", others)
    (reader,) = diff.readers
    assert (reader.flow, reader.reads, reader.tables) == ("other", ("dwd.clean",), ("dws.items", "ads.top"))
    assert reader.command == "tidehouse flow trigger other --full-refresh dwd.clean+"
    assert "then flow other, which reads dwd.clean" in diff.to_text()
    assert diff.to_dict()["readers"][0]["command"] == reader.command
    assert diff_plans(_flow(), _flow(dws={"buckets": 2}), "f.yaml", others).readers == ()

    two = _plan(list(_flow().tables[:1]))
    removed = diff_plans(_flow(), two, "f.yaml", others)
    table = next(t for t in removed.tables if t.table == "dwd.clean")
    assert table.status == "removed" and table.reasons == ("read by flow other",)
    assert (
        "dwd.clean: removed: no longer run or tiered; its hot and lake tables are kept; read by flow other"
        in (removed.to_text())
    )


def test_a_mapping_field_shows_only_the_entries_that_differ():
    """The facts of an incremental strategy were printed whole on each side (two ~600-character JSON
    objects for a top-n limit of 10 -> 5)."""
    facts = {"function": "row_number", "limit": 10, "order": [{"column": "v", "descending": True}]}
    before = _flow(dws={"incremental": facts})
    after = _flow(dws={"incremental": {**facts, "limit": 5, "partition": ["id"]}})
    diff = diff_plans(before, after, "f.yaml")
    (change,) = next(t for t in diff.tables if t.table == "dws.agg").changes
    assert change.field == "incremental" and change.detail == ("limit: 10 -> 5", '+ partition: ["id"]')
    assert '      incremental [no rebuild]: limit: 10 -> 5; + partition: ["id"]' in diff.to_text()
    gone = diff_plans(after, before, "f.yaml")
    assert next(t for t in gone.tables if t.table == "dws.agg").changes[0].detail == (
        "limit: 5 -> 10",
        "- partition",
    )
    assert "rebuild 2 tables: " in diff_plans(_flow(), _flow(dwd={"buckets": 2}), "f.yaml").to_text()
