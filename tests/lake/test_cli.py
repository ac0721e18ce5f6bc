"""`tidehouse tier run`, `tier schedule` and `query` through the real CLI, on a project on disk."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog import load_catalog

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.project import Project
from runtime.storage.api import TableMeta
from tests.lake._lakekit import CLICKS, clicks


def _seed_hot(rows: int = 20) -> None:
    project = Project.open()
    project.store.create_table(TableMeta("ods.clicks", CLICKS, buckets=2, bucket_key=("user_id",)))
    project.store.write("ods.clicks", clicks(rows), writer="test", seq=0)
    project.close()


def test_tier_run_then_query(run_cli, home):
    _seed_hot(20)
    code, out, err = run_cli("tier", "run")
    assert code == 0, err
    assert "ods.clicks" in out and "committed" in out
    code, out, _ = run_cli("tier", "run", "--table", "ods.clicks", "--format", "json")
    assert code == 0
    assert json.loads(out)["tables"]["ods.clicks"]["committed"] is False
    # the lake is a plain Iceberg table for any engine with the printed catalog settings
    config = Project.open().config
    table = load_catalog(config.get("lake.catalog_name"), **config.lake_catalog_properties).load_table(
        "ods.clicks"
    )
    assert table.scan().to_arrow().num_rows == 20
    code, out, err = run_cli(
        "query", "SELECT count(*) AS n, max(item) AS top FROM ods.clicks", "--format", "json"
    )
    assert code == 0, err
    assert json.loads(out) == [{"n": 20, "top": 19}]
    code, out, _ = run_cli(
        "query", "SELECT user_id, count(*) n FROM ods.clicks GROUP BY 1 ORDER BY 1", "--format", "csv"
    )
    assert out.splitlines()[0] == "user_id,n" and len(out.splitlines()) == 8
    code, out, _ = run_cli("query", "SELECT item FROM ods.clicks ORDER BY item LIMIT 2")
    assert code == 0 and "(2 rows)" in out


def test_query_json_is_strict_json(run_cli, home):
    """What JSON has no literal for is written as Spark's to_json writes it: NaN and infinities as strings
    (Python's NaN, which jq refuses, was printed), binary as base64."""
    _seed_hot(1)

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    sql = (
        "SELECT count(*) AS n, 'nan'::DOUBLE AS nan, ['inf'::DOUBLE, 1.5] AS floats, "
        "{'low': '-inf'::DOUBLE} AS nested, 'ab'::BLOB AS raw, 1.50::DECIMAL(4, 2) AS exact FROM ods.clicks"
    )
    code, out, err = run_cli("query", sql, "--format", "json")
    assert code == 0, err
    assert json.loads(out, parse_constant=refuse) == [
        {
            "n": 1,
            "nan": "NaN",
            "floats": ["Infinity", 1.5],
            "nested": {"low": "-Infinity"},
            "raw": "YWI=",
            "exact": "1.50",
        }
    ]
    # CSV writes each cell as JSON does: Python's b'ab', ['inf', 1.5] and {'low': ...} were printed
    code, out, err = run_cli("query", sql, "--format", "csv")
    assert code == 0, err
    header, row = list(csv.reader(io.StringIO(out)))
    assert dict(zip(header, row)) == {
        "n": "1",
        "nan": "NaN",
        "floats": '["Infinity", 1.5]',
        "nested": '{"low": "-Infinity"}',
        "raw": "YWI=",
        "exact": "1.50",
    }


def test_query_prints_intervals_as_duckdb_writes_them(run_cli, home):
    """An interval (``max(ts) - min(ts)``) printed as MonthDayNano(months=0, days=1, nanoseconds=0) in a
    table, and as the list [0, 1, 0] in JSON and CSV."""
    _seed_hot(1)
    sql = (
        "SELECT INTERVAL 1 DAY AS d, to_microseconds(5400500000) AS t, -INTERVAL 14 MONTH AS m, "
        "[INTERVAL 1 HOUR] AS l FROM ods.clicks"
    )
    texts = ["1 day", "01:30:00.5", "-1 year -2 months"]
    code, out, err = run_cli("query", sql)
    assert code == 0 and out.splitlines()[2].split("  ") == [*texts, "['01:00:00']"], err
    code, out, err = run_cli("query", sql, "--format", "json")
    assert code == 0 and json.loads(out) == [dict(zip("dtm", texts)) | {"l": ["01:00:00"]}], err
    code, out, err = run_cli("query", sql, "--format", "csv")
    assert code == 0 and out.splitlines()[1] == ",".join(texts) + ',"[""01:00:00""]"', err


def test_interval_text_is_duckdbs():
    import duckdb
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from runtime.core.text import interval_text

    @settings(max_examples=200, deadline=None)
    @given(
        st.integers(-(10**5), 10**5),
        st.integers(-(10**5), 10**5),
        st.integers(-(10**17), 10**17) | st.integers(-(10**7), 10**7),
    )
    def check(months, days, micros):
        sql = f"SELECT (to_months({months}) + to_days({days}) + to_microseconds({micros}))::VARCHAR"
        assert interval_text(months, days, micros * 1000) == duckdb.sql(sql).fetchall()[0][0]

    check()


def test_query_errors_exit_2(run_cli, home):
    _seed_hot(1)
    code, _, err = run_cli("query", "SELECT * FROM ods.missing")
    assert code == 2 and "TH510" in err
    code, _, err = run_cli("tier", "run", "--table", "ods.missing")
    assert code == 2 and "TH300" in err
    # an empty query (an unset variable: `tidehouse query "$SQL"`) printed "(0 rows)" with exit 0
    for empty in ("", "  -- a comment\n"):
        code, out, err = run_cli("query", empty)
        assert (code, out) == (
            2,
            "",
        ) and err == "error: the query is empty (give one SQL statement) [TH510]\n"
    # a first SELECT's rows were computed and never printed
    code, out, err = run_cli("query", "SELECT count(*) FROM ods.clicks; SELECT 2 AS b")
    assert (code, out) == (2, "") and "statement 1 of 2 (SELECT count(*) FROM ods.clicks) returns rows" in err
    code, out, err = run_cli(
        "query", "SET TimeZone = 'UTC'; SELECT count(*) AS n FROM ods.clicks", "--format", "json"
    )
    assert code == 0 and json.loads(out) == [{"n": 1}], err


def test_a_querys_private_state_table_is_never_tiered_nor_queried(run_cli, home):
    """``<table>__state`` (an incremental strategy's state) is private to the table's query: tier run
    skips it, names it unknown when asked for it, and a query cannot read it."""
    _seed_hot(3)
    project = Project.open()
    state = TableMeta(
        "ads.top__state",
        pa.schema([("key", pa.string()), ("value", pa.binary())]),
        kind="primary_key",
        primary_key=("key",),
        buckets=1,
    )
    project.store.create_table(state)
    project.store.write("ads.top__state", pa.table({"key": ["k"], "value": [b"v"]}), writer="q", seq=0)
    assert project.tier_tables() == {"ods.clicks": project.config.get("tiering.interval")}
    project.close()
    code, out, err = run_cli("tier", "run", "--format", "json")
    assert code == 0, err
    assert set(json.loads(out)["tables"]) == {"ods.clicks"}
    code, _, err = run_cli("tier", "run", "--table", "ads.top__state")
    assert code == 2 and "TH300" in err
    code, _, err = run_cli("query", "SELECT * FROM ads.top__state")
    assert code == 2 and "TH510" in err


def test_tier_schedule_runs_for_a_duration(run_cli, home):
    _seed_hot(5)
    code, out, err = run_cli("tier", "schedule", "--duration", "1.5")
    assert code == 0, err
    assert out.startswith("tiering 1 table: ods.clicks every 30s\n"), out
    assert "ods.clicks: 5 rows" in out and "1 commits/0 errors" in out


def test_tier_schedule_tiers_a_table_made_while_it_runs(run_cli, home, monkeypatch):
    """The service tiered the tables there were when it started, and never one made later (a flow's first run,
    a flow's new table) while it ran, without a word; with none yet it refused to start."""
    import threading

    import runtime.cli.tier_commands as tier_commands

    monkeypatch.setattr(tier_commands, "LOOK_FOR_TABLES_S", 0.2)
    real, calls = Project.tier_tables, []

    def tier_tables(self, *args, **kwargs):  # the first look for new tables meets a registry restarting
        calls.append(1)
        if len(calls) == 2:
            raise TidehouseError(ErrorCode.REGISTRY_UNAVAILABLE, "the registry database cannot be reached")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Project, "tier_tables", tier_tables)

    def make_another() -> None:
        project = Project.open()
        try:
            project.store.create_table(TableMeta("ods.later", CLICKS))
            project.store.write("ods.later", clicks(3), writer="test", seq=0)
        finally:
            project.close()

    later = threading.Timer(0.5, make_another)
    later.start()
    try:
        code, out, err = run_cli("tier", "schedule", "--duration", "2.5")
    finally:
        later.join()
    assert code == 0, err
    assert out.startswith("no hot tables yet: each is tiered once it is made (looking every 0.2s)\n"), out
    assert err.startswith("looking for new tables failed (tiering goes on): the registry database "), err
    assert "tiering ods.later every 30s (a new table)" in out, out
    assert "ods.later: 3 rows" in out and "ods.later 1 commits/0 errors" in out, out
    project = Project.open()
    try:
        assert project.lake.load("ods.later").scan().to_arrow().num_rows == 3
    finally:
        project.close()


