"""``join_log`` on the executor path: the log's new rows read, joined and written by Spark tasks; the driver
handles the join keys the primary-key input changed (docs/architecture.md, "`join_log` in the executors").

The query's stream carries the log input's rows (its user and system columns in one struct column,
:data:`LOG`; the primary-key input's branch holds NULL there), so the batch's DataFrame holds the log's new
rows, read by tasks from the ranges Spark checkpointed. Per micro-batch:

1. The driver reads the primary-key input's changed keys (O(change)) and from them the partitions (join key
   values) they leave or enter, *T* (:func:`_touched`; a key leaves the partition of its home in the state,
   which only the driver writes).
2. The batch's log rows of *T* are collected (O(rows of *T*)) and the driver runs the driver path's step over
   them and the primary-key changes (:meth:`Join.apply`): output, then state.
3. Tasks take the other log rows. Their partitions' primary-key rows did not change in the batch, so their
   output rows are the action's SQL over those log rows and the primary-key rows of their partitions — read by
   tasks from the join's state (as of this batch: the hot table may be ahead) — written by routed tasks that
   refuse a key produced twice (or by (2) too) or held by another partition
   (:class:`materializer.routing.UniqueCheck`);
   then one task adds the log rows to their partitions' state (:class:`LogRows`).

(2) runs before (3): a key that moves in the batch from a partition of *T* to another is deleted by (2) before
(3) writes it. (3)'s writes use writer ids of their own (``<writer>:delta``), so the store's ``(writer,
seq)`` idempotency keeps a replay of either step from writing twice. The driver writes the output and the
state through the store as tasks open it (:meth:`runtime.spark.options.Place.store`: a writer that closes a
primary-key bucket after each write), since tasks write the same tables.

(2) records *T* in the state it writes (:data:`TOUCHED`): a replay of the batch after that write, whose
changed keys' homes have moved, takes the same partitions as the first attempt, so (3) takes the same rows and
its writes (output, quarantined violators, state) are the first attempt's, skipped where they were made.

A join that keeps the primary-key input's unmatched rows adds (3a) before (2): tasks delete the unmatched
rows of the partitions outside *T* that get their first log rows (:class:`KeyedRows` with ``fresh``), whose
new log rows match every primary-key row there — unless a Filter below the join drops log rows: such a table
runs :func:`materializer.incremental.joinbatch.join_batch` on both paths (:func:`in_tasks`).

The write tasks check the table's expectations as the driver path does: a violator is not written (its key
is deleted) and goes to the quarantine.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from materializer.analyze import struct_of
from materializer.incremental.common import key_tuples
from materializer.incremental.join import PRESERVED, SCHEMA, Change, Partitioner, decode, partition_of
from materializer.incremental.joinbatch import DUP_HINT, ENTERING_HINT, WHERE, Join
from materializer.incremental.joinfacts import EquiJoin
from materializer.incremental.joinsides import ROW
from materializer.plan import Input, TablePlan
from materializer.rows import keys_table
from materializer.strategies import QueryContext, _finish, conform_to
from runtime.core.literals import BUCKET, CHANGE, DELETE, OFFSET, UPDATE_AFTER
from runtime.spark.options import Place
from runtime.spark.writer import batch_rows, prepare

LOG = "__log"  # the stream's column holding a log row (NULL in the primary-key input's branch)
PART = "__part"  # a log row's partition, added by :class:`Tagger`
DELTA = ":delta"  # the suffix of the writer ids of step (3)
GONE = ":gone"  # the suffix of the writer id of step (3a)
TOUCHED = "t"  # the state's entry of the last batch's T, written by (2): (batch id, sorted partitions)


def sides_of(table: TablePlan) -> tuple[str, str] | None:
    """(the log input's side, the primary-key input's side) of a ``join_log`` table, or None when it has no
    single log input."""
    facts: EquiJoin = table.incremental
    by_name = {i.name: i for i in table.inputs}
    kinds = {"l": by_name[facts.left].kind, "r": by_name[facts.right].kind}
    logs = [s for s, kind in kinds.items() if kind == "log"]
    if len(logs) != 1:
        return None
    return logs[0], "r" if logs[0] == "l" else "l"


def in_tasks(table: TablePlan) -> bool:
    """Whether the executor path runs ``table``'s log rows in tasks: a ``join_log`` that keeps no unmatched
    row of its primary-key input (inner, or outer on the log's side), or one that does (right, full, or left
    with the log on the right) with no Filter below the join on the log's side — then a log row matches
    every primary-key row of its partition, so a partition's unmatched rows are gone once it has log rows."""
    if table.strategy != "join_log":
        return False
    sides = sides_of(table)
    if sides is None:
        return False
    log, keyed = sides
    facts: EquiJoin = table.incremental
    return keyed not in PRESERVED[facts.kind] or log not in facts.filtered


