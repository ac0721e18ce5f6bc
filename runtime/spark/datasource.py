"""The ``tidehouse`` Python data source: streaming and batch reads of hot tables.

    spark.readStream.format("tidehouse").option("root", root).option("table", "dwd.clicks").load()
    spark.read.format("tidehouse").option("root", root).option("table", "dws.users").load()

Options:

``root``                 storage root (required)
``table``                ``layer.name`` (required)
``columns``              comma list of user columns to read (Python data sources get no column-pruning
                         callback, so a query that needs two of twenty columns says so here)
``startingOffsets``      ``earliest`` (default), ``latest``, or JSON per bucket ``{"0": 120, "1": 98}``
                         (e.g. the offsets a lake snapshot records, to continue with the hot tail; buckets
                         not named start at 0). Only used when the query has no checkpoint yet.
``maxRowsPerTrigger``    admission control: at most this many rows per micro-batch (spread over buckets)
``maxRowsPerPartition``  split a bucket's range into Spark tasks of at most this many rows (default 500000)
``singlePartitionRows``  read a micro-batch of at most this many rows in one task (default 100000): one task
                         costs less than several on a small machine, and small batches dominate hot latency
``systemColumns``        ``true`` (default) adds ``__offset``, ``__bucket``, ``__ts`` (and ``__change`` for
                         primary-key tables); ``false`` reads the user columns only
``fsync``                passed to the store when this process opens it

Streaming: the offset is ``{"table": name, "offsets": {"<bucket>": end, ...}}``; a micro-batch reads every
bucket's ``[start, end)`` and yields Arrow record batches (never tuples). A primary-key table streams its
changelog (``__change`` = ``+I``/``-U``/``+U``/``-D``). ``Trigger.AvailableNow`` is supported (the end offsets
are pinned when the query starts), which is how ``--until-idle`` drains a layer.

Batch: a log table's rows (each bucket read to its end at read time); a primary-key table's current state
(``store.scan``). The scan runs when a task executes, so a stream-static lookup join re-reads the latest
state every micro-batch. For a primary-key table ``__change`` is ``+I``, ``__bucket`` is the row's bucket and
``__offset``/``__ts`` are null (the state has no offsets).

Stores are cached per process (executors' Python workers are reused): opening one per partition is costly.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.spark.types import arrow_to_spark, conform, spark_to_arrow
from runtime.storage.api import BUCKET, CHANGE, INSERT, OFFSET, TS, TS_TYPE, TableMeta, TableStore, bucket_of

NAME = "tidehouse"
_STORES: dict[tuple[str, bool], TableStore] = {}
_STORES_LOCK = threading.Lock()


def cached_store(root: str, fsync: bool = True) -> TableStore:
    """The process's store for ``root`` (opened once; Spark reuses its Python workers)."""
    key = (str(root), bool(fsync))
    store = _STORES.get(key)
    if store is None:
        with _STORES_LOCK:
            store = _STORES.get(key)
            if store is None:
                from runtime.storage import open_store

                store = _STORES[key] = open_store(str(root), fsync=fsync)
    return store


def close_cached_stores() -> None:
    """Close every cached store of this process (tests, and the CLI on exit)."""
    with _STORES_LOCK:
        for store in _STORES.values():
            store.close()
        _STORES.clear()


# -- options ----------------------------------------------------------------------------------------
def _bad(option: str, message: str) -> TidehouseError:
    return TidehouseError(ErrorCode.SOURCE_INVALID, f"tidehouse source option '{option}': {message}",
                          params={"option": option})


@dataclass(frozen=True)
class SourceOptions:
    root: str
    table: str
    columns: tuple[str, ...] | None
    starting: str
    max_rows_per_trigger: int | None
    max_rows_per_partition: int
    single_partition_rows: int
    system_columns: bool
    fsync: bool

    @classmethod
    def parse(cls, options) -> SourceOptions:
        opts = {str(k).lower(): str(v) for k, v in dict(options).items()}
        for required in ("root", "table"):
            if not opts.get(required):
                raise _bad(required, "is required")
        columns = None
        if opts.get("columns", "").strip():
            columns = tuple(c.strip() for c in opts["columns"].split(",") if c.strip())
        return cls(
            root=opts["root"], table=opts["table"], columns=columns,
            starting=opts.get("startingoffsets", "earliest").strip(),
            max_rows_per_trigger=_positive(opts, "maxrowspertrigger", None),
            max_rows_per_partition=_positive(opts, "maxrowsperpartition", 500_000),
            single_partition_rows=_positive(opts, "singlepartitionrows", 100_000),
            system_columns=_flag(opts, "systemcolumns", True),
            fsync=_flag(opts, "fsync", True),
        )

    def store(self) -> TableStore:
        return cached_store(self.root, self.fsync)


