"""Keeping the lake fast after thousands of tiering cycles, without breaking exactly-once.

Run by :func:`runtime.lake.tiering.tier_table` after each committed cycle, under the table's tiering lock:

* **Expire snapshots.** pyiceberg's commit latency grows with the snapshot count (measured 30 -> 350 ms over
  300 commits). When a table has more than ``tiering.max_snapshots`` snapshots, the oldest are expired
  down to half that number (hysteresis: one expiry commit per ``max/2`` cycles, not one per cycle). The
  current snapshot always survives, and it carries ``tidehouse.offsets``, so offsets are never lost.
  pyiceberg 0.12 expires metadata only, so the data files, manifests and manifest lists that only expired
  snapshots referenced are deleted here (a reader still pinned to an expired snapshot may then fail and must
  re-plan, as with any Iceberg expiry). Files of a crashed, never-committed cycle are not found this way.
* **Compact small files.** pyiceberg 0.12 has no data-file compaction. Ours is size-tiered: in each
  partition, files below ``tiering.compact_target_bytes`` are grouped by size (a file more than 8x the mean
  of the smaller ones starts a new group), and a group that reaches ``tiering.compact_min_files`` files is
  rewritten into files of at most the target size (log tables sorted by ``__offset``). A file is thus only
  merged with files of a similar size — rows are rewritten a logarithmic number of times, and a compaction's
  memory is bounded by the target size, not by the table's age (rewriting the whole partition each time grew
  both without bound). All groups of a table go into ONE ``overwrite`` snapshot whose summary carries the same
  ``tidehouse.offsets`` as its parent: a compaction moves no offset, and its commit requires the parent to be
  unchanged, so it cannot hide a concurrent tiering commit.
* **Trim the hot log.** Hot segments that end at or before the lake's offsets (fully tiered) and are older
  than ``storage.retention`` are deleted with ``store.delete_before``.
* **Trim the table's private state** (after every cycle, also one with nothing to tier: a state changes in
  micro-batches that leave the table's rows as they were). The state tables of the query that writes the
  table (``<table>__...__state``, never tiered, never streamed) are trimmed below what their state's
  checkpoint covers, whatever their age (nobody reads a state's history): the whole changelog on the local
  store (its RocksDB state is durable), the state's latest snapshot on the object store, which takes one
  when the changelog since the last outgrew the state (docs/architecture.md, "Retention of state tables").
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import Table

from runtime.core.errors import TidehouseError
from runtime.core.literals import is_internal_table
from runtime.core.settings import default
from runtime.lake.apply import LakeTransaction, overwrite_producer, write_files
from runtime.lake.state import OFFSETS_PROPERTY, lake_offsets, offsets_json
from runtime.storage.api import OFFSET, TableMeta, TableStore

if TYPE_CHECKING:  # pragma: no cover
    from runtime.lake.catalog import Lake

log = logging.getLogger(__name__)


def _reachable(table: Table, snapshots) -> tuple[set[str], set[str]]:
    """(data file paths, manifest paths) that the given snapshots reference."""
    files: set[str] = set()
    manifests: set[str] = set()
    for snap in snapshots:
        for manifest in snap.manifests(table.io):
            if manifest.manifest_path in manifests:
                continue
            manifests.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                files.add(entry.data_file.file_path)
    return files, manifests


def expire_snapshots(table: Table, max_snapshots: int) -> int:
    """Expire the oldest snapshots when there are more than ``max_snapshots``, and delete the files only they
    referenced (data files, manifests, manifest lists); return how many snapshots were expired."""
    snapshots = sorted(table.snapshots(), key=lambda s: (s.timestamp_ms, s.sequence_number or 0))
    if max_snapshots <= 0 or len(snapshots) <= max_snapshots:
        return 0
    keep = max(1, max_snapshots // 2)
    current = table.current_snapshot()
    doomed = [s for s in snapshots[:-keep] if current is None or s.snapshot_id != current.snapshot_id]
    if not doomed:
        return 0
    kept = [s for s in snapshots if s not in doomed]
    old_files, old_manifests = _reachable(table, doomed)
    table.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in doomed]).commit()
    live_files, live_manifests = _reachable(table, kept)
    garbage = sorted((old_files - live_files) | (old_manifests - live_manifests)) + [
        s.manifest_list for s in doomed
    ]
    for path in garbage:
        try:
            table.io.delete(path)
        except OSError as exc:  # already gone, or not ours to delete: the table stays correct either way
            log.debug("could not delete %s: %s", path, exc)
    return len(doomed)


def data_file_count(table: Table) -> int:
    snap = table.current_snapshot()
    if snap is None or snap.summary is None:
        return 0
    return int(snap.summary.additional_properties.get("total-data-files", 0))


SIZE_RATIO = 8  # a file more than 8x the mean size of the smaller ones starts a new group


def similar_size_groups(tasks) -> list[list]:
    """Scan tasks sorted by file size, split where a file is more than ``SIZE_RATIO`` times the mean size of
    the group so far: files of one tiering cycle's size stay together, an earlier compaction's output does
    not join them. (Fixed power-of-8 tiers would split 15.9 KB and 16.1 KB files into two groups.)"""
    groups: list[list] = []
    total = 0
    for task in sorted(tasks, key=lambda t: t.file.file_size_in_bytes):
        size = task.file.file_size_in_bytes
        if groups and size <= SIZE_RATIO * max(total / len(groups[-1]), 1):
            groups[-1].append(task)
            total += size
        else:
            groups.append([task])
            total = size
    return groups


def compaction_groups(tasks, min_files: int, target_bytes: int) -> tuple[list[list], int]:
    """Size-tiered compaction plan: (groups of scan tasks to rewrite, the fullest group's file count).

    Within each partition, files below ``target_bytes`` form groups of similar size
    (:func:`similar_size_groups`); a group of at least ``min_files`` files is rewritten, in bins of at most
    ``target_bytes``. So a file is only ever merged with files of a similar size: each row is rewritten about
    log_{min_files}(target / first file size) times in its life, and one compaction reads at most
    ``target_bytes`` per bin — not the whole table, however old it is. Files of ``target_bytes`` or more
    are never rewritten.
    """
    partitions: dict[tuple, list] = defaultdict(list)
    for task in tasks:
        if task.file.file_size_in_bytes < target_bytes:
            partitions[tuple(task.file.partition)].append(task)
    similar = [g for members in partitions.values() for g in similar_size_groups(members)]
    fullest = max((len(g) for g in similar), default=0)
    groups: list[list] = []
    for members in similar:
        if len(members) < min_files:
            continue
        current, total = [], 0
        for task in members:
            size = task.file.file_size_in_bytes
            if current and total + size > target_bytes:
                groups.append(current)
                current, total = [], 0
            current.append(task)
            total += size
        groups.append(current)
    return [g for g in groups if len(g) > 1], fullest


def compact(
    table: Table,
    meta: TableMeta,
    min_files: int,
    target_bytes: int = default("tiering.compact_target_bytes"),
    memo: dict | None = None,
) -> int:
    """Rewrite each tier of similar-sized small files that reached ``min_files`` (see
    :func:`compaction_groups`) as ONE overwrite snapshot; return how many files were removed.

    ``memo`` (table -> data-file count) lets a long-running process skip planning until enough new
    files can have arrived to fill a tier: planning reads every manifest, the data-file count is free.
    """
    total = data_file_count(table)
    key = f"{meta.name}:{table.metadata.table_uuid}"  # a dropped and re-created table starts afresh
    if min_files <= 0 or total < min_files or (memo is not None and total < memo.get(key, 0)):
        return 0
    groups, fullest = compaction_groups(table.scan().plan_files(), min_files, target_bytes)
    if not groups:
        if memo is not None:  # no tier can fill before this many more files exist
            memo[key] = total + (min_files - fullest)
        return 0
    offsets, _ = lake_offsets(table, meta.buckets)
    props = {OFFSETS_PROPERTY: offsets_json(offsets), "tidehouse.compaction": "true"}
    reader = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
    tx = LakeTransaction(table)
    removed = 0
    with overwrite_producer(tx, props) as overwrite:
        for tasks in groups:
            rows = reader.to_table(tasks)
            if OFFSET in rows.column_names:
                rows = rows.take(pc.sort_indices(rows.column(OFFSET)))
            for task in tasks:
                overwrite.delete_data_file(task.file)
                removed += 1
            write_files(tx, table, rows, overwrite)
            del rows
    tx.commit_transaction()
    if memo is not None:
        memo.pop(key, None)
    pa.default_memory_pool().release_unused()  # hand the compaction's buffers back to the OS
    return removed


def trim_hot(store: TableStore, meta: TableMeta, offsets: list[int], retention_s: float) -> int:
    older_than = time.time() - retention_s
    deleted = 0
    for bucket, offset in enumerate(offsets):
        if offset > 0:
            deleted += store.delete_before(meta.name, bucket, offset, older_than=older_than)
    return deleted


def trim_state(store: TableStore, name: str) -> int:
    """Trim the changelogs of table ``name``'s private state tables below what their state's checkpoint
    covers (``store.checkpoint_state``, which may snapshot the state first). No age: nobody reads a state's
    history, only its current rows (whole segments go; the one being written stays)."""
    older_than = time.time()
    deleted = 0
    for state in store.list_tables():
        if is_internal_table(state) and state.startswith(f"{name}__"):
            for bucket, covered in enumerate(store.checkpoint_state(state)):
                if covered > 0:
                    deleted += store.delete_before(state, bucket, covered, older_than=older_than)
    return deleted


def maintain_table(
    store: TableStore, lake: Lake, meta: TableMeta, table: Table, offsets: list[int]
) -> list[str]:
    """All maintenance steps for one table after a committed cycle; failures are logged, never fatal."""
    notes: list[str] = []
    try:
        removed = compact(
            table, meta, lake.compact_min_files, lake.compact_target_bytes, lake.compaction_memo
        )
        if removed:
            table = lake.load(meta.name)
            notes.append(f"compacted {removed} files")
    except (CommitFailedException, ValidationException, OSError, ValueError, pa.ArrowException) as exc:
        log.warning("compaction of %s skipped: %s", meta.name, exc)
    try:
        expired = expire_snapshots(table, lake.max_snapshots)
        if expired:
            notes.append(f"expired {expired} snapshots")
    except (CommitFailedException, ValueError) as exc:
        log.warning("snapshot expiry of %s skipped: %s", meta.name, exc)
    try:
        segments = trim_hot(store, meta, offsets, lake.retention_s)
        if segments:
            notes.append(f"deleted {segments} hot segments")
    except TidehouseError as exc:
        log.warning("hot retention of %s skipped: %s", meta.name, exc)
    return notes + maintain_state(store, lake, meta.name)


def maintain_state(store: TableStore, lake: Lake, name: str) -> list[str]:
    """Trim the private state of the query writing ``name``: after every cycle of the table, committed or not
    (a top-N's state changes in micro-batches that leave its output as it was). Failures are logged."""
    try:
        segments = trim_state(store, name)
    except TidehouseError as exc:
        log.warning("state retention of %s skipped: %s", name, exc)
        return []
    return [f"deleted {segments} state segments"] if segments else []
