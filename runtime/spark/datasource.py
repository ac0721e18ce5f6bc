"""The ``tidehouse`` Python data source: Spark batch and streaming reads of a table's whole history.

    spark.dataSource.register(TidehouseDataSource)         # once per session (get_spark does it)
    spark.read.format("tidehouse").load("dwd.events")        # every row: lake snapshot + hot tail
    spark.read.format("tidehouse").load("dws.users")         # a primary-key table's current state
    spark.read.format("tidehouse").load("dwd.events$lake")   # the Iceberg table only
    # the hot changelog, from the first kept offset:
    spark.read.format("tidehouse").load("dws.users$changelog")
    spark.readStream.format("tidehouse").option("startingOffsets", "earliest").load("dwd.events")

The project is found as the CLI finds it (options ``home``/``project``, else ``$TIDEHOUSE_HOME``, else the
project above the current directory); ``root`` reads a bare hot storage root with no lake (see
:mod:`runtime.spark.options`). Other options:

``columns``              comma list of user columns to read (Python data sources get no column-pruning
                         callback: a query that needs two of twenty columns says so here; the lake scan is
                         projected too)
``startingOffsets``      streams: ``earliest`` (default), ``latest``, or JSON per bucket ``{"0": 120}``; only
                         used when the query has no checkpoint yet
``maxRowsPerTrigger``    streams: at most this many rows per micro-batch (spread over buckets)
``maxRowsPerPartition``  split a bucket's range into Spark tasks of at most this many rows (default 500000)
``singlePartitionRows``  read a range of at most this many rows in one task (default 100000)
``systemColumns``        ``true`` (default) adds ``__offset``, ``__bucket``, ``__ts`` (and ``__change`` for
                         primary-key tables); ``false`` reads the user columns only
``idleWaitMs``           streams: a trigger that finds no new rows waits up to this long for them, polling
                         every ``pollMs`` (default 100), instead of ending (:mod:`runtime.spark.idlewait`);
                         ``awakeFile``: while this file exists it does not wait

Streams (see docs/architecture.md, "History"): a **log table** streams its rows by per-bucket offsets; a
range below the hot log's first offset is read from the lake by the task, so a stream from ``earliest``, or
one that fell behind retention, gets every row exactly once. A **primary-key table** streams its changelog;
a stream from ``earliest`` whose start retention deleted begins with the state of a lake snapshot as ``+I``
rows (the snapshot id is in the offset, so a replay reads the same rows), then the changelog after that
snapshot's offsets. A primary-key stream whose checkpointed offsets fell behind retention cannot get the
changes it missed (the lake keeps state, not changes): ``STORAGE_RANGE``, restart it from ``earliest``.
Every offset names the hot table's incarnation: a table rebuilt by ``--full-refresh`` since the stream last
read it is an error naming it, never a silent skip. ``Trigger.AvailableNow`` is supported.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from typing import ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.spark.idlewait import wait_for_rows
from runtime.spark.options import NAME, SourceOptions, cap_rows, make_offset, offset_ends, parse_starting
from runtime.spark.types import arrow_to_spark, conform, spark_to_arrow
from runtime.spark.worker_memory import keep_pandas_out
from runtime.storage.api import BUCKET, CHANGE, OFFSET, TS, TS_TYPE, TableMeta

# Spark unpickles this module first in each of its data-source processes: pandas is made unimportable there
# before any of this package's Arrow calls could import it (~55 MiB per process; see worker_memory)
keep_pandas_out()


def output_schema(
    meta: TableMeta, columns: Sequence[str] | None, system_columns: bool, changelog: bool | None = None
) -> pa.Schema:
    """The Arrow schema a read of ``meta`` yields: the (projected) user columns, then system columns."""
    if columns is not None:
        unknown = [c for c in columns if c not in meta.schema.names]
        if unknown:
            raise TidehouseError(
                ErrorCode.SOURCE_INVALID,
                f"tidehouse source option 'columns': table {meta.name} "
                f"has no column {unknown[0]!r} (columns: {', '.join(meta.schema.names)})",
            )
        fields = [meta.schema.field(c) for c in columns]
    else:
        fields = list(meta.schema)
    if system_columns:
        fields += [pa.field(OFFSET, pa.int64()), pa.field(BUCKET, pa.int32()), pa.field(TS, TS_TYPE)]
        if meta.is_primary_key if changelog is None else changelog:
            fields.append(pa.field(CHANGE, pa.string()))
    # the round trip through Spark's types (e.g. large_string -> string, timestamp[ms] -> [us, UTC])
    return spark_to_arrow(arrow_to_spark(pa.schema(fields)))


class Ranges(InputPartition):
    """One Spark task: ``(bucket, start, end)`` ranges of the log (``end`` None: to the end at read time),
    read after what ``kind`` says comes first: ``"state"`` the state of ``bucket`` (at lake snapshot
    ``snapshot``, or the current state when it is None), ``"lake"`` the whole Iceberg table."""

    def __init__(self, ranges, kind: str = "log", bucket: int = 0, snapshot: int | None = None) -> None:
        self.ranges: tuple[tuple[int, int, int | None], ...] = tuple(tuple(r) for r in ranges)
        self.kind, self.bucket, self.snapshot = kind, bucket, snapshot

    def _key(self) -> tuple:
        return self.ranges, self.kind, self.bucket, self.snapshot

    def __eq__(self, other) -> bool:
        return isinstance(other, Ranges) and other._key() == self._key()

    def __repr__(self) -> str:
        extra = "" if self.kind == "log" else f", {self.kind} bucket={self.bucket} snapshot={self.snapshot}"
        return f"Ranges({list(self.ranges)}{extra})"


def plan_partitions(
    starts: Sequence[int], ends: Sequence[int | None], split: int, single: int
) -> list[Ranges]:
    """Cut per-bucket ranges into tasks: everything in one task when the total is at most ``single``
    rows, else each bucket's range in pieces of at most ``split`` rows."""
    known = [(b, s, e) for b, (s, e) in enumerate(zip(starts, ends)) if e is None or e > s]
    if not known:
        return []
    if all(e is not None for _, _, e in known) and sum(e - s for _, s, e in known) <= single:
        return [Ranges(known)]
    parts = []
    for b, s, e in known:
        if e is None:
            parts.append(Ranges([(b, s, None)]))
            continue
        for lo in range(s, e, split):
            parts.append(Ranges([(b, lo, min(e, lo + split))]))
    return parts