def _inputs(table: TablePlan) -> tuple[Input, Input]:
    """(the log input, the primary-key input)."""
    facts: EquiJoin = table.incremental
    by_name = {i.name: i for i in table.inputs}
    named = {"l": by_name[facts.left], "r": by_name[facts.right]}
    log, keyed = sides_of(table)
    return named[log], named[keyed]


def log_join_stream(session, config, table: TablePlan):
    """The query's stream: the log input's rows in :data:`LOG`, the primary-key input's branch (which only
    decides its offsets) NULL there; one branch per input in the plan's order, as the checkpoint has them."""
    from pyspark.sql import functions as F

    from materializer.hotstream import hot_stream

    log_input, _ = _inputs(table)
    columns = [f.name for f in struct_of(log_input.ddl).fields] + [BUCKET, OFFSET]
    branches, kind = [], None
    for inp in table.inputs:
        if inp is log_input:
            stream = hot_stream(session, config, inp.ref)
            stream = stream.select(F.struct(*[F.col(f"`{c}`") for c in columns]).alias(LOG))
            kind = stream.schema[LOG].dataType
        else:
            first = struct_of(inp.ddl).fields[0].name
            stream = hot_stream(session, config, inp.ref, [first])
        branches.append((inp is log_input, stream))
    parts = [s if is_log else s.select(F.lit(None).cast(kind).alias(LOG)) for is_log, s in branches]
    return parts[0].union(parts[1])


