"""The executor data path: a micro-batch read, transformed and written by Spark tasks (docs/architecture.md,
"Two data paths").

The driver builds one Spark plan per micro-batch: the batch's DataFrame (the ``tidehouse`` source's ranges or
the file source's splits, read by tasks), the action's SQL over it, the expectations as boolean columns, then
:func:`write_routed`: a Python pass (:class:`Tag`) adds each row's bucket (THE bucket function) and its
position (a one-bucket table needs no pass: bucket 0, Spark's ``monotonically_increasing_id``), the rows are
repartitioned by bucket — a primary-key table's sorted back into batch order —, and a second pass
(:class:`WriteTask`) writes the buckets each task holds with the query's writer id and ``seq = batch id``.
Every bucket of a batch is written by exactly one task: a retried task skips what it committed, a replayed
batch skips everything, on either path. The tasks return counts and the rows to quarantine; the driver
writes the quarantine and records the figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from materializer.analyze import struct_of
from materializer.jsonlines import JsonLinesReader
from materializer.plan import Expectation, SourcePlan
from materializer.rows import (
    CORRUPT,
    Violations,
    expectation_exprs,
    keys_table,
    quarantine_rows,
    split_corrupt,
    split_expectations,
    split_missing,
)
from materializer.strategies import (
    QueryContext,
    _begin,
    _finish,
    append_inputs,
    behind_retention,
    count_reader,
    incremental,
    record_violations,
    write_quarantine,
)
from runtime.spark.filelog import source_files
from runtime.spark.options import Place
from runtime.spark.session import is_connect
from runtime.spark.writer import batch_ranges, origin_from_checkpoint, prepare
from runtime.storage.api import BUCKET, CHANGE, DELETE, INSERT, OFFSET, UPDATE_AFTER, UPDATE_BEFORE, bucket_of

ORDER, SEQ = "__order", "__seq"  # the rows' order within a bucket: deletes first, then batch order
_ROW = "__row"  # a row's index in a write task's rows
RESULT = "kind string, bucket int, n long, raw string, reason string, name string"
_FLAGS = "e"  # expectation columns e0, e1, ...


@dataclass(frozen=True)
class Tag:
    """``mapInArrow``: each row's bucket and its position in the batch (task number, row number)."""

    bucket_key: tuple[str, ...]
    buckets: int

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        base = TaskContext.get().partitionId() << 36
        for batch in batches:
            buckets = bucket_of(batch, list(self.bucket_key), self.buckets)
            seq = pa.array(range(base, base + batch.num_rows), pa.int64())
            base += batch.num_rows
            yield batch.append_column(BUCKET, buckets).append_column(SEQ, seq)


@dataclass(frozen=True)
class SourceCheck:
    """In a write task of a pass-through table over a source: the records that did not parse (``q``) and
    those lacking a column the source declares NOT NULL (``qn``) leave the rows, as the driver path's
    quarantine rows, returned to the driver (rare, small) — one pass over the source, no cached copy."""

    name: str
    format: str
    required: tuple[str, ...]

    def split(self, data: pa.Table, flags: list[str], out: list[dict]) -> pa.Table:
        """``data`` without the quarantined records, which go to ``out``."""
        view = data.drop_columns(flags).append_column(_ROW, pa.array(range(data.num_rows), pa.int64()))
        view, corrupt = split_corrupt(view, self.name, self.format)
        view, missing = split_missing(view, self.required, self.name, self.format)
        for part, found in (("q", corrupt), ("qn", missing)):
            out += [
                {"kind": f"source:{part}", "raw": raw, "reason": why, "n": 1}
                for raw, why in zip(found.column("raw").to_pylist(), found.column("reason").to_pylist())
            ]
        kept = data.take(view.column(_ROW)) if view.num_rows < data.num_rows else data
        return kept.drop_columns([CORRUPT]) if CORRUPT in kept.column_names else kept