class TidehouseDataSource(DataSource):
    """``format("tidehouse")``: Tidehouse tables as Spark batch and streaming sources."""

    # options a session's registration binds (its project), under the user's
    DEFAULTS: ClassVar[dict[str, str]] = {}

    @classmethod
    def name(cls) -> str:
        return NAME

    @classmethod
    def bound(cls, home: str, project: str) -> type[TidehouseDataSource]:
        """The source with a project's ``home`` and ``project`` as default options: what a session made by
        ``Project.spark()`` registers, so ``spark.read.format("tidehouse").load("dwd.events")`` reads that
        project wherever Spark runs its Python workers."""
        return type("TidehouseDataSource", (cls,), {"DEFAULTS": {"home": home, "project": project}})

    def _parse(self) -> SourceOptions:
        lowered = {str(k).lower() for k in dict(self.options)}
        bare_root = "root" in lowered and not ({"home", "project"} & lowered)
        defaults = {} if bare_root else self.DEFAULTS  # an explicit bare root is not the bound project
        return SourceOptions.parse({**defaults, **dict(self.options)})

    def schema(self) -> StructType:
        opts = self._parse()
        if opts.view == "lake":
            return arrow_to_spark(_lake_schema(opts))
        meta = opts.store().get_table(opts.table)
        changelog = (meta.is_primary_key and opts.view == "changelog") or None
        return arrow_to_spark(output_schema(meta, opts.columns, opts.system_columns, changelog))

    def reader(self, schema: StructType) -> BatchReader:
        return BatchReader(self._parse(), schema)

    def streamReader(self, schema: StructType) -> StreamReader:
        opts = self._parse()
        if opts.view:
            raise TidehouseError(
                ErrorCode.SOURCE_INVALID,
                f"a stream reads {opts.table} itself (its rows or its "
                f"changelog), not {opts.table}${opts.view}",
                location=Location(path=opts.table),
            )
        return StreamReader(opts, schema)


