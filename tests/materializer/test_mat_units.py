"""Fast pieces of the strategies and status, on the real hot store (no Spark)."""

from __future__ import annotations

import time

import pyarrow as pa

from materializer.plan import Param
from materializer.rows import keys_table, quarantine_rows
from materializer.status import caught_up, downstream_caught_up, hot_figures, input_offsets, table_figures
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


def test_a_table_holding_all_its_input_is_as_fresh_as_its_input_when_that_ran_after_its_last_commit():
    """dwd's newest batch (at 1010) wrote nothing: dws, which read every row dwd holds, got no batch since its
    commit at 1000 (delay 120 s): it is as fresh as dwd (2.5 s), and ads, downstream of dws, too."""

    def rows(dws_read: list[int], ads_read: list[int] | None = None) -> list[dict]:
        out = [
            {"table": "dwd.a", "hot_end_offsets": [40], "hot_delay_s": 2.5, "last_commit_at": 990.0},
            {"table": "dws.b", "hot_end_offsets": [7, 3], "hot_delay_s": 120.0, "last_commit_at": 1000.0},
            {"table": "ads.c", "hot_end_offsets": [9], "hot_delay_s": 130.0, "last_commit_at": 1001.0},
        ]
        out[0].update(last_batch_time=1010.0, last_batch_origin=1007.5, last_batch_rows_written=0)
        out[1]["input_offsets"] = {"dwd.a": dws_read}
        out[2]["input_offsets"] = {"dws.b": ads_read or [7, 3]}
        downstream_caught_up(out)
        return out

    assert [r["hot_delay_s"] for r in rows([40])] == [2.5, 2.5, 2.5]
    assert [r["hot_delay_s"] for r in rows([39])] == [2.5, 120.0, 130.0]  # a row of dwd it has not read
    assert [r["hot_delay_s"] for r in rows([40], [7, 2])] == [2.5, 2.5, 130.0]
    quiet = rows([40])
    quiet[0]["last_batch_time"] = 995.0  # dwd ran before dws's commit: dws's own commit says its delay
    quiet[1]["hot_delay_s"] = 120.0
    downstream_caught_up(quiet)
    assert quiet[1]["hot_delay_s"] == 120.0
    ran_since = rows([40])
    ran_since[1].update(hot_delay_s=120.0, last_batch_time=1012.0)  # its own batch came after dwd's
    downstream_caught_up(ran_since)
    assert ran_since[1]["hot_delay_s"] == 120.0
    unknown = rows([40])
    unknown[1].update(hot_delay_s=120.0, input_offsets=None)  # the checkpoint did not say
    downstream_caught_up(unknown)
    assert unknown[1]["hot_delay_s"] == 120.0


def test_input_offsets_come_from_the_newest_committed_batch(tmp_path):
    checkpoint = tmp_path / "cp"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    for batch, ends in ((0, '{"0": 3, "1": 4}'), (1, '{"0": 5, "1": 9}'), (2, '{"0": 8, "1": 9}')):
        entry = f'v1\n{{"batchWatermarkMs":0}}\n{{"table": "dwd.a", "offsets": {ends}}}\n'
        (checkpoint / "offsets" / str(batch)).write_text(entry)
    for batch in (0, 1):  # batch 2 runs: not committed
        (checkpoint / "commits" / str(batch)).write_text("v1\n{}\n")
    assert input_offsets(str(checkpoint)) == {"dwd.a": [5, 9]}
    assert input_offsets(str(tmp_path / "none")) is None
    assert input_offsets("s3a://bucket/cp") is None  # not a local folder: the table's own commit says
    assert input_offsets(None) is None


def test_params_are_plain_data():
    p = Param("valid", "array<string>", ["a", "b"])
    assert p.value == ["a", "b"] and p.type == "array<string>"
