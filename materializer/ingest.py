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
    """``mapInArrow`` over one row (a pass-through table over a JSON source): parse the batch's files with the
    JSON Lines reader (:mod:`materializer.jsonlines`) and write them, in one task, so no row passes through a
    JVM. The files travel with the function, not as rows (a DataFrame of them would cost the driver a
    ``createDataFrame`` per batch). All files are parsed before anything is written: a file the reader refuses
    makes the task write nothing and report ``refused`` (Spark then reads the batch)."""

    source: SourcePlan
    write: WriteTask
    change: str | None  # a primary-key table's rows are upserts
    files: tuple[str, ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:  # the one row that runs the task
            pass
        data, why = JsonLinesReader(self.source).read(list(self.files))
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
    check = SourceCheck.of(source)
    table = ctx.table
    key = tuple(table.primary_key)
    task = WriteTask(ctx.place, table.name, table.writer_id, int(batch_id), None, key, (), check)
    change = UPDATE_AFTER if table.kind == "primary_key" else None
    one = session.range(1, numPartitions=1)
    with ctx.clock.phase("write"):
        results = one.mapInArrow(ArrowIngest(source, task, change, tuple(files)), RESULT).collect()
    refused = [r.reason for r in results if r.kind == "refused"]
    if refused:
        count_reader(ctx, "spark", batch_id, refused[0])
        return None
    count_reader(ctx, "arrow", batch_id, None)
    return record(ctx, results, batch_id, None, check)
