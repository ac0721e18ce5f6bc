"""The two sides of a partitioned join (:mod:`.joinbatch`): what a micro-batch changed on a side, and a side's
current rows (for a new state).

A primary-key input (``join_changelog``, and the dimension of ``join_log``) changes by the last image of each
changed key. A log input (the facts of ``join_log``) only gains rows: each row is an image that never
changes, keyed by its place in the log, ``<bucket>:<offset>`` (:data:`ROW`), so a replayed batch applies the
same rows under the same keys again — which changes nothing — and a row is never counted twice.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from materializer.analyze import struct_of
from materializer.incremental.common import changed_images
from materializer.plan import Input
from materializer.strategies import QueryContext, conform_to, read_batch
from runtime.core.literals import BUCKET, OFFSET
from runtime.spark.types import spark_to_arrow
from runtime.spark.writer import batch_ranges

ROW = "__row"  # a log row's key in the join state: "<bucket>:<offset>"


class KeyedSide:
    """A primary-key input: its changed keys' last images; its current rows from the store."""

    def __init__(self, ctx: QueryContext, inp: Input) -> None:
        self.ctx, self.input = ctx, inp
        self.key = tuple(inp.primary_key)

    def change(self, batch_id: int) -> tuple[pa.Table, pa.Table] | None:
        change = changed_images(self.ctx, batch_id, self.input)
        return None if change is None else (conform_to(change[0], self.input.ddl), change[1])

    def current(self, batch_id: int) -> pa.Table:
        return conform_to(self.ctx.store.scan(self.input.ref), self.input.ddl)


class LogSide:
    """A log input: the batch's new rows; every row up to the batch's end (the lake below the hot log, then
    the hot log), each with its :data:`ROW` key."""

    def __init__(self, ctx: QueryContext, inp: Input) -> None:
        self.ctx, self.input = ctx, inp
        self.key = (ROW,)

    def _keyed(self, data: pa.Table) -> pa.Table:
        row = pc.binary_join_element_wise(
            pc.cast(data.column(BUCKET), pa.string()), pc.cast(data.column(OFFSET), pa.string()), ":"
        )
        return conform_to(data, self.input.ddl).append_column(ROW, row)

    def change(self, batch_id: int) -> tuple[pa.Table, pa.Table] | None:
        data = read_batch(self.ctx, self.input, batch_id)
        if data is None or data.num_rows == 0:
            return None
        rows = self._keyed(data)
        return rows, rows.select([ROW])

    def current(self, batch_id: int) -> pa.Table:
        _, ends = batch_ranges(self.ctx.table.checkpoint, batch_id).get(self.input.ref, ({}, {}))
        user = [f.name for f in struct_of(self.input.ddl).fields]
        parts = [
            self._keyed(pa.Table.from_batches([b]))
            for bucket, end in sorted(ends.items(), key=lambda item: int(item[0]))
            if int(end) > 0
            for b in self.ctx.history.read(self.input.ref, int(bucket), 0, int(end), columns=user)
        ]
        if parts:
            return pa.concat_tables(parts)
        return (
            spark_to_arrow(struct_of(self.input.ddl))
            .empty_table()
            .append_column(ROW, pa.array([], pa.string()))
        )


def side_of(ctx: QueryContext, inp: Input) -> KeyedSide | LogSide:
    return LogSide(ctx, inp) if inp.kind == "log" else KeyedSide(ctx, inp)
