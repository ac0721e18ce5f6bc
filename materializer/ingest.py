"""The executor data path's JSON ingest: a pass-through table over a JSON source read and written by one
task, with the JSON Lines reader (docs/architecture.md, "Reading JSON sources on the driver path")."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from materializer.jsonlines import JsonLinesReader
from materializer.plan import SourcePlan
from materializer.routing import RESULT, Routed, SourceCheck, WriteTask, record, results
from materializer.strategies import QueryContext, count_reader
from runtime.spark.filelog import source_files
from runtime.storage.api import CHANGE, UPDATE_AFTER


@dataclass(frozen=True)
class ArrowIngest:
    """``mapInArrow`` over the one row of a batch's file list (a pass-through table over a JSON source): parse
    the files with the JSON Lines reader (:mod:`materializer.jsonlines`) and write them, in one task, so no
    row passes through a JVM. All files are parsed before anything is written: a file the reader refuses
    makes the task write nothing and report ``refused`` (Spark then reads the batch)."""

    source: SourcePlan
    write: WriteTask
    change: str | None  # a primary-key table's rows are upserts

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        files = [f for b in batches for f in b.column(0).to_pylist()]
        data, why = JsonLinesReader(self.source).read(files)
        if data is None:
            yield from results([{"kind": "refused", "reason": why, "n": 0}])
            return
        if self.change:
            data = data.append_column(CHANGE, pa.array([self.change] * data.num_rows, pa.string()))
        yield from self.write(iter(data.to_batches()))


def ingest_with_arrow(ctx: QueryContext, session, source: SourcePlan, batch_id: int) -> Routed | None:
    """A pass-through JSON source's batch parsed by Arrow and written in one task (:class:`ArrowIngest`); None
    when Spark reads it instead (the checkpoint does not list the files, or the task refused one)."""
    files = source_files(ctx.table.checkpoint, batch_id)
    if files is None:
        count_reader(ctx, "spark", batch_id, "the checkpoint does not list the batch's files")
        return None
    check = SourceCheck(source.name, source.format, tuple(source.required))
    table = ctx.table
    key = tuple(table.primary_key)
    task = WriteTask(ctx.place, table.name, table.writer_id, int(batch_id), None, key, (), check)
    change = UPDATE_AFTER if table.kind == "primary_key" else None
    listing = session.createDataFrame([(f,) for f in files], "file string").coalesce(1)
    with ctx.clock.phase("write"):
        results = listing.mapInArrow(ArrowIngest(source, task, change), RESULT).collect()
    refused = [r.reason for r in results if r.kind == "refused"]
    if refused:
        count_reader(ctx, "spark", batch_id, refused[0])
        return None
    count_reader(ctx, "arrow", batch_id, None)
    return record(ctx, results, batch_id, None, check)
