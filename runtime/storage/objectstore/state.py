"""The current state of a primary-key bucket, cached in memory and rebuilt from a snapshot + the changelog.

The changelog in the object store is the log, as on local disk; this state is only a cache of where the log
leads (the before-images of upserts, ``scan``, ``lookup``). It holds, per key (the key bytes of
:func:`runtime.storage.pk.key_bytes`), the pickled row tuple in schema order, and the offset it reflects
(``applied``). The merge code of the local store runs on it unchanged: ``fastpk.merge`` and the row loop
(``Tablet.apply``) only read the state through ``get([keys]) -> [value | None]``.

A write computes its changelog against the state without changing it (:func:`merge`); the mutations are
applied (:meth:`BucketState.apply`) only once the commit transaction succeeded.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.storage import fastpk
from runtime.storage.api import CHANGE, DELETE, UPDATE_BEFORE, TableMeta
from runtime.storage.objectstore.metaschema import Head
from runtime.storage.pk import Merger, Tablet, key_bytes, pad, rows_to_table, to_py

_DUMPS = pickle.dumps
_LOADS = pickle.loads
_PROTO = 5


@dataclass
class BucketState:
    """One bucket's current rows (key bytes -> pickled row) as of log offset ``applied``."""

    applied: int
    rows: dict[bytes, bytes] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def get(self, keys: Sequence[bytes]) -> list[bytes | None]:  # the interface the merge code reads through
        rows = self.rows
        return [rows.get(k) for k in keys]

    def apply(self, puts: Iterable[tuple[bytes, bytes]], deletes: Iterable[bytes], applied: int) -> None:
        with self.lock:  # a reader may be scanning or catching up the same state
            rows = self.rows
            for k, v in puts:
                rows[k] = v
            for k in deletes:
                rows.pop(k, None)
            self.applied = max(self.applied, applied)

    def load(self, meta: TableMeta, table: pa.Table) -> None:
        """Add the rows of a snapshot (user columns, any order, other columns ignored; a column of another
        type, e.g. as a lake stores it, is cast to the table's, so the state holds the values the changelog
        would have put there)."""
        names = meta.schema.names
        cols = []
        for f in meta.schema:
            if f.name not in table.column_names:
                cols.append([None] * table.num_rows)
                continue
            col = table.column(f.name)
            cols.append(to_py(col if col.type == f.type else col.cast(f.type, safe=False)))
        key_idx = [names.index(c) for c in meta.primary_key]
        for row in zip(*cols):
            self.rows[key_bytes(tuple(row[i] for i in key_idx))] = _DUMPS(row, _PROTO)

    def replay(self, meta: TableMeta, batch: pa.RecordBatch, end: int) -> None:
        """Apply changelog rows (``+I``/``+U`` put, ``-D`` delete, ``-U`` is followed by its ``+U``)."""
        names = meta.schema.names
        have = batch.schema.names
        cols = [to_py(batch.column(c)) if c in have else [None] * batch.num_rows for c in names]
        kinds = batch.column(CHANGE).to_pylist()
        key_idx = [names.index(c) for c in meta.primary_key]
        rows = self.rows
        for row, kind in zip(zip(*cols), kinds):
            if kind == UPDATE_BEFORE:
                continue
            key = key_bytes(tuple(row[i] for i in key_idx))
            if kind == DELETE:
                rows.pop(key, None)
            else:
                rows[key] = _DUMPS(row, _PROTO)
        self.applied = end

    def scan_rows(self, n: int) -> list[tuple]:
        return [pad(_LOADS(v), n) for v in self.rows.values()]

    def lookup_rows(self, keys: Sequence[tuple], n: int) -> list[tuple]:
        out = []
        for raw in self.get([key_bytes(k) for k in keys]):
            if raw is not None:
                out.append(pad(_LOADS(raw), n))
        return out


@dataclass
class Merge:
    """A write's changelog and the state mutations to apply once it is committed."""

    changelog: pa.Table
    puts: list[tuple[bytes, bytes]]
    deletes: list[bytes]


def merge(meta: TableMeta, state: BucketState, part: pa.Table, kinds: list[str] | None) -> Merge:
    """The changelog of ``part`` against ``state`` (unchanged): the local store's merge code, vectorised for
    ``last_row``/``first_row``/``aggregate`` where it can, the row loop otherwise."""
    is_del = fastpk.delete_mask(kinds, part.num_rows)
    merged = fastpk.merge(meta, part, is_del, state) if fastpk.supported(meta, part, is_del) else None
    if merged is not None:
        return Merge(merged.changelog, list(zip(merged.put_keys, merged.put_values)), merged.delete_keys)
    merger = Merger(meta, part.column_names)
    rows = list(zip(*[to_py(part.column(i)) for i in range(part.num_columns)]))
    # Tablet.apply reads the state only through ``db.get(keys)``, and never touches its tablet: the
    # in-memory state serves as its db
    out_rows, out_kinds, touched = Tablet.apply(None, meta, merger, rows, kinds, state)  # type: ignore[arg-type]
    changelog = rows_to_table(meta.schema, out_rows, out_kinds)
    puts = [(k, _DUMPS(tuple(r), _PROTO)) for k, r in touched.items() if r is not None]
    deletes = [k for k, r in touched.items() if r is None]
    return Merge(changelog, puts, deletes)


def load_state(meta: TableMeta, bucket: int, got: tuple[pa.Table, int] | None, head: Head) -> BucketState:
    """A bucket's state from its snapshot ``got`` (rows, the end offset they reflect; None: from offset 0),
    to be caught up with the changelog after it. The bucket's ``head`` says what the changelog still holds."""
    state = BucketState(applied=0)
    if got is not None:
        rows, offset = got
        if not 0 <= int(offset) <= head.end_offset:
            raise TidehouseError(
                ErrorCode.STORAGE_CORRUPT,
                f"{meta.name} bucket {bucket}: the primary-key snapshot covers offsets up to "
                f"{offset}, but the hot bucket ends at {head.end_offset}",
                location=Location(path=meta.name),
                hint="the hot table was rebuilt while the lake kept the old one's snapshot; rebuild "
                "with --full-refresh (it resets both)",
            )
        state.load(meta, rows)
        state.applied = int(offset)
    if state.applied < head.start_offset:
        raise TidehouseError(
            ErrorCode.STORAGE_RANGE,
            f"{meta.name} bucket {bucket}: its primary-key state cannot be rebuilt: the changelog "
            f"from offset {state.applied} is needed, but retention deleted it up to {head.start_offset}"
            + ("" if got is not None else " and no snapshot is configured"),
            location=Location(path=meta.name),
            hint="give the store a bootstrap (the lake snapshot) that covers the deleted offsets",
        )
    return state
