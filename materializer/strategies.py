"""One streaming query per table: how each strategy reads its inputs and writes its micro-batches.

Every query writes through ``foreachBatch`` with ``seq = batch_id`` under a writer id tied to its checkpoint,
so a micro-batch Spark replays after a crash is a no-op in the hot storage (exactly once). Inputs are bound
as temp views on the micro-batch's own session (``batch_df.sparkSession``: each query has its own), so
queries never see each other's views. Lookups and recomputations read a primary-key table's current state
with ``store.scan`` (Arrow) turned into a local DataFrame — no Python worker round trip.

Hot delay: every downstream write carries ``origin_ts``, the oldest origin of the upstream rows it consumed
(:func:`runtime.spark.writer.origin_from_checkpoint`, from the checkpoint's offset log); the first layer
passes None and the store uses its commit time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from materializer import duck
from materializer.analyze import spark_args, struct_of
from materializer.handoff import Handoff
from materializer.jsonlines import JsonLinesReader
from materializer.malformed import Malformed
from materializer.plan import FlowPlan, Input, SourcePlan, TablePlan
from materializer.rows import (
    Violations,
    expectation_exprs,
    keys_table,
    quarantine_rows,
    split_corrupt,
    split_expectations,
    split_missing,
)
from materializer.telemetry import PhaseClock, timed
from runtime.core.errors import ErrorCode, TidehouseError
from runtime.core.literals import (
    CHANGE,
    DELETE,
    INSERT,
    SYSTEM_COLUMNS,
    UPDATE_AFTER,
    UPDATE_BEFORE,
)
from runtime.lake.history import TableHistory
from runtime.spark.filelog import source_files
from runtime.spark.options import Place
from runtime.spark.session import is_connect
from runtime.spark.writer import batch_ranges, origin_from_checkpoint, prepare
from runtime.storage.api import TableStore

log = logging.getLogger(__name__)


@dataclass
class TableStats:
    """Figures of one table's query during this run (the status snapshot shows them)."""

    batches: int = 0
    rows_in: int = 0
    rows_out: int = 0
    quarantined: int = 0
    dropped: int = 0
    expectations: dict[str, int] = field(default_factory=dict)
    last_batch_time: float | None = None
    last_batch_seconds: float | None = None
    last_origin_ts: float | None = None
    last_rows_out: int | None = None  # rows the newest batch wrote
    last_batch_id: int | None = None
    phase_seconds: dict[str, float] = field(default_factory=dict)  # read/sql/write, summed (telemetry.py)
    source_batches: dict[str, int] = field(default_factory=dict)  # a file source's batches by reader
    error: str | None = None
    failure: TidehouseError | None = field(default=None, repr=False)  # the error a batch raised, code kept
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("lock", "failure")}


class QueryContext:
    """What a query's batch function needs: the store, the plan, the stats sink."""

    def __init__(
        self,
        store: TableStore,
        root: str,
        plan: FlowPlan,
        table: TablePlan,
        stats: TableStats,
        pool: str,
        history: TableHistory | None = None,
        place: Place | None = None,
        spark_partitions: int = 2,
        handoff: Handoff | None = None,
        json_reader: JsonLinesReader | None = None,
    ) -> None:
        self.store = store
        self.history = history or TableHistory(store, None)  # reads that may need what retention deleted
        self.place = place or Place(root)  # where executor tasks open the store and the lake
        self.spark_partitions = spark_partitions  # shuffle partitions: tasks the executor path writes with
        self.handoff = handoff  # driver path: how Arrow data reaches Spark (None: a local relation)
        self.json_reader = json_reader  # driver path: Arrow parses a JSON source's batches (None: Spark)
        self.spark_files = None  # a file source: how Spark reads a batch (materializer.sources)
        self.root = root
        self.flow = plan
        self.table = table
        self.stats = stats
        self.pool = pool
        self.args = spark_args(table.params)
        self.seen_violators: set[str] = set()  # recompute: violators this run counted already
        self.clock = PhaseClock()  # seconds per phase of the running micro-batch


