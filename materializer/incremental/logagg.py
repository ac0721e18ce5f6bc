"""The ``agg_log`` strategy: a GROUP BY over one log table, on the driver data path, kept with per-group
partial aggregates in the hot store — no Spark job per micro-batch (docs/architecture.md, "Incremental
maintenance").

The state is a one-bucket primary-key table of the store's ``aggregate`` merge engine, keyed by the group
columns (``g0``, ``g1``...): ``rows`` (``count(*)``), and per aggregate ``n<i>`` (non-null values), ``s<i>``
(their sum) or ``v<i>`` (their min or max). Per micro-batch the batch's rows are pre-aggregated with Arrow
(one row per group), written to the state (the store adds them to the stored partials, once per
``(writer, seq)``), and the touched groups' merged partials are read back and turned into output rows.
``count(DISTINCT c)`` keeps the (group, value) pairs seen in a second state table,
``<table>__distinct__state``: a batch adds to ``d<i>`` the pairs it has that the table does not.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from materializer.analyze import struct_of
from materializer.incremental.common import StateTable, write_output
from materializer.incremental.facts import GroupAggregate
from materializer.plan import Input
from materializer.rows import keys_table
from materializer.strategies import QueryContext, _begin, _finish, output_difference, read_batch
from runtime.core.errors import ErrorCode, TidehouseError
from runtime.core.literals import DELETE, UPDATE_AFTER
from runtime.spark.types import spark_to_arrow
from runtime.spark.writer import batch_ranges, origin_from_checkpoint

ROWS = "rows"
_OPS = {"<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal, "=": pc.equal}
_LONG_LIMIT = 2.0**62  # a batch's integral sum beyond this may have wrapped in Arrow's int64 sum


class Partials:
    """The state's columns for one GROUP BY, and the Arrow work on them."""

    def __init__(self, facts: GroupAggregate, input_schema: pa.Schema) -> None:
        self.facts = facts
        self.key = tuple(f"g{i}" for i in range(len(facts.group)))
        fields = [pa.field(k, input_schema.field(c).type) for k, c in zip(self.key, facts.group)]
        fields.append(pa.field(ROWS, pa.int64()))
        self.merge = {ROWS: "sum"}
        self.distinct = [i for i, agg in enumerate(facts.aggregations) if agg.function == "count_distinct"]
        for i, agg in enumerate(facts.aggregations):
            if agg.function == "count" and agg.column is None:
                continue
            if agg.function == "count_distinct":  # the group's distinct values: new ones are added
                fields.append(pa.field(f"d{i}", pa.int64()))
                self.merge[f"d{i}"] = "sum"
                continue
            fields.append(pa.field(f"n{i}", pa.int64()))
            self.merge[f"n{i}"] = "sum"
            if agg.function in ("sum", "avg"):
                fields.append(
                    pa.field(f"s{i}", self._sum_type(agg.function, input_schema.field(agg.column).type))
                )
                self.merge[f"s{i}"] = "sum"
            elif agg.function in ("min", "max"):
                fields.append(pa.field(f"v{i}", input_schema.field(agg.column).type))
                self.merge[f"v{i}"] = agg.function
        self.schema = pa.schema(fields)
        # the distinct values seen, per group and count(DISTINCT): (g..., i, v) with v the value as text
        self.pair_key = (*self.key, "i", "v")
        self.pair_schema = pa.schema(
            [*fields[: len(self.key)], pa.field("i", pa.int32()), pa.field("v", pa.string())]
        )

    def pairs(self, rows: pa.Table) -> pa.Table:
        """The distinct (group, count(DISTINCT) index, value) of ``rows``, NULL values left out."""
        parts = []
        for i in self.distinct:
            values = rows.column(self.facts.aggregations[i].column)
            cols = {k: rows.column(c) for k, c in zip(self.key, self.facts.group)}
            cols["i"] = pa.array([i] * rows.num_rows, pa.int32())
            cols["v"] = values.cast(pa.string())
            table = pa.table(cols).filter(pc.is_valid(values))
            parts.append(table.group_by(list(self.pair_key), use_threads=False).aggregate([]))
        if not parts:
            return self.pair_schema.empty_table()
        return pa.concat_tables([t.select(list(self.pair_key)).cast(self.pair_schema) for t in parts])

    @staticmethod
    def _sum_type(function: str, column: pa.DataType) -> pa.DataType:
        # Spark: sum of an integral column is a bigint, of a floating one a double; avg sums as double
        return pa.int64() if function == "sum" and pa.types.is_integer(column) else pa.float64()

    def of(self, rows: pa.Table, table: str = "", new_pairs: pa.Table | None = None) -> pa.Table:
        """One row per group of ``rows``: its partials (state schema); ``new_pairs``: the (group, index,
        value) pairs not seen before, counted into the count(DISTINCT) partials. A NULL group key fails, as
        writing its output row would: the GROUP BY columns are the table's primary key."""
        cols = {k: rows.column(c) for k, c in zip(self.key, self.facts.group)}
        for column in self.facts.group:
            nulls = rows.column(column).null_count
            if nulls:
                raise TidehouseError(
                    ErrorCode.WRITE_INVALID,
                    f"write to {table}: GROUP BY column {column!r} is NULL in {nulls} input row(s), and the "
                    "table's primary key cannot be NULL",
                    hint=f"filter NULL {column} out (or coalesce it) in the action's SQL or upstream",
                )
        specs = [([], "count_all")]
        names = {"count_all": ROWS}  # Arrow's name of each aggregate -> the state's
        for i, agg in enumerate(self.facts.aggregations):
            if f"n{i}" not in self.merge:
                continue
            values = rows.column(agg.column)
            if f"s{i}" in self.merge:
                values = values.cast(self.schema.field(f"s{i}").type)
            cols[f"x{i}"] = values
            specs.append((f"x{i}", "count", pc.CountOptions(mode="only_valid")))
            names[f"x{i}_count"] = f"n{i}"
            if f"s{i}" in self.merge:
                specs.append((f"x{i}", "sum", pc.ScalarAggregateOptions(min_count=1)))
                names[f"x{i}_sum"] = f"s{i}"
                if pa.types.is_integer(values.type):  # Arrow's int64 sum wraps; Spark's fails (ANSI)
                    cols[f"f{i}"] = values.cast(pa.float64(), safe=False)
                    specs.append((f"f{i}", "sum", pc.ScalarAggregateOptions(min_count=1)))
                    names[f"f{i}_sum"] = f"f{i}"
            elif f"v{i}" in self.merge:
                fn = self.merge[f"v{i}"]
                specs.append((f"x{i}", fn, pc.ScalarAggregateOptions(min_count=1)))
                names[f"x{i}_{fn}"] = f"v{i}"
        grouped = pa.table(cols).group_by(list(self.key), use_threads=False).aggregate(specs)
        out = grouped.rename_columns([names.get(c, c) for c in grouped.column_names])
        for i in self.distinct:
            out = self._with_count(out, f"d{i}", i, new_pairs if new_pairs is not None else self.pairs(rows))
        for name in [n for n in names.values() if n.startswith("f")]:
            largest = pc.max(pc.abs(out.column(name))).as_py()
            if largest is not None and largest >= _LONG_LIMIT:
                raise TidehouseError(
                    ErrorCode.QUERY_FAILED,
                    f"a sum of a bigint column overflows (a micro-batch's sum reaches {largest:.3g})",
                    hint="cast the column to decimal or double in the action's SQL",
                )
        return out.select(self.schema.names).cast(self.schema)

    def _with_count(self, out: pa.Table, name: str, i: int, pairs: pa.Table) -> pa.Table:
        """``out`` with column ``name``: per group, how many of ``pairs`` of count(DISTINCT) ``i`` it has."""
        mine = pairs.filter(pc.equal(pairs.column("i"), i))
        counts = mine.group_by(list(self.key), use_threads=False).aggregate([([], "count_all")])
        joined = out.join(
            counts.rename_columns([*self.key, name]), keys=list(self.key), join_type="left outer"
        )
        return joined.set_column(
            joined.schema.get_field_index(name), name, pc.fill_null(joined.column(name), 0)
        )

    def result(self, merged: pa.Table, out_schema: pa.Schema) -> tuple[pa.Table, pa.Array]:
        """(the output rows of the merged partials, which of them pass the HAVING comparisons)."""
        values: dict[str, pa.ChunkedArray] = {c: merged.column(k) for k, c in zip(self.key, self.facts.group)}
        for i, agg in enumerate(self.facts.aggregations):
            if agg.function == "count":
                values[agg.output] = merged.column(ROWS if agg.column is None else f"n{i}")
            elif agg.function == "sum":
                values[agg.output] = merged.column(f"s{i}")
            elif agg.function == "count_distinct":
                values[agg.output] = merged.column(f"d{i}")
            elif agg.function == "avg":
                count = merged.column(f"n{i}")
                mean = pc.divide(merged.column(f"s{i}"), pc.cast(count, pa.float64()))
                values[agg.output] = pc.if_else(pc.equal(count, 0), pa.scalar(None, pa.float64()), mean)
            else:
                values[agg.output] = merged.column(f"v{i}")
        passing = pa.chunked_array([pa.array([True] * merged.num_rows, pa.bool_())])
        for c in self.facts.having:
            op = _OPS.get(c.op)
            test = op(values[c.column], c.value) if op else pc.not_equal(values[c.column], c.value)
            passing = pc.and_(passing, pc.fill_null(test, False))
        table = pa.table(
            [values[src].cast(out_schema.field(out).type) for out, src in self.facts.output],
            schema=out_schema,
        )
        return table, passing