@dataclass(frozen=True)
class WriteTask:
    """``mapInArrow`` over rows routed by bucket: write them, return counts and the rows to quarantine."""

    place: Place
    table: str
    writer: str
    seq: int
    origin: float | None
    primary_key: tuple[str, ...]
    expect: tuple[Expectation, ...]
    source: SourceCheck | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        batches = [b for b in batches if b.num_rows]
        if not batches:  # a partition the shuffle left without rows
            return
        data = pa.Table.from_batches(batches)
        store = self.place.store()
        meta = store.get_table(self.table)
        flags = [c for c in data.column_names if c.startswith(_FLAGS) and c[1:].isdigit()]
        out: list[dict[str, Any]] = [{"kind": "received", "n": data.num_rows}]
        if self.source is not None:  # records that do not parse or lack a column: to the driver's quarantine
            data = self.source.split(data, flags, out)
        rows = data.drop_columns([c for c in (*flags, ORDER, SEQ) if c in data.column_names])
        if self.expect:
            rows = self._expectations(meta, rows, data.select(flags), out)
        if rows.num_rows:
            result = store.write(
                self.table,
                prepare(store, self.table, rows),
                writer=self.writer,
                seq=self.seq,
                origin_ts=self.origin,
            )
            out += [{"kind": "written", "bucket": b, "n": hi - lo} for b, (lo, hi) in result.ranges.items()]
            if result.skipped:
                out.append({"kind": "skipped", "n": rows.num_rows})
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=_result_schema())

    def _expectations(self, meta, rows: pa.Table, passed: pa.Table, out: list[dict]) -> pa.Table:
        """Rows of a batch after its table's expectations: violators dropped or quarantined (returned to the
        driver) — for a primary-key table, a violating upsert deletes its key instead."""
        upserts = (
            pc.invert(pc.is_in(rows.column(CHANGE), pa.array([DELETE, UPDATE_BEFORE])))
            if CHANGE in rows.column_names
            else None
        )
        checked = rows if upserts is None else rows.filter(upserts)
        found = split_expectations(
            self.table, checked, passed if upserts is None else passed.filter(upserts), self.expect
        )
        for raw, reason, to_quarantine in zip(found.raws, found.reasons, found.quarantine):
            out.append({"kind": "violator", "raw": raw, "reason": reason, "n": int(to_quarantine)})
        out += [{"kind": "violation", "name": name, "n": n} for name, n in found.counts.items()]
        if not found.raws:
            return rows
        kept = found.kept
        if self.primary_key:  # an upsert that violates deletes its key (as on the driver path)
            user = [c for c in rows.column_names if c != CHANGE]
            deletes = rows.filter(pc.invert(upserts)) if upserts is not None else None
            parts = [deletes] if deletes is not None and deletes.num_rows else []
            parts.append(keys_table(meta.schema, found.violators.select(user), self.primary_key, DELETE))
            parts.append(
                kept
                if CHANGE in kept.column_names
                else keys_table(meta.schema, kept, self.primary_key, UPDATE_AFTER)
            )
            return pa.concat_tables([p.select(parts[-1].column_names).cast(parts[-1].schema) for p in parts])
        return kept


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
            refused = {"kind": "refused", "reason": why, "n": 0}
            yield pa.RecordBatch.from_pylist([refused], schema=_result_schema())
            return
        if self.change:
            data = data.append_column(CHANGE, pa.array([self.change] * data.num_rows, pa.string()))
        yield from self.write(iter(data.to_batches()))


def _result_schema() -> pa.Schema:
    return pa.schema(
        [
            ("kind", pa.string()),
            ("bucket", pa.int32()),
            ("n", pa.int64()),
            ("raw", pa.string()),
            ("reason", pa.string()),
            ("name", pa.string()),
        ]
    )


