"""The executor data path: a micro-batch read, transformed and written by Spark tasks (docs/architecture.md,
"Two data paths").

The driver builds one Spark plan per micro-batch: the batch's DataFrame (the ``tidehouse`` source's ranges or
the file source's splits, read by tasks), the action's SQL over it, the expectations as boolean columns, then
:func:`materializer.routing.write_routed`: rows routed by bucket to the tasks that write them, each bucket of
a batch by exactly one task under the query's writer id and ``seq = batch id``. A pass-through table over a
JSON source is read and written by one task instead (:mod:`materializer.ingest`); a ``join_log`` table's
log rows by the tasks of :mod:`materializer.incremental.joinlog`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from materializer.analyze import struct_of
from materializer.ingest import ingest_with_arrow
from materializer.malformed import Malformed
from materializer.routing import ORDER, SourceCheck, write_routed
from materializer.rows import CORRUPT, FILE, expectation_exprs, split_corrupt, split_missing
from materializer.strategies import (
    QueryContext,
    _begin,
    _finish,
    append_inputs,
    behind_retention,
    count_reader,
    incremental,
    spark_rows,
    write_quarantine,
)
from runtime.spark.session import is_connect
from runtime.spark.writer import batch_rows, origin_from_checkpoint
from runtime.storage.api import BUCKET, CHANGE, DELETE, INSERT, OFFSET, UPDATE_AFTER, UPDATE_BEFORE


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
            routed = ingest_with_arrow(ctx, session, source, batch_id)
            if routed is not None:
                _finish(ctx, started, routed.received, routed.written, None)
                return
        elif source is not None:
            count_reader(ctx, "spark", batch_id, None)
        if source is not None:
            batch_df = spark_rows(ctx, batch_df, batch_id)
        if source is not None and table.passthrough:  # one pass: the write tasks quarantine what fails
            check = SourceCheck.of(source)
            good = batch_df.select(
                *[f"`{c}`" for c in batch_df.columns if c in _names(stream_input.ddl) or c in (CORRUPT, FILE)]
            )
        elif source is not None:  # SQL over the records that parse: the others quarantined first
            cached = batch_df.persist()
            good, rows_in = _source_rows(ctx, source, cached, batch_id)
        else:
            rows_in = batch_rows(ctx.table.checkpoint, batch_id, stream_input.ref)
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
    data, corrupt = split_corrupt(bad, source.name, Malformed.of(source))
    write_quarantine(ctx, corrupt, batch_id)
    _, missing = split_missing(data, source.required, source.name, source.format)
    write_quarantine(ctx, missing, batch_id, part="qn")
    good = batch_df.where(fine)
    good = good.drop(*[c for c in (CORRUPT, FILE) if c in good.columns])
    return good, batch_df.count()  # every record that came in (batch_df is cached)


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
        rows_in = batch_rows(ctx.table.checkpoint, batch_id, upstream.ref)
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


def _join_log(ctx: QueryContext) -> Callable:
    """``join_log``: the log's new rows read, joined and written by tasks where
    :func:`~materializer.incremental.joinlog.in_tasks` says so (every join but one that keeps the primary-key
    input's unmatched rows over a filtered log), else the driver path's function."""
    from materializer.incremental.joinlog import in_tasks, join_log_batch

    return join_log_batch(ctx) if in_tasks(ctx.table) else incremental("join_log")(ctx)


EXECUTOR_FUNCTIONS = {
    "append": append_batch,
    "aggregate": aggregate_batch,
    "changelog": changelog_batch,
    # the incremental strategies move O(change) rows: the same function as on the driver path
    "topn": incremental("topn"),
    "agg_changelog": incremental("agg_changelog"),
    "agg_log": incremental("agg_log"),  # planned for the driver path only: it reads the batch's rows here
    "join_changelog": incremental("join_changelog"),
    "join_log": _join_log,  # the log's new rows in tasks where it applies (materializer.incremental.joinlog)
    "recompute": recompute_batch,
}