class _Reading:
    """What batch and stream readers share: the requested schema and reading a task's ranges."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.arrow_schema = spark_to_arrow(schema)
        self.table = opts.table

    def meta(self) -> TableMeta:
        return self.opts.store().get_table(self.table)

    @property
    def user_columns(self) -> list[str]:
        names = set(self.meta().schema.names)
        return [n for n in self.arrow_schema.names if n in names]

    def read_ranges(self, partition: Ranges) -> Iterator[pa.RecordBatch]:
        store = self.opts.store()
        history = self.opts.place.history()
        for bucket, start, end in partition.ranges:
            stop = store.end_offsets(self.table)[bucket] if end is None else end
            for batch in history.read(self.table, bucket, start, stop, columns=self.user_columns):
                if batch.num_rows:
                    yield conform(batch, self.arrow_schema)


class BatchReader(_Reading, DataSourceReader):
    """A log table's rows, a primary-key table's state (per bucket), ``$lake`` or ``$changelog``.

    Filters Spark pushes (``pushFilters``, with ``spark.sql.python.filterPushdown.enabled``) prune: equality
    or ``IN`` on the whole bucket key reads only those keys' buckets, and every simple filter on a user column
    goes into the lake scans as an Iceberg row filter (files and row groups pruned by their statistics). Spark
    applies every filter again to what the source returns, so pruning can never change a result.
    """

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        super().__init__(opts, schema)
        self.row_filter = None  # a pyiceberg expression over user columns, or None
        self.buckets: list[int] | None = None  # the only buckets that can hold matching rows

    def pushFilters(self, filters):
        from runtime.spark.pushdown import bucket_keys, iceberg_filter

        filters = list(filters)
        if self.opts.view != "lake":
            meta = self.meta()
            self.row_filter = iceberg_filter(filters, meta)
            self.buckets = bucket_keys(filters, meta)
        return filters  # all of them: Spark re-applies them, the source only prunes

    def partitions(self) -> Sequence[InputPartition]:
        if self.opts.view == "lake":
            return [Ranges([], kind="lake")]
        meta = self.meta()
        store = self.opts.store()
        wanted = range(meta.buckets) if self.buckets is None else self.buckets
        if meta.is_primary_key and self.opts.view != "changelog":
            return [Ranges([], kind="state", bucket=b) for b in wanted]
        starts = store.start_offsets(self.table) if self.opts.view == "changelog" else [0] * meta.buckets
        ends = [e if b in wanted else starts[b] for b, e in enumerate(store.end_offsets(self.table))]
        parts = plan_partitions(
            starts, ends, self.opts.max_rows_per_partition, self.opts.single_partition_rows
        )
        # the last piece of each bucket reads to the end at read time, so a re-executed plan sees new rows
        last: dict[int, int] = {}
        for i, part in enumerate(parts):
            for b, _, _ in part.ranges:
                last[b] = i
        out = [
            Ranges([(b, s, None if last[b] == i else e) for b, s, e in part.ranges])
            for i, part in enumerate(parts)
        ]
        return out or [Ranges([])]

    def read_ranges(self, partition: Ranges) -> Iterator[pa.RecordBatch]:
        if self.row_filter is None:
            yield from super().read_ranges(partition)
            return
        store = self.opts.store()
        history = self.opts.place.history()
        for bucket, start, end in partition.ranges:
            stop = store.end_offsets(self.table)[bucket] if end is None else end
            for batch in history.read(
                self.table, bucket, start, stop, columns=self.user_columns, row_filter=self.row_filter
            ):
                if batch.num_rows:
                    yield conform(batch, self.arrow_schema)

    def read(self, partition: Ranges) -> Iterator[pa.RecordBatch]:
        if partition.kind == "log":
            yield from self.read_ranges(partition)
            return
        history = self.opts.place.history()
        if partition.kind == "lake":  # the Iceberg table as stored
            data = history.lake_rows(_lake_view(self.opts), columns=list(self.arrow_schema.names))
        else:  # one bucket of a primary-key table's current state
            data = history.state(
                self.table,
                columns=self.user_columns,
                bucket=partition.bucket,
                **({"row_filter": self.row_filter} if self.row_filter is not None else {}),
            )
            data = _with_state_columns(data, partition.bucket, self.arrow_schema.names)
        for batch in data.to_batches(max_chunksize=65_536):
            yield conform(batch, self.arrow_schema)


def _nothing_new(starts: Sequence[int], ends: Sequence[int]) -> bool:
    return all(e <= s for s, e in zip(starts, ends))


class StreamReader(_Reading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are per-bucket positions in the table's log (see the module docstring)."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        super().__init__(opts, schema)
        self._until: list[int] | None = None  # Trigger.AvailableNow target

    def initialOffset(self) -> dict:
        meta = self.meta()
        store = self.opts.store()
        return make_offset(
            self.table,
            parse_starting(self.opts.starting, meta, store),
            incarnation=store.incarnation(self.table),
        )

    def getDefaultReadLimit(self):
        if self.opts.max_rows_per_trigger:
            return ReadMaxRows(self.opts.max_rows_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit) -> dict:
        store = self.opts.store()
        meta = self.meta()
        incarnation = self._check_incarnation(start)
        starts = offset_ends(start, meta.buckets)
        ends = list(store.end_offsets(self.table))
        if self.opts.idle_wait_ms and self._until is None and _nothing_new(starts, ends):  # wait for rows
            wait_for_rows(
                lambda: not _nothing_new(starts, store.end_offsets(self.table)),
                wait_s=self.opts.idle_wait_ms / 1000,
                poll_s=self.opts.poll_ms / 1000,
                awake=self.opts.awake_file,
            )
            ends = list(store.end_offsets(self.table))
        if self._until is not None:
            ends = [min(e, u) for e, u in zip(ends, self._until)]
        ends = [max(s, e) for s, e in zip(starts, ends)]
        if isinstance(limit, ReadMaxRows):
            ends = cap_rows(starts, ends, limit.max_rows)
        snapshot = None
        if meta.is_primary_key and not any(starts):  # a stream from the very start of a changelog
            firsts = store.start_offsets(self.table)
            if any(s < f for s, f in zip(starts, firsts)):  # begins with a lake snapshot's state
                view = self.opts.place.history().view(self.table, meta.buckets)
                if view is not None and view.snapshot_id is not None:
                    snapshot = {
                        "id": view.snapshot_id,
                        "offsets": {str(b): o for b, o in enumerate(view.offsets)},
                    }
                    ends = [max(e, o) for e, o in zip(ends, view.offsets)]  # the state is not split
        return make_offset(self.table, ends, incarnation=incarnation, snapshot=snapshot)

    def reportLatestOffset(self) -> dict:
        store = self.opts.store()
        return make_offset(
            self.table, store.end_offsets(self.table), incarnation=store.incarnation(self.table)
        )

    def prepareForTriggerAvailableNow(self) -> None:
        self._until = list(self.opts.store().end_offsets(self.table))

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        meta = self.meta()
        starts, ends = offset_ends(start, meta.buckets), offset_ends(end, meta.buckets)
        snapshot = end.get("snapshot")
        if snapshot is None:
            return plan_partitions(
                starts, ends, self.opts.max_rows_per_partition, self.opts.single_partition_rows
            )
        lake = offset_ends(snapshot, meta.buckets)
        return [
            Ranges(
                [(b, lake[b], ends[b])] if ends[b] > lake[b] else [],
                kind="state",
                bucket=b,
                snapshot=snapshot["id"],
            )  # the state at the snapshot, then the changelog after it
            for b in range(meta.buckets)
        ]

    def read(self, partition: Ranges) -> Iterator[pa.RecordBatch]:
        if partition.kind == "state":
            history = self.opts.place.history()
            view = history.view(self.table, self.meta().buckets, snapshot_id=partition.snapshot)
            state = history.bootstrap(self.table, partition.bucket, view, columns=self.user_columns)
            for batch in state.to_batches(max_chunksize=65_536):
                yield conform(batch, self.arrow_schema)
        yield from self.read_ranges(partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: hot log retention is driven by tiering, not by readers."""

    def stop(self) -> None:
        """Spark's source runner calls this as its loop ends, which only an exception ends: ``EOFError`` when
        the JVM closed the runner's socket (the query stopped). The runner then writes that "error" back to
        the closed socket and, when the JVM already went, Python prints the ``BrokenPipeError``'s traceback
        on the terminal of ``flow trigger`` — a race between Spark's close and the SIGTERM that follows it.
        After an EOF there is nobody left to tell anything, so this process's stderr goes to /dev/null; any
        other error still reaches the JVM (and the user) through the socket as before."""
        if isinstance(sys.exc_info()[1], EOFError):
            silent = os.open(os.devnull, os.O_WRONLY)
            os.dup2(silent, 2)
            os.close(silent)

    def _check_incarnation(self, start: dict) -> str:
        current = self.opts.store().incarnation(self.table)
        seen = start.get("incarnation")
        if seen and seen != current:
            raise TidehouseError(
                ErrorCode.PLAN_CHANGED,
                f"{self.table} was rebuilt (e.g. by --full-refresh) since this stream last read it: its "
                "offsets name rows that no longer exist",
                location=Location(path=self.table),
                hint="rebuild what reads it too (tidehouse flow trigger FLOW --full-refresh TABLE+), or "
                "restart the stream with a new checkpoint",
            )
        return current