def write_routed(
    ctx: QueryContext,
    df,
    batch_id: int,
    origin: float | None,
    *,
    deletes_first: bool = False,
    writer: str | None = None,
    expect: bool = True,
    source: SourceCheck | None = None,
) -> Routed:
    """Write the rows of ``df`` (the table's user columns, and ``__change`` for a primary-key table) from
    Spark tasks routed by bucket. ``deletes_first``: ``df`` has an ``__order`` column (0 for deletes) that
    orders each bucket's rows before batch order. ``expect``: check the table's expectations here (a
    recompute checked them on its whole result already). ``source``: ``df`` is a source's records with its
    corrupt-record column, quarantined by the tasks."""
    from pyspark.sql.types import IntegerType, LongType, StructField, StructType

    table = ctx.table
    meta = ctx.store.get_table(table.name)
    expectations = tuple(table.expect) if expect else ()
    if expectations:
        df = df.selectExpr("*", *expectation_exprs(expectations))
    key = meta.effective_bucket_key
    if meta.buckets <= 1 or not key:  # every row in bucket 0: no Python pass to compute it
        from pyspark.sql import functions as F

        tagged = df.withColumn(BUCKET, F.lit(0)).withColumn(SEQ, F.monotonically_increasing_id())
    else:
        tagged = df.mapInArrow(
            Tag(tuple(key), meta.buckets),
            StructType(
                [
                    *df.schema.fields,
                    StructField(BUCKET, IntegerType(), False),
                    StructField(SEQ, LongType(), False),
                ]
            ),
        )
    parts = max(1, min(meta.buckets, int(ctx.spark_partitions)))
    routed = tagged.repartition(parts, BUCKET)
    if meta.is_primary_key:  # rows of a key apply in batch order (deletes first): the last one wins
        routed = routed.sortWithinPartitions(BUCKET, *((ORDER,) if deletes_first else ()), SEQ)
    task = WriteTask(
        ctx.place,
        table.name,
        writer or table.writer_id,
        int(batch_id),
        origin,
        tuple(table.primary_key),
        expectations,
        source,
    )
    with ctx.clock.phase("write"):
        results = routed.drop(BUCKET).mapInArrow(task, RESULT).collect()
    return _record(ctx, results, batch_id, writer, source)


@dataclass(frozen=True)
class Routed:
    """What the write tasks of a batch did: rows they received and rows they wrote."""

    received: int
    written: int


def _record(
    ctx: QueryContext, results, batch_id: int, writer: str | None, source: SourceCheck | None = None
) -> Routed:
    """The tasks' report: quarantine the violators and the source records that failed (driver, as the driver
    path does), count the rest."""
    written, received, counts, raws, reasons, quarantined = 0, 0, {}, [], [], []
    records: dict[str, tuple[list[str], list[str]]] = {"q": ([], []), "qn": ([], [])}
    for r in results:
        if r.kind == "received":
            received += r.n
        elif r.kind.startswith("source:"):
            records[r.kind.split(":", 1)[1]][0].append(r.raw)
            records[r.kind.split(":", 1)[1]][1].append(r.reason)
        elif r.kind == "written":
            written += r.n
        elif r.kind == "violation":
            counts[r.name] = counts.get(r.name, 0) + r.n
        elif r.kind == "violator":
            raws.append(r.raw)
            reasons.append(r.reason)
            quarantined.append(bool(r.n))
    if raws:
        found = Violations(pa.table({}), pa.table({}), raws, reasons, quarantined, counts)
        record_violations(ctx, found, [True] * len(raws))
        to_quarantine = [(r, why) for r, why, q in zip(raws, reasons, quarantined) if q]
        write_quarantine(
            ctx,
            quarantine_rows([r for r, _ in to_quarantine], [w for _, w in to_quarantine], ctx.table.name),
            batch_id,
            part="qe",
            writer=writer,
        )
    if source is not None:  # the same writers and reasons as the driver path's quarantine of a source
        for part, (raw, why) in records.items():
            write_quarantine(ctx, quarantine_rows(raw, why, source.name), batch_id, part=part)
    return Routed(received, written)


def _user(df, ddl: str):
    return df.select(*[f"`{f.name}`" for f in struct_of(ddl).fields])


def _view(session, df, name: str) -> None:
    df.createOrReplaceTempView(name)


def _table(ctx: QueryContext, session, name: str):
    """A table as a DataFrame read by tasks: a log table's rows, a primary-key table's state."""
    reader = session.read.format("tidehouse").option("systemColumns", "false")
    config = ctx.place.config
    if config is not None:
        reader = reader.option("home", str(config.home)).option("project", str(config.project_dir))
    else:
        reader = reader.option("root", ctx.place.root)
    return reader.load(name)