def _rows_until_end(ctx: QueryContext, inp: Input, batch_id: int) -> pa.Table | None:
    """Every row of ``inp`` up to the end of micro-batch ``batch_id`` (a new state starts from the input's
    first row: the lake below the hot log, then the hot log)."""
    _, ends = batch_ranges(ctx.table.checkpoint, batch_id).get(inp.ref, ({}, {}))
    user = [f.name for f in struct_of(inp.ddl).fields]
    parts = [
        pa.Table.from_batches([b])
        for bucket, end in sorted(ends.items(), key=lambda item: int(item[0]))
        if int(end) > 0
        for b in ctx.history.read(inp.ref, int(bucket), 0, int(end), columns=user)
    ]
    return pa.concat_tables(parts) if parts else None


def log_aggregate_batch(ctx: QueryContext) -> Callable:
    table = ctx.table
    facts: GroupAggregate = table.incremental
    inp = table.inputs[0]
    partials = Partials(facts, spark_to_arrow(struct_of(inp.ddl)))
    state = StateTable(ctx, partials.schema, partials.key, aggregations=partials.merge)
    # count(DISTINCT): the (group, value) pairs seen, in a second state table
    seen = (
        StateTable(ctx, partials.pair_schema, partials.pair_key, part="distinct")
        if partials.distinct
        else None
    )
    out_schema = spark_to_arrow(struct_of(table.ddl))

    def run(batch_df, batch_id: int) -> None:
        started = time.time()
        _begin(ctx, batch_df)
        if seen is not None and not ctx.store.has_table(seen.name):  # the values seen are lost: rebuild all
            state.reset()
        fresh = state.ensure()
        if seen is not None:
            if fresh:
                seen.reset()
            seen.ensure()
        if fresh:  # a new state: built from every input row so far, the output made equal to it
            with ctx.clock.phase("read"):
                rows = _rows_until_end(ctx, inp, batch_id)
        else:
            rows = read_batch(ctx, inp, batch_id)
        if rows is None or rows.num_rows == 0:
            return
        with ctx.clock.phase("sql"):
            pairs = partials.pairs(rows)
        if seen is not None and not fresh and pairs.num_rows:  # the pairs no earlier batch had
            with ctx.clock.phase("read"):
                known = ctx.store.lookup(seen.name, pairs).select(list(partials.pair_key))
            pairs = pairs.join(known, keys=list(partials.pair_key), join_type="left anti")
        with ctx.clock.phase("sql"):
            part = partials.of(rows, table.name, pairs)
        origin = origin_from_checkpoint(ctx.store, table.checkpoint, batch_id)
        if fresh:  # output, then the values seen, then the partials: a crash before the last rebuilds again
            with ctx.clock.phase("sql"):
                result, passing = partials.result(part, out_schema)
            written = write_output(ctx, output_difference(ctx, result.filter(passing)), batch_id, origin)
            with ctx.clock.phase("write"):
                if seen is not None:
                    seen.write(seen.upserts(pairs), batch_id)
                state.write(state.upserts(part), batch_id)
        else:  # partials first (added once per seq), the values seen second, then the touched groups
            with ctx.clock.phase("write"):
                state.write(state.upserts(part), batch_id)
                if seen is not None:  # a crash before this write: the replay finds the pairs new again,
                    seen.write(seen.upserts(pairs), batch_id)  # and its partials write is skipped
            with ctx.clock.phase("read"):
                merged = ctx.store.lookup(state.name, part.select(list(partials.key)))
            with ctx.clock.phase("sql"):
                result, passing = partials.result(merged.select(partials.schema.names), out_schema)
            written = write_output(ctx, _changes(ctx, result, passing), batch_id, origin)
        _finish(ctx, started, rows.num_rows, written, origin)

    return run


def _changes(ctx: QueryContext, result: pa.Table, passing: pa.Array) -> pa.Table | None:
    """Upserts of the groups that pass HAVING; deletes of those that do not and are in the output."""
    meta = ctx.store.get_table(ctx.table.name)
    key = ctx.table.primary_key
    parts = [keys_table(meta.schema, result.filter(passing), key, UPDATE_AFTER)]
    failing = result.filter(pc.invert(passing))
    if failing.num_rows:
        present = ctx.store.lookup(ctx.table.name, failing.select(list(key)))
        if present.num_rows:
            parts.insert(0, keys_table(meta.schema, present, key, DELETE))
    out = pa.concat_tables(parts)
    return out if out.num_rows else None
