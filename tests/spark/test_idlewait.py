"""A stream source with nothing new waits for rows inside ``latestOffset`` (runtime.spark.idlewait): it
answers as soon as rows arrive, after its wait, or at once while its awake file exists. No Spark."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
from pyspark.sql.streaming.datasource import ReadAllAvailable

from runtime.spark.datasource import StreamReader, output_schema
from runtime.spark.idlewait import wait_for_rows
from runtime.spark.options import SourceOptions
from runtime.spark.types import arrow_to_spark
from runtime.storage.api import TableMeta


def test_the_wait_ends_when_rows_arrive_when_it_is_over_or_when_the_driver_is_awake(tmp_path):
    polls = []
    began = time.monotonic()
    assert wait_for_rows(lambda: polls.append(1) or len(polls) == 3, wait_s=30, poll_s=0.01)
    assert len(polls) == 3 and time.monotonic() - began < 10
    polls.clear()
    began = time.monotonic()
    assert not wait_for_rows(lambda: polls.append(1) or False, wait_s=0.2, poll_s=0.05)
    assert time.monotonic() - began >= 0.2 and len(polls) >= 2  # over: it polled meanwhile
    awake = tmp_path / "dwd.events"
    awake.touch()
    began = time.monotonic()
    assert not wait_for_rows(lambda: False, wait_s=30, poll_s=0.01, awake=str(awake))
    assert time.monotonic() - began < 10  # the file exists: no wait at all


def _reader(root, **options) -> tuple[StreamReader, object]:
    opts = SourceOptions.parse({"root": str(root), "table": "dwd.events", "fsync": "false", **options})
    store = opts.store()
    meta = TableMeta("dwd.events", pa.schema([("u", pa.string())]))
    store.create_table(meta, exist_ok=True)
    return StreamReader(opts, arrow_to_spark(output_schema(meta, None, True))), store


def test_latest_offset_waits_for_rows_a_writer_commits_meanwhile(tmp_path):
    reader, store = _reader(tmp_path / "hot", idleWaitMs="30000", pollMs="20")
    store.write("dwd.events", pa.table({"u": ["a"]}), writer="w", seq=1)
    start = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())  # one row: no wait
    assert start["offsets"] == {"0": 1}
    later = threading.Timer(
        0.5, lambda: store.write("dwd.events", pa.table({"u": ["b", "c"]}), writer="w", seq=2)
    )
    began = time.monotonic()
    later.start()
    end = reader.latestOffset(start, ReadAllAvailable())
    waited = time.monotonic() - began
    assert end["offsets"] == {"0": 3} and 0.4 < waited < 20  # it answered with the rows, not after 30 s


def test_latest_offset_without_a_wait_or_while_awake_answers_at_once(tmp_path):
    awake = tmp_path / "awake"
    for options in ({}, {"idleWaitMs": "30000", "awakeFile": str(awake)}):
        awake.touch()
        reader, _ = _reader(tmp_path / "hot", **options)
        start = reader.initialOffset()
        began = time.monotonic()
        assert reader.latestOffset(start, ReadAllAvailable())["offsets"] == {"0": 0}
        assert time.monotonic() - began < 10
    reader, _ = _reader(tmp_path / "hot", idleWaitMs="300")
    began = time.monotonic()
    reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert time.monotonic() - began >= 0.3  # nothing new and nobody awake: it waited its 300 ms