def _lookups(ctx: QueryContext, session, inputs) -> None:
    """Primary-key inputs as their state, read by tasks."""
    for inp in inputs:
        _view(session, _user(_table(ctx, session, inp.ref), inp.ddl), inp.name)


# -- strategies ---------------------------------------------------------------------------------------------
def append_batch(ctx: QueryContext) -> Callable:
    """Stateless SQL over one append-only input (+ lookups), in Spark; rows written by tasks."""
    table = ctx.table
    stream_input, lookups, source = append_inputs(ctx)

    def run(batch_df, batch_id: int) -> None:
        started = time.time()
        session = _begin(ctx, batch_df)
        cached, check, rows_in, origin = None, None, 0, None
        if source is not None and table.passthrough and ctx.json_reader is not None and not table.expect:
            routed = _ingest_with_arrow(ctx, session, source, batch_id)
            if routed is not None:
                _finish(ctx, started, routed.received, routed.written, None)
                return
        elif source is not None:
            count_reader(ctx, "spark", batch_id, None)
        if source is not None and table.passthrough:  # one pass: the write tasks quarantine what fails
            check = SourceCheck(source.name, source.format, tuple(source.required))
            good = batch_df.select(
                *[f"`{c}`" for c in batch_df.columns if c in _names(stream_input.ddl) or c == CORRUPT]
            )
        elif source is not None:  # SQL over the records that parse: the others quarantined first
            cached = batch_df.persist()
            good, rows_in = _source_rows(ctx, source, cached, batch_id)
        else:
            rows_in = _range_rows(ctx, stream_input, batch_id)
            if not rows_in:
                return
            good = batch_df
            origin = origin_from_checkpoint(ctx.store, table.checkpoint, batch_id)
        try:
            if check is not None:
                out = good
            elif table.passthrough:
                out = _user(good, stream_input.ddl)
            else:
                _view(session, _user(good, stream_input.ddl), stream_input.name)
                _lookups(ctx, session, lookups)
                out = session.sql(table.sql, args=ctx.args)
            if table.kind == "primary_key":
                out = out.selectExpr("*", f"'{UPDATE_AFTER}' AS `{CHANGE}`")
            routed = write_routed(ctx, out, batch_id, origin, source=check)
        finally:
            if cached is not None:
                cached.unpersist()
        _finish(ctx, started, routed.received if check is not None else rows_in, routed.written, origin)

    return run


def _ingest_with_arrow(ctx: QueryContext, session, source: SourcePlan, batch_id: int) -> Routed | None:
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
    return _record(ctx, results, batch_id, None, check)


def _names(ddl: str) -> set[str]:
    return {f.name for f in struct_of(ddl).fields}


def _source_rows(ctx: QueryContext, source, batch_df, batch_id: int) -> tuple[Any, int]:
    """(the rows that parse and have every required column, how many records came in): the others are
    collected and quarantined here, with the same writers and reasons as on the driver path."""
    checks = [f"`{c}` IS NOT NULL" for c in source.required if c in batch_df.columns]
    if CORRUPT in batch_df.columns:
        checks.insert(0, f"`{CORRUPT}` IS NULL")
    fine = " AND ".join(checks) or "true"
    bad = batch_df.where(f"NOT ({fine})").toArrow()
    data, corrupt = split_corrupt(bad, source.name, source.format)
    write_quarantine(ctx, corrupt, batch_id)
    _, missing = split_missing(data, source.required, source.name, source.format)
    write_quarantine(ctx, missing, batch_id, part="qn")
    good = batch_df.where(fine)
    if CORRUPT in good.columns:
        good = good.drop(CORRUPT)
    return good, batch_df.count()  # every record that came in (batch_df is cached)


def _range_rows(ctx: QueryContext, inp, batch_id: int) -> int:
    starts, ends = batch_ranges(ctx.table.checkpoint, batch_id).get(inp.ref, ({}, {}))
    return sum(max(0, int(e) - int(starts.get(b, 0))) for b, e in ends.items())