# -- helpers ----------------------------------------------------------------------------------------
def conform_to(data: pa.Table, ddl: str) -> pa.Table:
    """Arrow data with exactly the user columns of ``ddl``, in order, cast to their types (a column the data
    lacks is all nulls; system and other columns are dropped)."""
    from runtime.spark.types import spark_to_arrow

    target = spark_to_arrow(struct_of(ddl))
    if not len(target):
        return data
    cols = [
        data.column(f.name).cast(f.type) if f.name in data.column_names else pa.nulls(data.num_rows, f.type)
        for f in target
    ]
    return pa.Table.from_arrays(cols, schema=target)


def local_df(session, data: pa.Table, ddl: str, handoff: Handoff | None = None):
    """A DataFrame of Arrow data in the driver with the given user schema (system columns dropped): a local
    relation, or with a ``handoff`` (the driver path) a Parquet file Spark reads when the data is big."""
    data, schema = conform_to(data, ddl), struct_of(ddl)
    if handoff is None:
        return session.createDataFrame(data, schema=schema)
    return handoff.frame(session, data, schema)


@timed("read")
def bind_lookups(ctx: QueryContext, session, inputs: list[Input]) -> None:
    """Bind primary-key (and, for recompute, log) inputs as their current content: a primary-key table's
    state (the hot key-value state holds every key), a log table's every row (the lake below the hot log's
    first offsets, then the hot log: retention never hides rows from a recompute)."""
    for inp in inputs:
        user = [f.name for f in struct_of(inp.ddl).fields]
        data = (
            ctx.store.scan(inp.ref) if inp.kind == "primary_key" else ctx.history.rows(inp.ref, columns=user)
        )
        local_df(session, data, inp.ddl, ctx.handoff).createOrReplaceTempView(inp.name)


@timed("read")
def read_batch(ctx: QueryContext, inp: Input, batch_id: int) -> pa.Table | None:
    """The rows of hot table ``inp`` that micro-batch ``batch_id`` covers, read here in the driver.

    The query's ``tidehouse`` source only decides the batch's offsets; its DataFrame is never evaluated. The
    range comes from the checkpoint's offset log (:func:`~runtime.spark.writer.batch_ranges`), so a batch
    Spark replays after a crash reads exactly the rows it read the first time. Measured: reading 1,000 rows
    through the Python data source (a Python worker) and running the SQL costs 2.7x this driver read plus a
    local relation. System columns come along (``__offset``, ``__bucket``, ``__ts``, ``__change``). None when
    the batch covers no rows of ``inp``.
    """
    starts, ends = batch_ranges(ctx.table.checkpoint, batch_id).get(inp.ref, ({}, {}))
    user = [f.name for f in struct_of(inp.ddl).fields]
    parts = []
    for bucket, end in sorted(ends.items(), key=lambda item: int(item[0])):
        start = int(starts.get(bucket, 0))
        if int(end) > start:  # below the hot log's first offset (retention): from the lake
            parts.extend(
                pa.Table.from_batches([b])
                for b in ctx.history.read(inp.ref, int(bucket), start, int(end), columns=user)
            )
    return pa.concat_tables(parts) if parts else None


def read_source(ctx: QueryContext, batch_df, batch_id: int) -> pa.Table:
    """A file source's micro-batch, in the driver: parsed by Arrow when the table has a JSON Lines reader
    and the batch is one it reads as Spark would (:mod:`materializer.jsonlines`), else read by Spark."""
    data, why = None, None
    if ctx.json_reader is not None:
        files = source_files(ctx.table.checkpoint, batch_id)
        if files is None:
            why = "the checkpoint does not list the batch's files"
        else:
            data, why = ctx.json_reader.read(files)
    count_reader(ctx, "arrow" if data is not None else "spark", batch_id, why)
    return data if data is not None else spark_rows(ctx, batch_df, batch_id).toArrow()


def spark_rows(ctx: QueryContext, batch_df, batch_id: int):
    """A file source's micro-batch as Spark reads it: over Tidehouse's listing (whose rows are the batch's
    files) Spark's reader over those files; over Spark's, its batch DataFrame, or those files read by name
    when one is named like a glob pattern (materializer.sources.SparkListed)."""
    return batch_df if ctx.spark_files is None else ctx.spark_files(batch_df, batch_id)


