"""One tiering cycle of one table: hot offset range -> one Iceberg snapshot, exactly once.

Protocol (after Apache Fluss's tiering service; the lake commit is the only commit):

1. Take the table's tiering lock (``flock`` under ``<home>/run/tiering/``; released if the process dies).
2. Load the lake table and read the offsets its latest snapshot covers (``tidehouse.offsets``); read the hot
   end offsets. Equal: nothing to tier, no commit, no cost beyond two reads (and the trimming of the table's
   private state, :func:`runtime.lake.maintenance.maintain_state`).
3. Read the hot log range ``[lake offsets, end offsets)`` of every bucket; log tables append it, primary-key
   tables apply it as a changelog (:mod:`runtime.lake.apply`), in ONE snapshot whose summary records the end
   offsets. On the executor data path Spark tasks may write a log table's data files (``files``,
   :mod:`runtime.spark.tiering`): this process checks and commits them the same way.
4. Commit. The commit requires the lake table's ``main`` to still be the snapshot read in step 2 (pyiceberg's
   ``AssertRefSnapshotId``, checked by the catalog atomically), and pyiceberg's own retry is disabled on
   these tables (``commit.retry.num-retries = 0``), because that retry would rebuild the append on the new
   parent and commit the same range twice. A conflict therefore surfaces as ``CommitFailedException``; the
   cycle then starts over from step 2 (re-reading the offsets from the lake, never blindly re-committing).

A crash before step 4 leaves the lake's offsets where they were: the next cycle repeats the range (the data
files written by the crashed attempt are unreferenced orphans). A crash after step 4 leaves the new offsets
in the lake: the range is never repeated.

Lake delay (how far the lake copy is behind the hot copy, in seconds) is computed from the backlog: 0 when
the lake's offsets equal the hot end offsets, else ``now - commit time of the oldest hot batch not yet in the
lake``. It never reports "time since the last commit", so an idle table is not a false alarm.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.table import Table

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.lake.apply import LakeTransaction, stage_append, stage_changelog, stage_files
from runtime.lake.schema import missing_columns, to_lake_arrow
from runtime.lake.state import (
    OFFSETS_PROPERTY,
    append_history,
    lake_offsets,
    offsets_json,
    read_history,
    table_lock,
)
from runtime.storage.api import TableMeta, TableStore

if TYPE_CHECKING:  # pragma: no cover
    from runtime.lake.catalog import Lake

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
STATUS_WINDOW_S = 300.0


@dataclass(frozen=True)
class CycleResult:
    """What one tiering cycle did."""

    table: str
    rows: int  # hot log rows covered (changelog rows for primary-key tables)
    seconds: float
    committed: bool
    snapshot_id: int | None  # the lake's current snapshot after the cycle
    offsets_before: tuple[int, ...]
    offsets_after: tuple[int, ...]
    lake_delay_s: float  # after the cycle: how far the lake is behind the hot end now
    delay_at_commit_s: float  # just before this cycle's commit landed (the peak of the sawtooth)
    attempts: int = 1
    maintenance: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["offsets_before"] = list(self.offsets_before)
        out["offsets_after"] = list(self.offsets_after)
        out["maintenance"] = list(self.maintenance)
        return out


def lake_table(lake: Lake, meta: TableMeta) -> Table:
    """The lake table of a hot table, created or evolved to the hot schema as needed."""
    try:
        table = lake.load(meta.name)
    except TidehouseError as exc:
        if exc.code != ErrorCode.TABLE_UNKNOWN:
            raise
        return lake.ensure_table(meta)
    if missing_columns(meta, table.schema()) or table.properties.get("commit.retry.num-retries") != "0":
        return lake.ensure_table(meta)
    return table


def pending_since(store: TableStore, name: str, start: list[int], end: list[int]) -> float | None:
    """Commit time (epoch s) of the oldest hot batch at or after ``start`` and before ``end`` (None: none)."""
    oldest = None
    for bucket, (lo, hi) in enumerate(zip(start, end)):
        if hi > lo:
            info = store.offset_times(name, bucket, lo)
            if info is not None and (oldest is None or info.commit_ts < oldest):
                oldest = info.commit_ts
    return oldest


def lake_delay(
    store: TableStore, name: str, start: list[int], end: list[int], now: float | None = None
) -> float:
    since = pending_since(store, name, start, end)
    return 0.0 if since is None else max(0.0, (now or time.time()) - since)


def read_range(store: TableStore, meta: TableMeta, start: list[int], end: list[int]) -> pa.Table:
    """The hot log rows ``[start, end)`` of every bucket, bucket by bucket in offset order."""
    parts = []
    for bucket, (lo, hi) in enumerate(zip(start, end)):
        if hi > lo:
            parts.extend(
                pa.Table.from_batches([b]) for b in store.read(meta.name, bucket, lo, hi) if b.num_rows
            )
    expected = sum(hi - lo for lo, hi in zip(start, end))
    data = pa.concat_tables(parts, promote_options="permissive") if parts else pa.table({})
    if data.num_rows != expected:
        raise TidehouseError(
            ErrorCode.STORAGE_CORRUPT,
            f"hot table {meta.name}: read {data.num_rows} rows of the range "
            f"{start}..{end}, expected {expected}",
            location=Location(path=meta.name),
        )
    return data


def _check_ranges(meta: TableMeta, before: list[int], ends: list[int]) -> None:
    behind = [b for b, (lo, hi) in enumerate(zip(before, ends)) if hi < lo]
    if behind:
        raise TidehouseError(
            ErrorCode.STORAGE_CORRUPT,
            f"table {meta.name}: the lake covers offsets {before} but the hot end offsets are {ends} "
            f"(buckets {behind} went backwards)",
            location=Location(path=meta.name),
            hint="the hot storage was reset while the lake kept its data; drop the lake table to re-tier",
        )


# Writes a log table's hot range [start, end) as the lake table's data files elsewhere (Spark tasks:
# runtime.spark.tiering) and returns their DataFile entries, which this process commits; or returns None to
# leave the range to this process (a small one).
LakeFiles = Callable[[TableMeta, Table, list[int], list[int]], "list | None"]


def tier_table(
    store: TableStore,
    lake: Lake,
    table_name: str,
    *,
    lock_timeout: float = 600.0,
    maintain: bool = True,
    files: LakeFiles | None = None,
) -> CycleResult:
    """Run one tiering cycle of ``table_name`` now (see the module docstring for the protocol). ``files``:
    who writes a log table's data files (default: this process)."""
    started = time.monotonic()
    meta = store.get_table(table_name)
    with table_lock(lake.run_dir, table_name, timeout=lock_timeout):
        for attempt in range(1, MAX_ATTEMPTS + 1):
            table = lake_table(lake, meta)
            before, _ = lake_offsets(table, meta.buckets)
            ends = store.end_offsets(table_name)
            _check_ranges(meta, before, ends)
            if before == ends:
                notes: tuple[str, ...] = ()
                if maintain:  # the table's private state changes even when its rows do not
                    from runtime.lake.maintenance import maintain_state

                    notes = tuple(maintain_state(store, lake, table_name))
                result = CycleResult(
                    table_name,
                    0,
                    time.monotonic() - started,
                    False,
                    _snapshot_id(table),
                    tuple(before),
                    tuple(ends),
                    0.0,
                    0.0,
                    attempt,
                    notes,
                )
                break
            since = pending_since(store, table_name, before, ends)
            tx = LakeTransaction(table)
            written = None
            if files is not None and not meta.is_primary_key:
                written = written_files(meta, table, before, ends, files)
            if written is not None:
                rows = sum(f.record_count for f in written)
                stage_files(tx, written, _props(ends, rows))
            else:
                data = read_range(store, meta, before, ends)
                rows = data.num_rows
                if meta.is_primary_key:
                    stage_changelog(tx, table, data, meta.primary_key, _props(ends, rows))
                else:
                    stage_append(tx, table, to_lake_arrow(data, table.schema()), _props(ends, rows))
            try:
                table = tx.commit_transaction()
            except (CommitFailedException, ValidationException) as exc:  # a concurrent commit won
                log.warning(
                    "tiering %s: lake commit conflict (attempt %d/%d): %s",
                    table_name,
                    attempt,
                    MAX_ATTEMPTS,
                    exc,
                )
                if attempt == MAX_ATTEMPTS:
                    raise TidehouseError(
                        ErrorCode.LAKE_COMMIT_CONFLICT,
                        f"lake table {table_name}: {MAX_ATTEMPTS} commits in a row lost to "
                        "concurrent commits",
                        location=Location(path=table_name),
                        hint="another process tiers this table without sharing the lock; "
                        "the next cycle continues from the lake's offsets",
                    ) from exc
                time.sleep(random.uniform(0.01, 0.05) * attempt)  # de-synchronise competing writers
                continue
            now = time.time()
            notes = ()
            if maintain:
                from runtime.lake.maintenance import maintain_table

                notes = tuple(maintain_table(store, lake, meta, table, ends))
                if notes:
                    table = lake.load(table_name)
            ends_now = store.end_offsets(table_name)
            result = CycleResult(
                table_name,
                rows,
                time.monotonic() - started,
                True,
                _snapshot_id(table),
                tuple(before),
                tuple(ends),
                lake_delay(store, table_name, ends, ends_now),
                0.0 if since is None else max(0.0, now - since),
                attempt,
                notes,
            )
            break
        append_history(
            lake.run_dir,
            table_name,
            {
                "at": time.time(),
                "rows": result.rows,
                "seconds": round(result.seconds, 4),
                "committed": result.committed,
                "snapshot_id": result.snapshot_id,
                "delay": round(result.lake_delay_s, 3),
                "delay_at_commit": round(result.delay_at_commit_s, 3),
                "offsets": list(result.offsets_after),
            },
        )
    return result