def aggregate_batch(ctx: QueryContext) -> Callable:
    """The changed groups of a streaming aggregation (output mode update), upserted by tasks."""

    def run(batch_df, batch_id: int) -> None:
        started = time.time()
        _begin(ctx, batch_df)
        origin = origin_from_checkpoint(ctx.store, ctx.table.checkpoint, batch_id)
        out = batch_df.selectExpr("*", f"'{UPDATE_AFTER}' AS `{CHANGE}`")
        written = write_routed(ctx, out, batch_id, origin).written
        _finish(ctx, started, written, written, origin)

    return run


def changelog_batch(ctx: QueryContext) -> Callable:
    """Stateless SQL following one primary-key table's changelog, in Spark: the SQL over the before-images
    gives the keys to delete, the SQL over each key's last after-image the rows to upsert; deletes first."""
    table = ctx.table
    upstream = table.inputs[0]
    key = upstream.primary_key or tuple(f.name for f in struct_of(upstream.ddl).fields)

    def run(batch_df, batch_id: int) -> None:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        started = time.time()
        session = _begin(ctx, batch_df)
        origin = origin_from_checkpoint(ctx.store, table.checkpoint, batch_id)
        if behind_retention(ctx, upstream, batch_id):  # resync: recompute from the input's state, then follow
            written = recompute_distributed(ctx, session, batch_id, origin=origin)
            _finish(ctx, started, 0, written, origin)
            return
        rows_in = _range_rows(ctx, upstream, batch_id)
        if not rows_in:
            return
        events = batch_df.persist()
        try:
            before = events.where(F.col(CHANGE).isin(UPDATE_BEFORE, DELETE))
            _view(session, _user(before, upstream.ddl), upstream.name)
            gone = session.sql(table.sql, args=ctx.args).select(*[f"`{k}`" for k in table.primary_key])
            gone = gone.selectExpr("*", f"'{DELETE}' AS `{CHANGE}`", f"0 AS `{ORDER}`")
            if is_connect(session):  # a Connect plan names the view, resolved when it runs: after the next
                # line rebinds it to the after-images (no deletes at all). So the keys to delete (O(change))
                # come here first; a localCheckpoint would lose them with an executor.
                keys = gone.toArrow()
                gone = session.createDataFrame(keys) if keys.num_rows else gone.limit(0)  # no rows either way
            last = Window.partitionBy(*[f"`{k}`" for k in key]).orderBy(
                F.col(BUCKET).desc(), F.col(OFFSET).desc()
            )
            after = events.withColumn("__last", F.row_number().over(last)).where(
                (F.col("__last") == 1) & F.col(CHANGE).isin(INSERT, UPDATE_AFTER)
            )
            _view(session, _user(after, upstream.ddl), upstream.name)
            kept = session.sql(table.sql, args=ctx.args)
            kept = kept.selectExpr("*", f"'{UPDATE_AFTER}' AS `{CHANGE}`", f"1 AS `{ORDER}`")
            out = kept.unionByName(gone, allowMissingColumns=True)
            written = write_routed(ctx, out, batch_id, origin, deletes_first=True).written
        finally:
            events.unpersist()
        _finish(ctx, started, rows_in, written, origin)

    return run


def recompute_batch(ctx: QueryContext) -> Callable:
    """Re-evaluate the SQL over the current state of every input, in Spark; tasks write the difference."""

    def run(batch_df, batch_id: int) -> None:
        started = time.time()
        session = _begin(ctx, batch_df)
        origin = origin_from_checkpoint(ctx.store, ctx.table.checkpoint, batch_id)
        written = recompute_distributed(ctx, session, batch_id, origin=origin)
        _finish(ctx, started, 0, written, origin)

    return run


