"""Union reads: lake rows up to the snapshot's offsets + the hot tail = the hot table, for log and PK
tables."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.lake.tiering import tier_table
from runtime.lake.union import referenced_tables, union_query, unknown_table
from runtime.storage.api import CHANGE, TableMeta
from tests.lake._lakekit import ACTIVITY, CATALOGS, CLICKS, clicks, rows_of

pytestmark = pytest.mark.catalogs(*CATALOGS)  # the embedded SQL catalog and a REST catalog

PK_CHANGES = ACTIVITY.append(pa.field(CHANGE, pa.string()))


def changes(rows):
    return pa.Table.from_pylist(rows, schema=PK_CHANGES)


@pytest.fixture
def filled(store, lake):
    """ods.clicks with 30 rows tiered and 12 hot only; dws.activity with lake state and hot changes after
    it."""
    store.create_table(TableMeta("ods.clicks", CLICKS, buckets=2, bucket_key=("user_id",)))
    store.write("ods.clicks", clicks(30), writer="w", seq=0)
    store.create_table(
        TableMeta("dws.activity", ACTIVITY, kind="primary_key", primary_key=("user_id",), buckets=2)
    )
    store.write(
        "dws.activity",
        changes([{"user_id": f"u{i}", "events": i, "last_item": "a", CHANGE: "+I"} for i in range(6)]),
        writer="w",
        seq=0,
    )
    tier_table(store, lake, "ods.clicks")
    tier_table(store, lake, "dws.activity")
    store.write("ods.clicks", clicks(12, start=30), writer="w", seq=1)
    store.write(
        "dws.activity",
        changes(
            [
                {"user_id": "u1", "events": 100, "last_item": "b", CHANGE: "+U"},
                {"user_id": "u2", "events": None, "last_item": None, CHANGE: "-D"},
                {"user_id": "u9", "events": 9, "last_item": "c", CHANGE: "+I"},
            ]
        ),
        writer="w",
        seq=1,
    )
    return store, lake


def test_log_union_is_lake_plus_hot_tail(filled):
    store, lake = filled
    out = union_query(store, lake, "SELECT * FROM ods.clicks")
    assert out.num_rows == 42
    assert rows_of(out) == rows_of(store.scan("ods.clicks"))
    lake_only = union_query(store, lake, "SELECT count(*) AS n FROM ods.clicks$lake")
    assert lake_only.to_pylist() == [{"n": 30}]
    log = union_query(
        store, lake, 'SELECT max("__offset") + 1 AS n, count(*) AS c FROM ods."clicks$changelog"'
    )
    assert log.column("c").to_pylist() == [42]


def test_pk_union_hot_wins(filled):
    store, lake = filled
    out = union_query(store, lake, "SELECT user_id, events, last_item FROM dws.activity ORDER BY user_id")
    assert rows_of(out) == rows_of(store.scan("dws.activity"))
    users = out.column("user_id").to_pylist()
    assert "u2" not in users and "u9" in users
    assert out.filter(pa.compute.equal(out.column("user_id"), "u1")).column("events").to_pylist() == [100]
    lake_only = union_query(store, lake, "SELECT user_id FROM dws.activity$lake ORDER BY 1")
    assert lake_only.column("user_id").to_pylist() == [f"u{i}" for i in range(6)]
    kinds = union_query(
        store, lake, "SELECT __change, count(*) n FROM dws.activity$changelog GROUP BY 1 ORDER BY 1"
    )
    assert dict(zip(kinds.column(0).to_pylist(), kinds.column(1).to_pylist())) == {
        "+I": 7,
        "+U": 1,
        "-D": 1,
        "-U": 1,
    }


def test_join_and_string_literals_are_untouched(filled):
    store, lake = filled
    sql = (
        "SELECT 'ods.clicks' AS label, count(*) AS n FROM ods.clicks c "
        "JOIN dws.activity a USING (user_id) -- ods.nothing\n WHERE a.user_id <> 'dws.activity'"
    )
    refs = referenced_tables(sql, {"ods.clicks", "dws.activity", "ods.nothing"})
    assert sorted(r.table for r in refs) == ["dws.activity", "ods.clicks"]
    out = union_query(store, lake, sql).to_pylist()
    hot = store.scan("ods.clicks").to_pylist()
    live = {r["user_id"] for r in store.scan("dws.activity").to_pylist()}
    assert out == [{"label": "ods.clicks", "n": sum(1 for r in hot if r["user_id"] in live)}]


def test_table_names_match_in_any_case_as_duckdb_matches_identifiers(filled):
    """DuckDB resolves ``ODS.Clicks`` and ``"ODS"."CLICKS$LAKE"`` to ``ods.clicks``; so does the union."""
    store, lake = filled
    sql = 'SELECT (SELECT count(*) FROM ODS.Clicks) AS hot, (SELECT count(*) FROM "ODS"."CLICKS$LAKE") lake'
    assert [(r.table, r.view) for r in referenced_tables(sql, {"ods.clicks"})] == [
        ("ods.clicks", ""),
        ("ods.clicks", "lake"),
    ]
    plain = "SELECT (SELECT count(*) FROM ods.clicks) AS hot, (SELECT count(*) FROM ods.clicks$lake) AS lake"
    assert union_query(store, lake, sql).to_pylist() == union_query(store, lake, plain).to_pylist()


def test_only_the_last_statement_may_return_rows():
    from runtime.lake.union import check_statements

    check_statements("SELECT 1")
    check_statements("SET threads = 1; CREATE TABLE t AS SELECT 1; SELECT * FROM t;")
    check_statements("COPY (SELECT 1) TO 'one.csv'")  # an export
    check_statements("PIVOT t ON a USING count(*)")  # rows, from several statements in one
    check_statements("ATTACH 'kept.db' AS k; CREATE TABLE k.t AS SELECT 1")  # a database file keeps it
    for sql, text in [
        ("SELECT 1; SELECT 2", "statement 1 of 2 (SELECT 1) returns rows"),
        ("SET threads = 1;\n EXPLAIN SELECT 1; SELECT 2", "statement 2 of 3 (EXPLAIN SELECT 1) returns rows"),
        # DuckDB before 2.0 (Python 3.10's) gives this statement's text as "SELECT * FROM pragma_version()"
        ("PRAGMA version; SELECT 2", "statement 1 of 2 ("),
        ("PRAGMA version; SELECT 2", ") returns rows"),
        ("CALL pragma_version(); SELECT 2", "(CALL pragma_version()) returns rows"),
        (
            f"SELECT {'1 + ' * 30}1; SELECT 2",
            "(SELECT 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 ...)",
        ),
        ("", "the query is empty"),
        (" ;; -- nothing", "the query is empty"),
        ("SELEC 1", 'syntax error at or near "SELEC"'),
        # the query's database is in memory: a last statement without rows did nothing that lasts
        ("DROP VIEW ods.events", "the last statement (DROP VIEW ods.events) returns no rows, and what it"),
        ("CREATE TABLE t AS SELECT 1", "(CREATE TABLE t AS SELECT 1) returns no rows"),
        ("SET threads = 1; ATTACH 'x.db'", "(ATTACH 'x.db') returns no rows"),
        ("SET threads = 1", "(SET threads = 1) returns no rows"),
    ]:
        with pytest.raises(TidehouseError, match=re.escape(text)) as err:
            check_statements(sql)
        assert err.value.code == ErrorCode.QUERY_INVALID, sql


def test_unknown_table_is_a_user_error(filled):
    store, lake = filled
    with pytest.raises(TidehouseError) as err:
        union_query(store, lake, "SELECT * FROM ods.nope")
    assert err.value.code == ErrorCode.QUERY_INVALID
    # DuckDB said 'Table with name "ods.nope" does not exist because schema "ods" does not exist'
    assert err.value.message.startswith("no table ods.nope in this project (its tables: "), err.value.message


def test_an_unknown_table_is_named_with_the_projects_close_ones():
    tables = {"ods.events", "dwd.events", "dws.users", "ods.events__quarantine", "ads.top__state"}
    missing = 'Catalog Error: Table with name "{}" does not exist because schema "{}" does not exist.'
    assert unknown_table(missing.format("dwd.evnt", "dwd"), tables) == (
        "no table dwd.evnt in this project (did you mean dwd.events or ods.events?)"
    )
    assert unknown_table(missing.format("dwd.evnt$lake", "dwd"), tables) == (
        "no table dwd.evnt in this project (did you mean dwd.events$lake or ods.events$lake?)"
    )
    assert unknown_table(missing.format("ods.events$bogus", "ods"), tables) == (
        "no view $bogus of a table: write ods.events$lake or ods.events$changelog"
    )
    assert unknown_table("Catalog Error: Table with name users does not exist!", tables) == (
        "no table users in this project (did you mean dws.users?)"
    )
    assert unknown_table(missing.format("x.zzz", "x"), tables) == (
        "no table x.zzz in this project (its tables: dwd.events, dws.users, ods.events, "
        "ods.events__quarantine)"
    )  # a query's private state table is not named
    assert unknown_table('Binder Error: Referenced column "x" not found', tables) is None
    # a table a registered flow declares, which that flow has not made yet; the declared ones are named too
    declared = {"dwd.events": "shop", "ads.funnel": "shop"}
    assert unknown_table(missing.format("ads.funnel$lake", "ads"), tables, lambda: declared) == (
        "table ads.funnel of flow shop holds no rows yet: the flow has not run (tidehouse flow trigger shop)"
    )
    assert unknown_table(missing.format("ads.funel", "ads"), tables, lambda: declared) == (
        "no table ads.funel in this project (did you mean ads.funnel?)"
    )


def test_never_tiered_table_reads_hot(store, lake):
    store.create_table(TableMeta("ods.clicks", CLICKS))
    store.write("ods.clicks", clicks(4), writer="w", seq=0)
    assert union_query(store, lake, "SELECT count(*) n FROM ods.clicks").to_pylist() == [{"n": 4}]


def test_changelog_after_retention_starts_at_the_earliest_kept_offset(tmp_path, lake):
    """``$changelog`` reads every row the hot log still holds: rows tiered but not yet trimmed included."""
    import time

    from runtime.storage import open_store

    store = open_store(str(tmp_path / "hot"), fsync=False, segment_bytes=2048)
    store.create_table(TableMeta("ods.clicks", CLICKS))
    for i in range(20):
        store.write("ods.clicks", clicks(10, start=10 * i), writer="w", seq=i)
    tier_table(store, lake, "ods.clicks", maintain=False)
    end = store.end_offsets("ods.clicks")[0]
    assert store.delete_before("ods.clicks", 0, end, older_than=time.time() + 3600) >= 1
    first = store.start_offsets("ods.clicks")[0]
    assert 0 < first < end  # the active segment stays: it holds tiered rows that are still hot
    log = union_query(store, lake, 'SELECT min("__offset") AS lo, count(*) AS c FROM ods."clicks$changelog"')
    assert log.to_pylist() == [{"lo": first, "c": end - first}]
    store.close()