def test_tier_schedule_follows_a_flow_registered_again_with_another_interval(
    run_cli, project_dir, monkeypatch
):
    """The service kept the interval a table had when it started: a flow registered again with a shorter
    interval was still tiered at the old one, without a word, until the service was restarted."""
    import shutil
    import threading

    import runtime.cli.tier_commands as tier_commands

    monkeypatch.setattr(tier_commands, "LOOK_FOR_TABLES_S", 0.2)
    repo = Path(__file__).resolve().parents[2]
    shutil.copytree(repo / "actions", project_dir / "actions", dirs_exist_ok=True)
    flow_file = project_dir / "flows" / "ecommerce_activity.yaml"
    shutil.copy(repo / "flows" / "ecommerce_activity.yaml", flow_file)
    project = Project.open()
    project.registry.register_actions([project_dir / "actions"])
    project.registry.register_flow(flow_file)
    project.store.create_table(TableMeta("ods.events", CLICKS))
    project.store.write("ods.events", clicks(4), writer="test", seq=0)
    project.close()

    def register_a_shorter_interval() -> None:
        text = flow_file.read_text()
        assert "tiering: {interval: 30s}" in text
        flow_file.write_text(text.replace("tiering: {interval: 30s}", "tiering: {interval: 1s}", 1))
        again = Project.open()
        try:
            again.registry.register_flow(flow_file)
            again.store.write("ods.events", clicks(3), writer="test", seq=1)  # for the next cycle to commit
        finally:
            again.close()

    later = threading.Timer(0.5, register_a_shorter_interval)
    later.start()
    try:
        code, out, err = run_cli("tier", "schedule", "--flow", "ecommerce_activity", "--duration", "3.5")
    finally:
        later.join()
    assert code == 0, err
    assert out.startswith("tiering 1 table: ods.events every 30s\n"), out
    assert "tiering ods.events every 1s (its flow's new interval; it was 30s)" in out, out
    assert "ods.events 2 commits/0 errors" in out, out  # the first cycle, then one at the new interval
    project = Project.open()
    try:
        assert project.lake.load("ods.events").scan().to_arrow().num_rows == 7
    finally:
        project.close()


