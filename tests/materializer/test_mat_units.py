"""Fast pieces of the strategies and status, on the real hot store (no Spark)."""

from __future__ import annotations

import time

import pyarrow as pa

from materializer.plan import Param
from materializer.rows import keys_table, quarantine_rows
from materializer.status import caught_up, hot_figures, table_figures
from materializer.strategies import _last_images
from materializer.tables import quarantine_meta
from runtime.storage import open_store
from runtime.storage.api import TableMeta


def test_last_images_keep_the_last_upsert_per_key():
    data = pa.table(
        {
            "k": ["a", "a", "a", "b", "b", "c"],
            "v": [1, 1, 2, 5, 5, 7],
            "__change": ["+I", "-U", "+U", "+I", "-D", "+I"],
        }
    )
    last = _last_images(data, ("k",))
    assert last.to_pydict() == {"k": ["a", "c"], "v": [2, 7], "__change": ["+U", "+I"]}


def test_keys_table_deletes_carry_only_keys():
    schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
    rows = pa.table({"k": ["a"], "v": [3]})
    deletes = keys_table(schema, rows, ("k",), "-D")
    assert deletes.to_pydict() == {"k": ["a"], "v": [None], "__change": ["-D"]}
    upserts = keys_table(schema, rows, ("k",), "+U")
    assert upserts.to_pydict() == {"k": ["a"], "v": [3], "__change": ["+U"]}


def test_quarantine_rows_shape():
    rows = quarantine_rows(["{bad", "x"], "malformed", "clicks")
    assert rows.column_names == ["raw", "reason", "source", "quarantined_at", "file"]
    assert rows.schema.names == quarantine_meta("ods.clicks__quarantine").schema.names
    assert rows.column("reason").to_pylist() == ["malformed", "malformed"]
    assert rows.column("file").to_pylist() == [None, None]  # no file named: an expectation's violators
    assert rows.num_rows == 2


def test_quarantine_rows_name_a_local_file_by_its_path_and_keep_other_uris():
    files = ["file:/data/in/a%20b.json", "file:///data/in/c.json", "s3a://bucket/in/d.json", None]
    rows = quarantine_rows(["x"] * 4, "malformed", "clicks", pa.chunked_array([files]))
    assert rows.column("file").to_pylist() == [
        "/data/in/a b.json",
        "/data/in/c.json",
        "s3a://bucket/in/d.json",
        None,
    ]


def test_hot_delay_is_commit_minus_origin(tmp_path):
    store = open_store(str(tmp_path / "hot"))
    try:
        store.create_table(TableMeta("dwd.x", pa.schema([("a", pa.int64())])))
        store.create_table(TableMeta("dwd.x__quarantine", pa.schema([("raw", pa.string())])))
        assert hot_figures(store, "dwd.nope")["hot_end_offsets"] is None
        assert table_figures(store, None, "dwd.nope", None)["quarantined"] is None  # never made: "-"
        assert table_figures(store, None, "dwd.x", None)["quarantined"] == 0  # made, and nothing quarantined
        origin = time.time() - 5.0
        store.write("dwd.x", pa.table({"a": [1, 2, 3]}), writer="w", seq=0, origin_ts=origin)
        store.write("dwd.x__quarantine", pa.table({"raw": ["?"]}), writer="w", seq=0)
        figures = table_figures(store, None, "dwd.x", "dwd.x__quarantine")
        assert figures["hot_end_offsets"] == [3]
        assert 4.9 <= figures["hot_delay_s"] <= 30
        assert figures["quarantined"] == 1
    finally:
        store.close()


def test_a_batch_that_wrote_nothing_after_the_last_commit_gives_the_hot_delay():
    def row(**last) -> dict:
        figures = {"hot_delay_s": 120.0, "last_commit_at": 1000.0}
        figures.update({f"last_batch_{k}": v for k, v in last.items()})
        caught_up(figures)
        return figures

    assert row(time=1010.0, origin=1007.5, rows_written=0)["hot_delay_s"] == 2.5
    assert row(time=1010.0, origin=1007.5, rows_written=3)["hot_delay_s"] == 120.0  # its commit says it
    assert row(time=990.0, origin=980.0, rows_written=0)["hot_delay_s"] == 120.0  # older than the commit
    assert row(time=1010.0, origin=None, rows_written=0)["hot_delay_s"] == 120.0  # a source: no origin
    assert row()["hot_delay_s"] == 120.0  # no batch in this run
    nothing_yet = {"hot_delay_s": None, "last_commit_at": None}  # never committed: the batch gives it
    nothing_yet.update(last_batch_time=5.0, last_batch_origin=4.0, last_batch_rows_written=0)
    caught_up(nothing_yet)
    assert nothing_yet["hot_delay_s"] == 1.0


def test_params_are_plain_data():
    p = Param("valid", "array<string>", ["a", "b"])
    assert p.value == ["a", "b"] and p.type == "array<string>"