def _props(ends: list[int], rows: int) -> dict[str, str]:
    """The snapshot's properties: the offsets it covers and the rows it added."""
    return {OFFSETS_PROPERTY: offsets_json(ends), "tidehouse.rows": str(rows)}


def written_files(
    meta: TableMeta, table: Table, start: list[int], end: list[int], files: LakeFiles
) -> list | None:
    """The data files ``files`` wrote for the range (None: it left the range to this process), checked:
    together they hold exactly the range's rows, and each one is there for this process to read (a lake
    warehouse that the executors write and the driver does not see would commit files nobody can read)."""
    written = files(meta, table, start, end)
    if written is None:
        return None
    expected = sum(hi - lo for lo, hi in zip(start, end))
    got = sum(f.record_count for f in written)
    if got != expected:
        raise TidehouseError(
            ErrorCode.STORAGE_CORRUPT,
            f"hot table {meta.name}: the data files written for the range {start}..{end} hold {got} rows, "
            f"expected {expected}",
            location=Location(path=meta.name),
        )
    for data_file in written:
        if not table.io.new_input(data_file.file_path).exists():
            raise TidehouseError(
                ErrorCode.LAKE_CATALOG,
                f"lake table {meta.name}: the data file {data_file.file_path} that a Spark task wrote is not "
                "there for the driver",
                location=Location(path=meta.name),
                hint="the lake's warehouse must be storage every executor and the driver share (an object "
                "store, a shared mount)",
            )
    return written