def count_reader(ctx: QueryContext, reader: str, batch_id: int, why: str | None) -> None:
    """Count a file source's batch by the reader that read it (``arrow``, ``spark``); the first batch Spark
    reads in a run that the Arrow reader refused is logged at info with ``why``, later ones at debug."""
    with ctx.stats.lock:
        first = "spark" not in ctx.stats.source_batches
        ctx.stats.source_batches[reader] = ctx.stats.source_batches.get(reader, 0) + 1
    if why:
        level = logging.INFO if first else logging.DEBUG
        log.log(level, "%s: Spark reads batch %d: %s", ctx.table.name, batch_id, why)


def behind_retention(ctx: QueryContext, inp: Input, batch_id: int) -> bool:
    """Whether micro-batch ``batch_id`` starts below the hot log of ``inp`` in some bucket (the query fell
    behind retention): a primary-key input's changelog there is gone (the lake keeps state, not changes)."""
    starts, ends = batch_ranges(ctx.table.checkpoint, batch_id).get(inp.ref, ({}, {}))
    firsts = ctx.store.start_offsets(inp.ref)
    return any(
        int(starts.get(b, 0)) < firsts[int(b)] and int(e) > int(starts.get(b, 0)) for b, e in ends.items()
    )


@timed("sql")
def run_sql(ctx: QueryContext, session) -> pa.Table:
    return session.sql(ctx.table.sql, args=ctx.args).toArrow()


def _begin(ctx: QueryContext, batch_df) -> Any:
    session = batch_df.sparkSession
    if not is_connect(session):  # over Spark Connect the server schedules the batch's jobs
        session.sparkContext.setLocalProperty("spark.scheduler.pool", ctx.pool)
    return session


def _finish(ctx: QueryContext, started: float, rows_in: int, rows_out: int, origin: float | None) -> None:
    with ctx.stats.lock:
        ctx.stats.batches += 1
        ctx.stats.rows_in += rows_in
        ctx.stats.rows_out += rows_out
        ctx.stats.last_batch_time = time.time()
        ctx.stats.last_batch_seconds = time.time() - started
        ctx.stats.last_origin_ts = origin
        ctx.stats.last_rows_out = rows_out


# -- expectations and quarantine --------------------------------------------------------------------
@timed("write")
def write_quarantine(
    ctx: QueryContext, rows: pa.Table, batch_id: int, part: str = "q", *, writer: str | None = None
) -> None:
    """Append a micro-batch's quarantined rows. Each kind of rejection (``part``) is its own idempotent
    writer, derived from the writer of the table's data (``writer``, default the query's): one batch can
    quarantine malformed records, rows lacking a required column and expectation violators, and a second
    write under the same (writer, seq) would be skipped as a replay; a reconcile, which writes under its own
    writer and sequence, must never advance the sequence of the query's quarantine writer."""
    if rows.num_rows == 0 or not ctx.table.quarantine:
        return
    result = ctx.store.write(
        ctx.table.quarantine, rows, writer=f"{writer or ctx.table.writer_id}:{part}", seq=int(batch_id)
    )
    with ctx.stats.lock:
        ctx.stats.quarantined += result.rows


def already_quarantined(ctx: QueryContext) -> set[str]:
    """The raw records this table's expectations quarantined so far (a recomputed table re-evaluates every
    row each micro-batch: a violator it finds again is not quarantined again)."""
    if not ctx.table.quarantine or not ctx.store.has_table(ctx.table.quarantine):
        return set()
    rows = ctx.history.rows(ctx.table.quarantine, columns=["raw", "source"])
    mine = pc.equal(rows.column("source"), ctx.table.name)
    return set(rows.filter(mine).column("raw").to_pylist())


