"""The executor path's write tasks report to the driver (materializer.routing): counts, and the rows to
quarantine as one Arrow stream per kind, which the driver writes under the same writers as the driver path
— no Spark here: a task runs on a real local store, its report goes through :func:`record` as the rows
``collect()`` returns."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Row

from materializer.routing import SourceCheck, WriteTask, quarantined, record, results
from materializer.rows import CORRUPT
from runtime.spark.options import Place
from runtime.storage import TableMeta

SCHEMA = pa.schema([("user_id", pa.int64()), ("amount", pa.float64())])


def _collected(batches) -> list:
    """A report as Spark's ``collect()`` gives it to the driver."""
    return [Row(**row) for batch in batches for row in batch.to_pylist()]


def _ctx(store):
    stats = SimpleNamespace(lock=threading.Lock(), quarantined=0, expectations={}, dropped=0)
    table = SimpleNamespace(name="ods.events", quarantine="ods.events__quarantine", writer_id="q1")
    return SimpleNamespace(store=store, table=table, stats=stats)


def _records(n: int) -> pa.Table:
    """``n`` source records: every 7th malformed (its text in the corrupt-record column), every 5th of the
    others without its required ``user_id``."""
    users = [None if i % 5 == 0 and i % 7 else i for i in range(n)]
    corrupt = [f'{{"user_id": {i}, "amount": "x{i}"' if i % 7 == 0 else None for i in range(n)]
    return pa.table(
        {
            "user_id": pa.array([None if c else u for u, c in zip(users, corrupt)], pa.int64()),
            "amount": pa.array([float(i) for i in range(n)]),
            CORRUPT: pa.array(corrupt, pa.string()),
        }
    )


def test_a_write_tasks_report_carries_its_quarantine_and_the_driver_writes_it(tmp_path):
    place = Place(str(tmp_path / "hot"), fsync=False)
    store = place.store()
    store.create_table(TableMeta("ods.events", SCHEMA))
    check = SourceCheck("events", "json", ("user_id",))
    task = WriteTask(place, "ods.events", "q1", 3, None, (), (), check)
    data = _records(1000)
    report = _collected(task(iter(data.to_batches(max_chunksize=300))))

    malformed = sum(1 for i in range(1000) if i % 7 == 0)
    lacking = sum(1 for i in range(1000) if i % 5 == 0 and i % 7)
    assert sorted((r.kind, r.n) for r in report if r.kind.startswith("source:")) == [
        ("source:q", malformed),
        ("source:qn", lacking),
    ]  # one row each, however many records
    assert [r.kind for r in report].count("received") == 1 and len(report) == 4

    writes = []

    class Recording:
        def write(self, name, rows, *, writer, seq):
            writes.append((name, rows, writer, seq))
            return SimpleNamespace(rows=rows.num_rows)

    ctx = _ctx(Recording())
    routed = record(ctx, report, 3, None, check)
    assert (routed.received, routed.written) == (1000, 1000 - malformed - lacking)
    assert sum(store.end_offsets("ods.events")) == routed.written
    by_writer = {w: (name, rows, seq) for name, rows, w, seq in writes}
    assert set(by_writer) == {"q1:q", "q1:qn"}
    name, bad, seq = by_writer["q1:q"]
    assert name == "ods.events__quarantine" and seq == 3
    assert bad.column("raw").to_pylist() == [f'{{"user_id": {i}, "amount": "x{i}"' for i in range(0, 1000, 7)]
    assert set(bad.column("source").to_pylist()) == {"events"}
    assert pc.all(pc.starts_with(bad.column("reason"), "malformed json record")).as_py()
    lacked = by_writer["q1:qn"][1]
    assert lacked.num_rows == lacking and all("user_id" in r for r in lacked.column("reason").to_pylist())
    assert ctx.stats.quarantined == malformed + lacking


def test_violators_in_a_report_are_counted_and_those_to_quarantine_written():
    entries = [{"kind": "received", "n": 4}, {"kind": "written", "bucket": 0, "n": 2}]
    entries.append({"kind": "violation", "name": "positive", "n": 2})
    violators = quarantined("violator", ['{"a": -1}', '{"a": -2}'], ["positive", "positive"], [True, False])
    entries.append(violators)
    report = _collected(results(entries))
    writes = []

    class Recording:
        def write(self, name, rows, *, writer, seq):
            writes.append((name, rows.column("raw").to_pylist(), writer, seq))
            return SimpleNamespace(rows=rows.num_rows)

    ctx = _ctx(Recording())
    routed = record(ctx, report, 9, None)
    assert (routed.received, routed.written) == (4, 2)
    assert writes == [("ods.events__quarantine", ['{"a": -1}'], "q1:qe", 9)]
    assert ctx.stats.expectations == {"positive": 2} and ctx.stats.dropped == 1


def test_a_report_without_rows_to_quarantine_writes_none():
    report = _collected(results([{"kind": "received", "n": 0}]))
    writes = []
    ctx = _ctx(SimpleNamespace(write=lambda *a, **k: writes.append(a)))
    assert record(ctx, report, 1, None, SourceCheck("events", "json", ())).written == 0
    assert writes == []