def recompute_distributed(
    ctx: QueryContext, session, seq: int, *, origin: float | None, writer: str | None = None
) -> int:
    """One recomputation in Spark: the result's rows that are new or changed upsert, the keys it no longer
    has delete. Expectations: as the driver path's whole-result check (violators found again are counted
    once per run and quarantined once ever), so their rows are collected — they are few by nature."""
    table = ctx.table
    for inp in table.inputs:
        _view(session, _user(_table(ctx, session, inp.ref), inp.ddl), inp.name)
    new = session.sql(table.sql, args=ctx.args)
    if table.expect:
        from materializer.strategies import apply_expectations

        flags = new.selectExpr("*", *expectation_exprs(table.expect))
        clean = " AND ".join(f"`e{i}`" for i in range(len(table.expect)))
        bad = flags.where(f"NOT ({clean})").drop(*[f"e{i}" for i in range(len(table.expect))]).toArrow()
        if bad.num_rows:
            apply_expectations(ctx, session, bad, seq, writer=writer, whole_result=True)
        new = flags.where(clean).drop(*[f"e{i}" for i in range(len(table.expect))])
    old = _table(ctx, session, table.name)
    cols = [f"`{c}`" for c in old.columns]
    keys = [f"`{k}`" for k in table.primary_key]
    new = new.select(*cols)
    dup = new.groupBy(*keys).count().where("count > 1").limit(1).collect()
    if dup:
        from runtime.core.errors import ErrorCode, TidehouseError

        raise TidehouseError(
            ErrorCode.PRIMARY_KEY_INVALID,
            f"table {table.name}: the SQL of {table.action} yields several rows for primary key "
            f"{tuple(dup[0])[:-1]}",
            hint="make the primary key the columns that identify one output row",
        )
    upserts = new.exceptAll(old).selectExpr("*", f"'{UPDATE_AFTER}' AS `{CHANGE}`", f"1 AS `{ORDER}`")
    deletes = (
        old.select(*keys)
        .exceptAll(new.select(*keys))
        .selectExpr("*", f"'{DELETE}' AS `{CHANGE}`", f"0 AS `{ORDER}`")
    )
    out = upserts.unionByName(deletes, allowMissingColumns=True)
    return write_routed(ctx, out, seq, origin, deletes_first=True, writer=writer, expect=False).written


def _probe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """On an executor: which tidehouse and which Python run there (importing this module is the test)."""
    import sys

    import runtime

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pylist(
        [{"version": runtime.__version__, "python": f"{sys.version_info[0]}.{sys.version_info[1]}"}]
    )


def check_executors(spark, probe: Callable = _probe) -> None:
    """Fail before any query starts when the executors cannot run the data path: tidehouse missing there,
    another version of it, or another Python (Spark refuses mixed minor versions too, with a traceback)."""
    import sys

    import runtime
    from runtime.core.errors import ErrorCode, TidehouseError

    here = {"version": runtime.__version__, "python": f"{sys.version_info[0]}.{sys.version_info[1]}"}
    hint = (
        f"install the same tidehouse (pip install tidehouse=={runtime.__version__}) with its dependencies on "
        "every worker, for the Python Spark's workers run (PYSPARK_PYTHON), or set materializer.data_path: "
        "driver"
    )
    try:
        rows = spark.range(1, numPartitions=1).mapInArrow(probe, "version string, python string").collect()
    except Exception as exc:  # noqa: BLE001 - Spark wraps the worker's ImportError in its own exceptions
        text = str(exc)
        first = next((line for line in text.splitlines() if "Error" in line), text.splitlines()[0])
        raise TidehouseError(
            ErrorCode.SPARK_START,
            f"the executors cannot run tidehouse's data path: {first.strip()[:300]}",
            hint=hint,
        ) from None
    there = rows[0].asDict()
    if there != here:
        raise TidehouseError(
            ErrorCode.SPARK_START,
            f"the executors run tidehouse {there['version']} on Python {there['python']}, this driver "
            f"tidehouse {here['version']} on Python {here['python']}",
            hint=hint,
        )


EXECUTOR_FUNCTIONS = {
    "append": append_batch,
    "aggregate": aggregate_batch,
    "changelog": changelog_batch,
    # the incremental strategies move O(change) rows: the same function as on the driver path
    "topn": incremental("topn"),
    "agg_changelog": incremental("agg_changelog"),
    "agg_log": incremental("agg_log"),  # planned for the driver path only: it reads the batch's rows here
    "join_changelog": incremental("join_changelog"),
    "join_log": incremental("join_log"),  # the log's new rows pass through this process (O(batch))
    "recompute": recompute_batch,
}