def _with_state_columns(state: pa.Table, bucket: int, names: Sequence[str]) -> pa.Table:
    """A primary-key state read as rows of the table: ``+I``, its bucket, no offset or time."""
    n = state.num_rows
    extra = {
        OFFSET: pa.nulls(n, pa.int64()),
        BUCKET: pa.array([bucket] * n, pa.int32()),
        TS: pa.nulls(n, TS_TYPE),
        CHANGE: pa.array(["+I"] * n, pa.string()),
    }
    for name, values in extra.items():
        if name in names:
            state = state.append_column(name, values)
    return state


def _lake_view(opts: SourceOptions):
    view = opts.place.history().view(opts.table)
    if view is None:
        raise TidehouseError(
            ErrorCode.TABLE_UNKNOWN,
            f"{opts.table} has no lake table yet",
            location=Location(path=opts.table),
            hint="run `tidehouse tier run` first",
        )
    return view


def _lake_schema(opts: SourceOptions) -> pa.Schema:
    """The Iceberg table's columns as stored (the kept ``__`` columns too), projected to ``columns``."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    schema = schema_to_pyarrow(_lake_view(opts).table.schema(), include_field_ids=False)
    if opts.columns:
        schema = pa.schema([schema.field(c) for c in opts.columns])
    return schema