@timed("sql")
def apply_expectations(
    ctx: QueryContext,
    session,
    out: pa.Table,
    batch_id: int,
    *,
    writer: str | None = None,
    whole_result: bool = False,
) -> tuple[pa.Table, pa.Table]:
    """Split output rows into (kept, violating); quarantine/count the violators, or fail the flow.

    ``whole_result``: ``out`` is the table's whole result (``recompute``), which holds the violators found by
    earlier micro-batches again. Then a row is counted once per run (the run's figures) and quarantined once
    ever (rows already in the quarantine table are not written again); ``writer`` is the writer of the data
    (a reconcile has its own), whose sequence the quarantine writer follows."""
    expect = ctx.table.expect
    if not expect or out.num_rows == 0:
        return out, out.slice(0, 0)
    passed = (
        local_df(session, out, ctx.table.ddl, ctx.handoff).selectExpr(*expectation_exprs(expect)).toArrow()
    )
    found = split_expectations(ctx.table.name, out, passed, expect)
    if not found.raws:
        return found.kept, found.violators
    new = [True] * len(found.raws)
    if whole_result:  # counted once per run: only violators this run has not seen yet
        new = [r not in ctx.seen_violators for r in found.raws]
        ctx.seen_violators.update(found.raws)
    record_violations(ctx, found, new)
    raw = [r for r, q in zip(found.raws, found.quarantine) if q]
    why = [r for r, q in zip(found.reasons, found.quarantine) if q]
    if whole_result and raw:  # quarantined once ever, whichever run or reconcile found it first
        done = already_quarantined(ctx)
        keep = [i for i, r in enumerate(raw) if r not in done]
        raw, why = [raw[i] for i in keep], [why[i] for i in keep]
    write_quarantine(ctx, quarantine_rows(raw, why, ctx.table.name), batch_id, part="qe", writer=writer)
    return found.kept, found.violators


def record_violations(ctx: QueryContext, found: Violations, new: Sequence[bool]) -> None:
    """Count the ``new`` violators of a batch in the run's figures: per expectation, and dropped."""
    with ctx.stats.lock:
        for name, count in found.counts.items():
            ctx.stats.expectations[name] = ctx.stats.expectations.get(name, 0) + count
        ctx.stats.dropped += sum(1 for n, q in zip(new, found.quarantine) if n and not q)


@timed("write")
def _write(ctx: QueryContext, data: pa.Table, batch_id: int, origin: float | None, writer: str | None = None):
    if data.num_rows == 0:
        return
    prepared = prepare(ctx.store, ctx.table.name, data)
    ctx.store.write(
        ctx.table.name, prepared, writer=writer or ctx.table.writer_id, seq=int(batch_id), origin_ts=origin
    )


def _upserts_and_deletes(ctx: QueryContext, session, out: pa.Table, batch_id: int) -> pa.Table:
    """For primary-key outputs: kept rows upsert, rows violating an expectation delete their key."""
    kept, violators = apply_expectations(ctx, session, out, batch_id)
    meta = ctx.store.get_table(ctx.table.name)
    parts = []
    if violators.num_rows:
        parts.append(keys_table(meta.schema, violators, ctx.table.primary_key, DELETE))
    if kept.num_rows:
        parts.append(keys_table(meta.schema, kept, ctx.table.primary_key, UPDATE_AFTER))
    return (
        pa.concat_tables(parts)
        if parts
        else keys_table(meta.schema, out.slice(0, 0), ctx.table.primary_key, UPDATE_AFTER)
    )


def _quarantine_source(ctx: QueryContext, source: SourcePlan, data: pa.Table, batch_id: int) -> pa.Table:
    """Quarantine the records that do not parse (verbatim) and those lacking a column the source declares
    NOT NULL (as JSON of the parsed row); each kind is its own idempotent writer. Returns the other rows."""
    data, corrupt = split_corrupt(data, source.name, Malformed.of(source))
    write_quarantine(ctx, corrupt, batch_id)
    data, missing = split_missing(data, source.required, source.name, source.format)
    write_quarantine(ctx, missing, batch_id, part="qn")
    return data


def append_inputs(ctx: QueryContext) -> tuple[Input, list[Input], SourcePlan | None]:
    """An append table's inputs: the one it streams (a source or a log table), its lookups, and the
    streamed source's plan (None for a log table)."""
    stream_input = next(i for i in ctx.table.inputs if i.kind in ("source", "log"))
    lookups = [i for i in ctx.table.inputs if i is not stream_input]
    return stream_input, lookups, _source_of(ctx.flow, stream_input)


