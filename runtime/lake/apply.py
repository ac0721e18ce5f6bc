"""Staging hot changes as ONE Iceberg snapshot inside a pyiceberg transaction.

* Log tables: the rows are appended (``merge_append``, so manifests are merged and planning stays fast after
  thousands of cycles).
* Primary-key tables: the changelog range is collapsed to the last row kind per key; then, copy-on-write,
  every lake data file holding an affected key is replaced by a file without those keys, and the new images
  (``+I``/``+U``) are added — a single ``overwrite`` snapshot. This is what ``Table.upsert`` would do, minus
  its per-row cost (an upstream report: ~17 min for 1M rows), and with the deletes in the same snapshot.

Both carry the snapshot properties given (``tidehouse.offsets``) so a compaction, an append and a changelog
application all advance the lake's offsets atomically with the data.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, In
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
from pyiceberg.table import Table, Transaction
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _MergeAppendFiles, _OverwriteFiles

from runtime.lake.schema import to_lake_arrow
from runtime.storage.api import BUCKET, CHANGE, DELETE, UPDATE_BEFORE

_ROW = "__row"
_KEY_FILTER_LIMIT = 10_000  # above this many keys, prune by partition only (the filter itself gets costly)


class LakeTransaction(Transaction):
    """A pyiceberg transaction whose ``table_metadata`` is computed once per staged change.

    pyiceberg recomputes (deep-copies) the whole table metadata on every ``table_metadata`` access, ~20
    times per snapshot produced; the cost grows with the snapshot count and dominated small tiering cycles.
    The result depends only on the base metadata and the staged updates, so it is cached on their identity.
    """

    _cached: tuple = (None, None, None)

    @property
    def table_metadata(self):
        base, updates, value = self._cached
        if base is not self._table.metadata or updates is not self._updates:
            value = super().table_metadata
            self._cached = (self._table.metadata, self._updates, value)
        return value


def _live(manifest) -> bool:
    """A manifest that still lists a live data file (pyiceberg 0.12 carries manifests whose entries are all
    DELETED forward forever, so without this filter every overwrite grows the manifest list by one)."""
    added, existing = manifest.added_files_count, manifest.existing_files_count
    return added is None or existing is None or added + existing > 0


class _LiveMergeAppend(_MergeAppendFiles):
    def _existing_manifests(self):
        return [m for m in super()._existing_manifests() if _live(m)]


class _LiveOverwrite(_OverwriteFiles):
    def _existing_manifests(self):
        return [m for m in super()._existing_manifests() if _live(m)]


def append_producer(tx: Transaction, properties: dict[str, str]) -> _MergeAppendFiles:
    """A merge-append snapshot producer that drops dead manifests (use as a context manager)."""
    return _LiveMergeAppend(
        operation=Operation.APPEND, transaction=tx, io=tx._table.io, snapshot_properties=properties
    )


def overwrite_producer(tx: Transaction, properties: dict[str, str]) -> _OverwriteFiles:
    """An overwrite snapshot producer (files removed and added) that drops dead manifests."""
    operation = Operation.OVERWRITE if tx.table_metadata.current_snapshot() is not None else Operation.APPEND
    return _LiveOverwrite(
        operation=operation, transaction=tx, io=tx._table.io, snapshot_properties=properties
    )


@dataclass(frozen=True)
class Staged:
    rows_added: int
    rows_deleted_keys: int
    files_removed: int
    files_added: int


def write_files(tx: Transaction, table: Table, data: pa.Table, producer) -> int:
    """Write ``data`` as Parquet data files of the table and add them to the snapshot ``producer``.

    Rows of different buckets never share a file: each file's ``__bucket`` statistics (and, for a table
    partitioned by ``__bucket``, its partition) name one bucket, so a read of one key's bucket prunes the
    others' files. The rows are cut by bucket with slices (they come grouped by bucket from the hot log), not
    with pyiceberg's per-partition filters, which copy the table once per partition.
    """
    if data.num_rows == 0:
        return 0
    # file names are <counter>-<commit uuid>: one counter per producer, or a second call would reuse (and
    # overwrite) the first call's file names
    counter = producer.__dict__.setdefault("_tidehouse_file_counter", itertools.count(0))
    n = 0
    # table.metadata, not tx.table_metadata: that deep-copies the whole metadata on every access
    for data_file in data_files(table.metadata, table.io, data, producer.commit_uuid, counter):
        producer.append_data_file(data_file)
        n += 1
    return n


def data_files(metadata, io, data: pa.Table, write_uuid, counter):
    """Write ``data`` as the table's Parquet data files, one set per bucket (see :func:`write_files`), named
    ``<counter>-<write_uuid>``; yields their ``DataFile`` entries. Needs the table's metadata and file IO
    only, so a Spark task can run it (``runtime.spark.tiering``)."""
    from pyiceberg.io.pyarrow import bin_pack_arrow_table, pyarrow_to_schema, write_file
    from pyiceberg.partitioning import PartitionFieldValue, PartitionKey
    from pyiceberg.table import WriteTask

    spec = metadata.spec()
    by_bucket = [f for f in spec.fields if f.name == BUCKET]
    if BUCKET not in data.column_names or (
        not spec.is_unpartitioned() and len(spec.fields) != len(by_bucket)
    ):
        yield from _dataframe_to_data_files(metadata, data, io, write_uuid=write_uuid, counter=counter)
        return
    buckets = data.column(BUCKET).to_numpy()
    if len(buckets) > 1 and (np.diff(buckets) < 0).any():  # not grouped (a compaction's input): group it
        order = np.argsort(buckets, kind="stable")
        data, buckets = data.take(pa.array(order)), buckets[order]
    cuts = [0, *(np.flatnonzero(np.diff(buckets)) + 1).tolist(), len(buckets)]
    schema = pyarrow_to_schema(
        data.schema, name_mapping=metadata.schema().name_mapping, format_version=metadata.format_version
    )
    target = int(metadata.properties.get("write.target-file-size-bytes", 512 * 1024 * 1024))
    tasks = []
    for lo, hi in itertools.pairwise(cuts):
        part = data.slice(lo, hi - lo)
        key = None
        if by_bucket:
            key = PartitionKey(
                field_values=[PartitionFieldValue(field=by_bucket[0], value=int(buckets[lo]))],
                partition_spec=spec,
                schema=metadata.schema(),
            )
        tasks += [
            WriteTask(
                write_uuid=write_uuid,
                task_id=next(counter),
                record_batches=batches,
                partition_key=key,
                schema=schema,
            )
            for batches in bin_pack_arrow_table(part, target)
        ]
    yield from write_file(io=io, table_metadata=metadata, tasks=iter(tasks))


def stage_append(tx: Transaction, table: Table, rows: pa.Table, properties: dict[str, str]) -> Staged:
    """Append log rows (already shaped by :func:`runtime.lake.schema.to_lake_arrow`)."""
    with append_producer(tx, properties) as append:
        added = write_files(tx, table, rows, append)
    return Staged(rows.num_rows, 0, 0, added)


def stage_files(tx: Transaction, files: Sequence, properties: dict[str, str]) -> Staged:
    """Append data files written elsewhere (by Spark tasks: ``runtime.spark.tiering``) as one snapshot."""
    with append_producer(tx, properties) as append:
        for data_file in files:
            append.append_data_file(data_file)
    return Staged(sum(f.record_count for f in files), 0, 0, len(files))


def collapse_changelog(changelog: pa.Table, key_columns: Sequence[str]) -> tuple[pa.Table, pa.Table]:
    """The last row per key of a changelog in log order: (new images to write, every affected key).

    A key whose last kind is ``-D`` (or a dangling ``-U``) is deleted; ``+I``/``+U`` is its new image.
    """
    indexed = changelog.append_column(_ROW, pa.array(range(changelog.num_rows), pa.int64()))
    last = indexed.group_by(list(key_columns), use_threads=False).aggregate([(_ROW, "max")])
    rows = last.column(f"{_ROW}_max").combine_chunks()
    picked = indexed.take(rows.take(pc.sort_indices(rows)))  # one row per key, in log order
    kinds = picked.column(CHANGE)
    alive = pc.invert(pc.is_in(kinds, value_set=pa.array([DELETE, UPDATE_BEFORE])))
    images = picked.filter(alive).drop_columns([_ROW])
    keys = picked.select(list(key_columns))
    return images, keys


def key_mask(rows: pa.Table, keys: pa.Table, key_columns: Sequence[str]) -> pa.Array:
    """True for the rows of ``rows`` whose key is in ``keys``."""
    if len(key_columns) == 1:
        col = key_columns[0]
        values = keys.column(col).cast(rows.column(col).type)
        return pc.fill_null(pc.is_in(rows.column(col), value_set=values), False)
    left = rows.select(list(key_columns)).append_column(_ROW, pa.array(range(rows.num_rows), pa.int64()))
    right = pa.table({c: keys.column(c).cast(rows.column(c).type) for c in key_columns})
    hit = left.join(right, keys=list(key_columns), join_type="left semi", use_threads=False)
    return pc.is_in(pa.array(range(rows.num_rows), pa.int64()), value_set=hit.column(_ROW))


def _affected_filter(
    table: Table, keys: pa.Table, key_columns: Sequence[str], buckets: list[int] | None
) -> BooleanExpression:
    expr: BooleanExpression = AlwaysTrue()
    if buckets is not None:
        expr = In(BUCKET, set(buckets))
    if keys.num_rows <= _KEY_FILTER_LIMIT:  # prune files by the first key column's min/max statistics
        values = set(keys.column(key_columns[0]).drop_null().to_pylist())  # key columns are required
        try:
            by_key = In(key_columns[0], values) if values else None
        except (TypeError, ValueError):  # a key type pyiceberg has no literal for: prune by partition only
            by_key = None
        if by_key is not None:
            expr = by_key if isinstance(expr, AlwaysTrue) else And(expr, by_key)
    return expr


def stage_changelog(
    tx: Transaction, table: Table, changelog: pa.Table, key_columns: Sequence[str], properties: dict[str, str]
) -> Staged:
    """Apply a primary-key changelog range (user columns + ``__change`` + ``__bucket``) as one snapshot."""
    images, keys = collapse_changelog(changelog, key_columns)
    schema = table.schema()
    partitioned = not table.spec().is_unpartitioned()
    buckets = sorted(set(changelog.column(BUCKET).to_pylist())) if partitioned else None
    removed: list = []
    kept: list[pa.Table] = []
    if table.current_snapshot() is not None:
        scan = table.scan(row_filter=_affected_filter(table, keys, key_columns, buckets))
        tasks = list(scan.plan_files())
        reader = ArrowScan(table.metadata, table.io, schema, AlwaysTrue())
        for task in tasks:
            rows = reader.to_table([task])
            mask = key_mask(rows, keys, key_columns)
            if not pc.any(mask).as_py():
                continue
            removed.append(task.file)
            remaining = rows.filter(pc.invert(mask))
            if remaining.num_rows:
                kept.append(to_lake_arrow(remaining, schema))
    new_rows = to_lake_arrow(images, schema)
    out = pa.concat_tables([*kept, new_rows]) if kept else new_rows
    with overwrite_producer(tx, properties) as overwrite:
        for data_file in removed:
            overwrite.delete_data_file(data_file)
        added = write_files(tx, table, out, overwrite)
    return Staged(images.num_rows, keys.num_rows, len(removed), added)