@dataclass(frozen=True)
class Tagger:
    """``mapInArrow`` over the batch's log rows: their user columns (as the input declares them), their key
    in the join state (:data:`ROW`, ``<bucket>:<offset>``) and their partition (:data:`PART`)."""

    ddl: str
    side: str
    join_keys: tuple[str, ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc

        for batch in batches:
            data = pa.Table.from_batches([batch])
            rows = pc.binary_join_element_wise(
                pc.cast(data.column(BUCKET), pa.string()), pc.cast(data.column(OFFSET), pa.string()), ":"
            )
            user = conform_to(data, self.ddl)
            parts = [
                partition_of(values, self.side, repr((row,)))
                for values, row in zip(key_tuples(user, self.join_keys), rows.to_pylist())
            ]
            out = user.append_column(ROW, rows).append_column(PART, pa.array(parts, pa.string()))
            yield from out.to_batches()


@dataclass(frozen=True)
class KeyedRows:
    """``mapInArrow`` over distinct partitions: the primary-key input's rows in each, from the join's state
    (the input as of this batch for partitions it did not change) — with ``fresh`` (the log's side), only in
    the partitions where the state holds no log row yet."""

    place: Place
    state: str
    side: str
    ddl: str
    fresh: str | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from runtime.spark.types import spark_to_arrow

        schema = spark_to_arrow(struct_of(self.ddl))
        store = self.place.store()
        for batch in batches:
            parts = [p for p in batch.column(PART).to_pylist() if p.startswith("k")]
            logs = [f"{e}{self.fresh}{p}" for p in parts for e in ("p", "x")] if self.fresh else []
            keys = [f"p{self.side}{p}" for p in parts] + logs
            if not keys:
                continue
            found = store.lookup(self.state, pa.table({"key": pa.array(keys, pa.string())}))
            names = found.column("key").to_pylist()
            logged = {name[2:] for name in names if name[0] != "p" or name[1] != self.side}  # with log rows
            mine = [i for i, n in enumerate(names) if n.startswith(f"p{self.side}") and n[2:] not in logged]
            values = found.column("value").take(pa.array(mine, pa.int64()))
            entries = decode([names[i] for i in mine], values.to_pylist())
            rows = [row for part in entries.values() for row in part.values()]
            if rows:
                yield from pa.Table.from_pylist(rows, schema=schema).to_batches()


@dataclass(frozen=True)
class LogRows:
    """``mapInArrow`` in one task over the log rows outside *T*: add them to their partitions in the join's
    state (a chunk per partition, or the partition folded: :meth:`Partitioner.step`), written under
    ``writer`` and ``seq`` — a replay finds the write committed and skips it."""

    place: Place
    state: str
    parts: Partitioner
    side: str
    ddl: str
    writer: str
    seq: int

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from materializer.incremental.join import state_entries
        from materializer.routing import results

        batches = [b for b in batches if b.num_rows]
        if not batches:
            return
        data = pa.Table.from_batches(batches)
        # the rows as the driver path keeps them: the input's user columns and their key in the state
        rows = conform_to(data, self.ddl).append_column(ROW, data.column(ROW))
        store = self.place.store()

        def load(keys: list[str]) -> dict[str, object]:
            if not keys:
                return {}
            found = store.lookup(self.state, pa.table({"key": pa.array(keys, pa.string())}))
            return decode(found.column("key").to_pylist(), found.column("value").to_pylist())

        members = self.parts.members(self.side, rows)
        change = Change(members, list(members))
        ups, downs = state_entries(self.parts.step({self.side: change}, load))
        parts = []
        if downs:
            parts.append(
                keys_table(SCHEMA, pa.table({"key": pa.array(downs, pa.string())}), ("key",), DELETE)
            )
        if ups:
            entries = pa.table({"key": list(ups), "value": pa.array(list(ups.values()), pa.binary())})
            parts.append(keys_table(SCHEMA, entries, ("key",), UPDATE_AFTER))
        written = 0
        if parts:
            result = store.write(self.state, pa.concat_tables(parts), writer=self.writer, seq=self.seq)
            written = 0 if result.skipped else len(ups) + len(downs)
        yield from results([{"kind": "state", "n": written}])  # state entries written (0: a replay)


def join_log_batch(ctx: QueryContext) -> Callable:
    """The micro-batch function of a ``join_log`` table on the executor path (:func:`in_tasks`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    from materializer.routing import RESULT, UniqueCheck, write_routed

    ctx = copy.copy(ctx)
    ctx.store = ctx.place.store()  # tasks write the output and the state too: close buckets after writes
    table = ctx.table
    join = Join(ctx)
    state = join.state
    state.also = (table.writer_id + DELTA,)
    log_side, keyed_side = sides_of(table)
    log_input, _ = _inputs(table)
    user = [f"`{f.name}`" for f in struct_of(log_input.ddl).fields]
    tag_schema = StructType(
        [*struct_of(log_input.ddl).fields, StructField(ROW, StringType()), StructField(PART, StringType())]
    )
    tagger = Tagger(log_input.ddl, log_side, tuple(join.parts.join_keys[log_side]))
    unique = UniqueCheck(table.action, WHERE, DUP_HINT, ENTERING_HINT)
    keyed_input = next(i for i in table.inputs if i is not log_input)
    preserves = keyed_side in PRESERVED[table.incremental.kind]  # its unmatched rows are output rows

    def drop_unmatched(session, rest, batch_id: int, origin: float | None) -> int:
        """Delete the output rows of the primary-key rows the partitions of ``rest`` without log rows in the
        state produced unmatched (the SQL over no log row and their primary-key rows): their new log rows
        match them all. Under a writer id of its own, before (2), which may produce those keys anew."""
        rest.select(*user).limit(0).createOrReplaceTempView(log_input.name)
        lookup = KeyedRows(ctx.place, state.name, keyed_side, keyed_input.ddl, fresh=log_side)
        fresh = rest.select(PART).distinct().mapInArrow(lookup, struct_of(keyed_input.ddl))
        fresh.createOrReplaceTempView(keyed_input.name)
        gone = session.sql(table.sql, args=ctx.args).selectExpr("*", f"'{DELETE}' AS `{CHANGE}`")
        writer = table.writer_id + GONE
        return write_routed(ctx, gone, batch_id, origin, writer=writer, expect=False).written

    def run(batch_df, batch_id: int) -> None:
        started = time.time()
        begun = join.start(batch_df, batch_id, started)
        if begun is None:
            return
        session, origin = begun
        change = join.sides[keyed_side].change(batch_id)
        keyed = join.parts.change(keyed_side, *change) if change is not None else None
        touched = _touched(join, keyed_side, keyed, batch_id)
        rows_in = batch_rows(table.checkpoint, batch_id, log_input.ref)
        if not rows_in and keyed is None:
            return
        tagged = batch_df.where(F.col(LOG).isNotNull()).select(f"{LOG}.*").mapInArrow(tagger, tag_schema)
        tagged = tagged.persist() if rows_in else tagged
        written, taken = 0, frozenset()
        try:
            rest, changes = tagged, None
            if keyed is not None:  # the partitions the primary-key input changed: step (2)'s
                changes = {keyed_side: keyed}
                if rows_in:
                    inside = F.col(PART).isin(sorted(touched))
                    mine = tagged.where(inside).drop(PART).toArrow()
                    if mine.num_rows:
                        mine = conform_to(mine, log_input.ddl).append_column(ROW, mine.column(ROW))
                        changes[log_side] = join.parts.change(log_side, mine, mine.select([ROW]))
                    rest = tagged.where(~inside)
            if rows_in and preserves:  # (3a) the unmatched rows their first log rows match
                written += drop_unmatched(session, rest, batch_id, origin)
            if changes is not None:  # (2) in the driver
                recorded = {TOUCHED: pickle.dumps((int(batch_id), sorted(touched)))}
                done, after = join.apply(session, changes, batch_id, origin, also=recorded)
                written, taken = written + done, _keys(ctx, after)
            if rows_in:  # (3) the others, in tasks: output rows, then their state
                rest.select(*user).createOrReplaceTempView(log_input.name)
                lookup = KeyedRows(ctx.place, state.name, keyed_side, keyed_input.ddl)
                keyed_rows = rest.select(PART).distinct().mapInArrow(lookup, struct_of(keyed_input.ddl))
                keyed_rows.createOrReplaceTempView(keyed_input.name)
                out = session.sql(table.sql, args=ctx.args).selectExpr("*", f"'{UPDATE_AFTER}' AS `{CHANGE}`")
                writer = table.writer_id + DELTA
                check = dataclasses.replace(unique, taken=taken)  # a key of (2)'s too: produced twice
                routed = write_routed(ctx, out, batch_id, origin, writer=writer, unique=check)
                written += routed.written
                task = LogRows(
                    ctx.place, state.name, join.parts, log_side, log_input.ddl, writer, int(batch_id)
                )
                with ctx.clock.phase("write"):
                    rest.coalesce(1).mapInArrow(task, RESULT).collect()
        finally:
            if rows_in:
                tagged.unpersist()
        _finish(ctx, started, rows_in + (len(keyed.keys) if keyed is not None else 0), written, origin)

    return run


def _keys(ctx: QueryContext, result: pa.Table | None) -> frozenset[tuple]:
    """The primary keys of (2)'s result, cast to the table's types as the write tasks see theirs."""
    if result is None:
        return frozenset()
    key = list(ctx.table.primary_key)
    return frozenset(key_tuples(prepare(ctx.store, ctx.table.name, result.select(key)), key))


def _touched(join: Join, side: str, change: Change | None, batch_id: int) -> set[str]:
    """*T*: the partitions the primary-key input's changed keys leave (their homes) or enter — and, in a
    replay of a batch whose step (2) wrote the state, those the first attempt recorded (the keys' homes
    have moved since: the partitions they left would be missing)."""
    if change is None:
        return set()
    found = join.load([f"h{side}{k}" for k in change.keys] + [TOUCHED])
    recorded = found.pop(TOUCHED, None)
    touched = set(found.values()) | {p for p, _ in change.rows.values()}
    if recorded is not None and recorded[0] == int(batch_id):
        touched |= set(recorded[1])
    return touched