def _positive(opts: dict, key: str, default: int | None) -> int | None:
    if key not in opts:
        return default
    try:
        value = int(opts[key])
    except ValueError:
        value = 0
    if value <= 0:
        raise _bad(key, f"expected a positive integer, got {opts[key]!r}")
    return value


def _flag(opts: dict, key: str, default: bool) -> bool:
    value = opts.get(key, str(default)).lower()
    if value not in ("true", "false"):
        raise _bad(key, f"expected true or false, got {opts[key]!r}")
    return value == "true"


def output_schema(meta: TableMeta, columns: Sequence[str] | None, system_columns: bool) -> pa.Schema:
    """The Arrow schema a read of ``meta`` yields: the (projected) user columns, then system columns."""
    if columns is not None:
        unknown = [c for c in columns if c not in meta.schema.names]
        if unknown:
            raise _bad("columns", f"table {meta.name} has no column {unknown[0]!r} "
                                  f"(columns: {', '.join(meta.schema.names)})")
        fields = [meta.schema.field(c) for c in columns]
    else:
        fields = list(meta.schema)
    if system_columns:
        fields += [pa.field(OFFSET, pa.int64()), pa.field(BUCKET, pa.int32()), pa.field(TS, TS_TYPE)]
        if meta.is_primary_key:
            fields.append(pa.field(CHANGE, pa.string()))
    # the round trip through Spark's types (e.g. large_string -> string, timestamp[ms] -> [us, UTC])
    return spark_to_arrow(arrow_to_spark(pa.schema(fields)))


# -- offsets ----------------------------------------------------------------------------------------
def make_offset(table: str, ends: Sequence[int]) -> dict:
    return {"table": table, "offsets": {str(b): int(e) for b, e in enumerate(ends)}}


def offset_ends(offset: dict, buckets: int) -> list[int]:
    """Per-bucket offsets of a streaming offset dict (``{"table":…, "offsets":{…}}``)."""
    raw = offset.get("offsets", offset)
    return [int(raw.get(str(b), 0)) for b in range(buckets)]


def parse_starting(value: str, meta: TableMeta, store: TableStore) -> list[int]:
    """``earliest`` | ``latest`` | JSON per bucket -> per-bucket start offsets."""
    if value.lower() == "earliest":
        return [0] * meta.buckets
    if value.lower() == "latest":
        return list(store.end_offsets(meta.name))
    try:
        raw = json.loads(value)
    except json.JSONDecodeError as exc:
        raise _bad("startingOffsets", f"expected earliest, latest or JSON like {{\"0\": 42}}, got {value!r}") from exc
    if isinstance(raw, dict) and "offsets" in raw:
        raw = raw["offsets"]
    if not isinstance(raw, dict):
        raise _bad("startingOffsets", f"expected a JSON object of bucket -> offset, got {value!r}")
    starts = [0] * meta.buckets
    for key, off in raw.items():
        if not str(key).isdigit() or int(key) >= meta.buckets:
            raise _bad("startingOffsets", f"table {meta.name} has buckets 0..{meta.buckets - 1}, not {key!r}")
        if isinstance(off, bool) or not isinstance(off, int) or off < 0:
            raise _bad("startingOffsets", f"bucket {key}: expected an offset >= 0, got {off!r}")
        starts[int(key)] = off
    return starts