def _snapshot_id(table: Table) -> int | None:
    snap = table.current_snapshot()
    return snap.snapshot_id if snap is not None else None


@dataclass(frozen=True)
class LakeSnapshot:
    """What a table's lake copy says now: whether it exists, the hot offsets its current snapshot covers, and
    that snapshot (a catalog call and a metadata read; :func:`lake_status` adds the hot figures)."""

    exists: bool
    offsets: list[int]
    snapshot_id: int | None = None
    snapshot_at: float | None = None


def lake_snapshot(lake: Lake, table: str, buckets: int) -> LakeSnapshot:
    try:
        ice = lake.load(table)  # one catalog call: a missing table is TABLE_UNKNOWN, not a second lookup
    except TidehouseError as exc:
        if exc.code is not ErrorCode.TABLE_UNKNOWN:
            raise
        return LakeSnapshot(False, [0] * buckets)
    offsets, _ = lake_offsets(ice, buckets)
    snap = ice.current_snapshot()
    if snap is None:
        return LakeSnapshot(True, offsets)
    return LakeSnapshot(True, offsets, snap.snapshot_id, snap.timestamp_ms / 1000.0)


def lake_status(
    store: TableStore,
    lake: Lake,
    table: str,
    *,
    window_s: float = STATUS_WINDOW_S,
    snapshot: LakeSnapshot | None = None,
) -> dict:
    """Per-table tiering figures for ``flow status``: offsets, backlog, lake delay now and its recent max.
    ``snapshot``: the lake's side as the caller last read it (a running flow's status, which knows when its
    tiering committed), else read here."""
    meta = store.get_table(table)
    ends = store.end_offsets(table)
    snap = snapshot if snapshot is not None else lake_snapshot(lake, table, meta.buckets)
    now = time.time()
    delay = lake_delay(store, table, snap.offsets, ends, now)
    history = read_history(lake.run_dir, table, since=now - window_s)
    last = next((h for h in reversed(history) if h.get("committed")), None)
    peaks = [max(h.get("delay", 0.0), h.get("delay_at_commit", 0.0)) for h in history]
    return {
        "table": table,
        "lake_table": snap.exists,
        "lake_offsets": snap.offsets,
        "hot_end_offsets": ends,
        "pending_rows": sum(max(0, e - o) for o, e in zip(snap.offsets, ends)),
        "lake_delay_s": round(delay, 3),
        "max_lake_delay_s": round(max([delay, *peaks]), 3),  # over the last window_s seconds
        "window_s": window_s,
        "last_snapshot_id": snap.snapshot_id,
        "last_snapshot_at": snap.snapshot_at,
        "last_cycle_rows": last["rows"] if last else None,
        "last_cycle_seconds": last["seconds"] if last else None,
        "cycles_in_window": len(history),
    }