def test_tier_run_for_a_registered_flow_uses_its_tables_and_intervals(run_cli, project_dir):
    import shutil

    repo = Path(__file__).resolve().parents[2]
    shutil.copytree(repo / "actions", project_dir / "actions", dirs_exist_ok=True)
    shutil.copy(repo / "flows" / "ecommerce_activity.yaml", project_dir / "flows")
    (project_dir / "tidehouse.yaml").write_text("tiering:\n  interval: 7s\n")
    project = Project.open()
    project.registry.register_actions([project_dir / "actions"])
    project.registry.register_flow(project_dir / "flows" / "ecommerce_activity.yaml")
    project.store.create_table(TableMeta("ods.events", CLICKS))
    project.store.write("ods.events", clicks(4), writer="test", seq=0)
    project.store.create_table(TableMeta("ods.unrelated", CLICKS))
    project.store.create_table(
        TableMeta(
            "ads.top_users",
            pa.schema([("rank", pa.int32()), ("user_id", pa.string())]),
            kind="primary_key",
            primary_key=("rank",),
        )
    )
    # only the flow's tables that exist in the hot storage, each with its own interval
    assert project.tier_tables("ecommerce_activity") == {"ods.events": 30.0, "ads.top_users": 10.0}
    # without --flow: every hot table, at the interval its flow declares, else tiering.interval
    assert project.tier_tables() == {"ods.events": 30.0, "ads.top_users": 10.0, "ods.unrelated": 7.0}
    project.close()
    code, out, err = run_cli("tier", "schedule", "--duration", "0.5")
    assert code == 0, err
    assert out.splitlines()[0] == (
        "tiering 3 tables: ads.top_users every 10s, ods.events every 30s, ods.unrelated every 7s"
    ), out
    code, out, err = run_cli("tier", "run", "--flow", "ecommerce_activity")
    assert code == 0, err
    assert "ods.events" in out and "ads.top_users" in out and "ods.unrelated" not in out
    code, _, err = run_cli("tier", "run", "--flow", "ecommerce_activity", "--table", "ods.unrelated")
    assert code == 2 and "TH300" in err
    code, _, err = run_cli("tier", "run", "--flow", "no_such_flow")
    assert code == 2