def cap_rows(starts: Sequence[int], ends: Sequence[int], budget: int) -> list[int]:
    """Limit the total rows of ``[starts, ends)`` to ``budget``, shared in proportion to each bucket's
    backlog (every bucket with a backlog advances when the budget allows)."""
    backlog = [max(0, e - s) for s, e in zip(starts, ends)]
    total = sum(backlog)
    if total <= budget:
        return list(ends)
    take = [budget * b // total for b in backlog]
    left = budget - sum(take)
    for i in sorted(range(len(backlog)), key=lambda i: -backlog[i]):
        if left == 0:
            break
        extra = min(left, backlog[i] - take[i])
        take[i] += extra
        left -= extra
    return [s + t for s, t in zip(starts, take)]


class Ranges(InputPartition):
    """One Spark task: ``(bucket, start, end)`` ranges; ``end`` None = to the end at read time."""

    def __init__(self, ranges) -> None:
        self.ranges: tuple[tuple[int, int, int | None], ...] = tuple(tuple(r) for r in ranges)

    def __eq__(self, other) -> bool:
        return isinstance(other, Ranges) and other.ranges == self.ranges

    def __repr__(self) -> str:
        return f"Ranges({list(self.ranges)})"


def plan_partitions(starts: Sequence[int], ends: Sequence[int | None], split: int, single: int) -> list[Ranges]:
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


# -- the data source --------------------------------------------------------------------------------
class TidehouseDataSource(DataSource):
    """``format("tidehouse")``: hot tables as Spark streaming and batch sources."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        opts = SourceOptions.parse(self.options)
        meta = opts.store().get_table(opts.table)
        return arrow_to_spark(output_schema(meta, opts.columns, opts.system_columns))

    def reader(self, schema: StructType) -> BatchReader:
        return BatchReader(SourceOptions.parse(self.options), schema)

    def streamReader(self, schema: StructType) -> StreamReader:
        return StreamReader(SourceOptions.parse(self.options), schema)


class _Reading:
    """What batch and stream readers share: the requested schema and reading ranges of a bucket."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.arrow_schema = spark_to_arrow(schema)
        meta = opts.store().get_table(opts.table)
        self.table = meta.name
        self.buckets = meta.buckets
        self.user_columns = [n for n in self.arrow_schema.names if n in meta.schema.names]

    def read_ranges(self, partition: Ranges) -> Iterator[pa.RecordBatch]:
        store = self.opts.store()
        for bucket, start, end in partition.ranges:
            for batch in store.read(self.table, bucket, start, end, columns=self.user_columns):
                if batch.num_rows:
                    yield conform(batch, self.arrow_schema)


class BatchReader(_Reading, DataSourceReader):
    def partitions(self) -> Sequence[InputPartition]:
        meta = self.opts.store().get_table(self.table)
        if meta.is_primary_key:
            return [Ranges([])]  # the current state: one scan at read time
        ends = self.opts.store().end_offsets(self.table)
        parts = plan_partitions([0] * len(ends), ends, self.opts.max_rows_per_partition,
                                self.opts.single_partition_rows)
        # the last piece of each bucket reads to the end at read time, so a re-executed plan sees new rows
        last: dict[int, int] = {}
        for i, part in enumerate(parts):
            for b, _, _ in part.ranges:
                last[b] = i
        out = []
        for i, part in enumerate(parts):
            out.append(Ranges([(b, s, None if last[b] == i else e) for b, s, e in part.ranges]))
        return out or [Ranges([])]

    def read(self, partition: Ranges) -> Iterator[pa.RecordBatch]:
        store = self.opts.store()
        meta = store.get_table(self.table)
        if not meta.is_primary_key:
            yield from self.read_ranges(partition)
            return
        key = list(meta.effective_bucket_key)
        state = store.scan(self.table, columns=self.user_columns + [k for k in key if k not in self.user_columns])
        if state.num_rows == 0:
            return
        extra = {
            OFFSET: pa.nulls(state.num_rows, pa.int64()),
            BUCKET: bucket_of(state, key, meta.buckets),
            TS: pa.nulls(state.num_rows, TS_TYPE),
            CHANGE: pa.array([INSERT] * state.num_rows, pa.string()),
        }
        state = state.select(self.user_columns)
        for name, values in extra.items():
            if name in self.arrow_schema.names:
                state = state.append_column(name, values)
        for batch in state.to_batches(max_chunksize=64_000):
            yield conform(batch, self.arrow_schema)


class StreamReader(_Reading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are per-bucket end offsets; ``latestOffset`` costs one ``end_offsets`` call."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        super().__init__(opts, schema)
        self._until: list[int] | None = None  # Trigger.AvailableNow target

    def initialOffset(self) -> dict:
        meta = self.opts.store().get_table(self.table)
        return make_offset(self.table, parse_starting(self.opts.starting, meta, self.opts.store()))

    def getDefaultReadLimit(self):
        if self.opts.max_rows_per_trigger:
            return ReadMaxRows(self.opts.max_rows_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit) -> dict:
        ends = list(self.opts.store().end_offsets(self.table))
        if self._until is not None:
            ends = [min(e, u) for e, u in zip(ends, self._until)]
        starts = offset_ends(start, self.buckets)
        ends = [max(s, e) for s, e in zip(starts, ends)]
        if isinstance(limit, ReadMaxRows):
            ends = cap_rows(starts, ends, limit.max_rows)
        return make_offset(self.table, ends)

    def reportLatestOffset(self) -> dict:
        return make_offset(self.table, self.opts.store().end_offsets(self.table))

    def prepareForTriggerAvailableNow(self) -> None:
        self._until = list(self.opts.store().end_offsets(self.table))

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return plan_partitions(offset_ends(start, self.buckets), offset_ends(end, self.buckets),
                               self.opts.max_rows_per_partition, self.opts.single_partition_rows)

    def read(self, partition: Ranges) -> Iterator[pa.RecordBatch]:
        yield from self.read_ranges(partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: hot log retention is driven by tiering, not by readers."""