# -- strategies -------------------------------------------------------------------------------------
def append_batch(ctx: QueryContext) -> Callable:
    """Stateless SQL over one append-only input (+ lookups): run it over the micro-batch's rows."""
    table = ctx.table
    stream_input, lookups, source = append_inputs(ctx)

    def run(batch_df, batch_id: int) -> None:
        started = time.time()
        session = _begin(ctx, batch_df)
        if source is not None:
            with ctx.clock.phase("read"):
                data = read_source(ctx, batch_df, batch_id)
            rows_in = data.num_rows
            data = _quarantine_source(ctx, source, data, batch_id)
            origin = None
        else:
            data = read_batch(ctx, stream_input, batch_id)
            if data is None:
                return
            rows_in = data.num_rows
            origin = origin_from_checkpoint(ctx.store, table.checkpoint, batch_id)
        if table.passthrough:
            out = conform_to(data, stream_input.ddl)
        else:
            local_df(session, data, stream_input.ddl, ctx.handoff).createOrReplaceTempView(stream_input.name)
            bind_lookups(ctx, session, lookups)
            out = run_sql(ctx, session)
        if table.kind == "primary_key":
            kept, _ = apply_expectations(ctx, session, out, batch_id)
            data_out = kept
        else:
            data_out, _ = apply_expectations(ctx, session, out, batch_id)
        _write(ctx, data_out, batch_id, origin)
        _finish(ctx, started, rows_in, data_out.num_rows, origin)

    return run


def aggregate_batch(ctx: QueryContext) -> Callable:
    """The changed groups of a streaming aggregation (output mode update): upsert them."""

    def run(batch_df, batch_id: int) -> None:
        started = time.time()
        session = _begin(ctx, batch_df)
        with ctx.clock.phase("read"):  # Spark runs the streaming aggregation here
            out = batch_df.toArrow()
        origin = origin_from_checkpoint(ctx.store, ctx.table.checkpoint, batch_id)
        data = _upserts_and_deletes(ctx, session, out, batch_id)
        _write(ctx, data, batch_id, origin)
        _finish(ctx, started, out.num_rows, data.num_rows, origin)

    return run


def changelog_batch(ctx: QueryContext) -> Callable:
    """Stateless SQL following one primary-key table's changelog.

    Per micro-batch: the SQL over every before-image (``-U``/``-D``) gives the rows to delete; the SQL over
    the last after-image of each upstream key whose last event is an upsert gives the rows to upsert.
    Deletes are written before upserts, in one write.
    """
    table = ctx.table
    upstream = table.inputs[0]
    user = [f.name for f in struct_of(upstream.ddl).fields]

    def run(batch_df, batch_id: int) -> None:
        started = time.time()
        session = _begin(ctx, batch_df)
        if behind_retention(ctx, upstream, batch_id):  # resync: recompute from the input's state, then follow
            origin = origin_from_checkpoint(ctx.store, table.checkpoint, batch_id)
            written = recompute(ctx, session, batch_id, writer=None, origin=origin)
            _finish(ctx, started, 0, written, origin)
            return
        data = read_batch(ctx, upstream, batch_id)
        if data is None:
            return
        data = data.sort_by([("__bucket", "ascending"), ("__offset", "ascending")])
        change = data.column(CHANGE)
        before = data.filter(pc.is_in(change, pa.array([UPDATE_BEFORE, DELETE])))
        after = _last_images(data, upstream.primary_key or tuple(user))
        meta = ctx.store.get_table(table.name)
        parts = []
        if before.num_rows:
            local_df(session, before.select(user), upstream.ddl, ctx.handoff).createOrReplaceTempView(
                upstream.name
            )
            gone = run_sql(ctx, session)
            if gone.num_rows:
                parts.append(keys_table(meta.schema, gone, table.primary_key, DELETE))
        if after.num_rows:
            local_df(session, after.select(user), upstream.ddl, ctx.handoff).createOrReplaceTempView(
                upstream.name
            )
            parts.append(_upserts_and_deletes(ctx, session, run_sql(ctx, session), batch_id))
        parts = [p for p in parts if p.num_rows]
        out = pa.concat_tables(parts) if parts else None
        origin = origin_from_checkpoint(ctx.store, table.checkpoint, batch_id)
        if out is not None:
            _write(ctx, out, batch_id, origin)
        _finish(ctx, started, data.num_rows, out.num_rows if out is not None else 0, origin)

    return run