def test_a_table_of_a_flow_that_has_not_run_is_named_so(run_cli, project_dir):
    """A registered flow's table before its first trigger was "no table dwd.events in this project"."""
    import shutil

    repo = Path(__file__).resolve().parents[2]
    shutil.copytree(repo / "actions", project_dir / "actions", dirs_exist_ok=True)
    shutil.copy(repo / "flows" / "ecommerce_activity.yaml", project_dir / "flows")
    code, _, err = run_cli("flow", "register", "flows/ecommerce_activity.yaml", "--quick")
    assert code == 0, err
    code, out, err = run_cli("query", "SELECT count(*) FROM dwd.events$lake")
    assert (code, out) == (2, "") and err.startswith(
        "error: table dwd.events of flow ecommerce_activity holds no rows yet: the flow has not run "
        "(tidehouse flow trigger ecommerce_activity)"
    ), err
    code, _, err = run_cli("query", "SELECT * FROM dws.user_activty")  # the flow's tables are named too
    assert code == 2 and "no table dws.user_activty in this project (did you mean dws.user_activity?)" in err


def test_query_prints_bits_maps_and_columns_named_alike_as_they_are(run_cli, home):
    """BIT values were printed as DuckDB's internal bytes (b'\\x05\\xfd' for 101), a map as a list of pairs,
    and of two columns named alike the second's value in both (rows were dicts by name)."""
    _seed_hot(1)
    sql = (
        "SELECT '101'::BIT AS b, ['1'::BIT] AS bl, MAP {'x': 1, 'y': 2} AS m, [MAP {3: 'z'}] AS ml, "
        "1 AS n, 2 AS n FROM ods.clicks"
    )
    code, out, err = run_cli("query", sql)
    assert code == 0, err
    assert out.splitlines()[2].split("  ") == ["101", "['1']", "{'x': 1, 'y': 2}", "[{3: 'z'}]", "1", "2"]
    code, out, err = run_cli("query", sql, "--format", "csv")
    assert code == 0, err
    assert list(csv.reader(io.StringIO(out)))[1] == [
        "101",
        '["1"]',
        '{"x": 1, "y": 2}',
        '[{"3": "z"}]',
        "1",
        "2",
    ]
    code, out, err = run_cli("query", sql.replace("2 AS n", "2 AS k"), "--format", "json")
    assert code == 0 and json.loads(out) == [
        {"b": "101", "bl": ["1"], "m": {"x": 1, "y": 2}, "ml": [{"3": "z"}], "n": 1, "k": 2}
    ], err
    code, out, err = run_cli("query", sql, "--format", "json")  # an object cannot have two keys n
    assert code == 2 and "2 columns named n" in err and "[TH510]" in err, err