def _last_images(data: pa.Table, key: tuple[str, ...]) -> pa.Table:
    """Per key, the last event of the batch if it is an upsert (``+I``/``+U``)."""
    last: dict[tuple, int] = {}
    key_cols = [data.column(k).to_pylist() for k in key]
    for i, row in enumerate(zip(*key_cols)):
        last[row] = i
    change = data.column(CHANGE).to_pylist()
    keep = sorted(i for i in last.values() if change[i] in (INSERT, UPDATE_AFTER))
    return data.take(pa.array(keep, pa.int64()))


def recompute_batch(ctx: QueryContext) -> Callable:
    """Re-evaluate the SQL over the current state of every input; write the difference."""

    def run(batch_df, batch_id: int) -> None:
        started = time.time()
        session = _begin(ctx, batch_df)
        origin = origin_from_checkpoint(ctx.store, ctx.table.checkpoint, batch_id)
        written = recompute(ctx, session, batch_id, writer=None, origin=origin)
        _finish(ctx, started, 0, written, origin)  # it re-reads its inputs' state: no rows "in"

    return run


def recompute(ctx: QueryContext, session, seq: int, *, writer: str | None, origin: float | None) -> int:
    """One recomputation: returns the number of changed rows written (0 when already equal)."""
    table = ctx.table
    bind_lookups(ctx, session, list(table.inputs))
    result = run_sql(ctx, session)
    kept, _ = apply_expectations(ctx, session, result, seq, writer=writer, whole_result=True)
    out = output_difference(ctx, kept, unique=True)
    if out is None:
        return 0
    with ctx.clock.phase("write"):
        ctx.store.write(table.name, out, writer=writer or table.writer_id, seq=int(seq), origin_ts=origin)
    return out.num_rows


def output_difference(ctx: QueryContext, new: pa.Table, *, unique: bool = False) -> pa.Table | None:
    """The writes that turn the table's current rows into ``new`` (deletes first), or None when equal.
    ``unique``: first check that ``new`` holds one row per primary key (an action's SQL may yield several)."""
    table = ctx.table
    meta = ctx.store.get_table(table.name)
    new = prepare(ctx.store, table.name, new)
    old = ctx.store.scan(table.name).select(meta.schema.names)
    key = ", ".join(f'"{k}"' for k in table.primary_key)
    con = duck.cursor()
    try:
        con.register("new_rows", new)
        con.register("old_rows", old)
        dup = (
            con.execute(
                f"SELECT {key}, count(*) FROM new_rows GROUP BY {key} HAVING count(*) > 1 LIMIT 1"
            ).fetchall()
            if unique
            else None
        )
        if dup:
            raise TidehouseError(
                ErrorCode.PRIMARY_KEY_INVALID,
                f"table {table.name}: the SQL of "
                f"{table.action} yields several rows for primary key {dup[0][:-1]}",
                hint="make the primary key the columns that identify one output row",
            )
        upserts = con.sql("SELECT * FROM new_rows EXCEPT SELECT * FROM old_rows").to_arrow_table()
        deletes = con.sql(f"SELECT {key} FROM old_rows EXCEPT SELECT {key} FROM new_rows").to_arrow_table()
    finally:
        con.close()
    parts = []
    if deletes.num_rows:
        parts.append(keys_table(meta.schema, deletes, table.primary_key, DELETE))
    if upserts.num_rows:
        parts.append(keys_table(meta.schema, upserts, table.primary_key, UPDATE_AFTER))
    return pa.concat_tables(parts) if parts else None


def _source_of(plan: FlowPlan, inp: Input) -> SourcePlan | None:
    if inp.kind != "source":
        return None
    return plan.source(inp.ref.split(":", 1)[1])


def incremental(strategy: str) -> Callable:
    """The batch function of an incremental strategy (materializer/incremental, which imports this module)."""

    def make(ctx: QueryContext) -> Callable:
        from materializer.incremental import batch_function

        return batch_function(strategy)(ctx)

    return make


BATCH_FUNCTIONS = {
    "append": append_batch,
    "aggregate": aggregate_batch,
    "changelog": changelog_batch,
    "topn": incremental("topn"),
    "agg_changelog": incremental("agg_changelog"),
    "agg_log": incremental("agg_log"),
    "join_changelog": incremental("join_changelog"),
    "join_log": incremental("join_log"),
    "recompute": recompute_batch,
}

__all__ = ["BATCH_FUNCTIONS", "SYSTEM_COLUMNS", "QueryContext", "TableStats", "recompute"]
