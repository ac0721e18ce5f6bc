"""A small in-memory :class:`TableStore` for fast lake tests (last_row merge engine only).

The lake tests run against this AND the real :class:`runtime.storage.local.LocalTableStore` (see
``conftest.py``), so the tiering code is checked against the interface, not one implementation's quirks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

import pyarrow as pa

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.storage.api import (
    BUCKET,
    CHANGE,
    DELETE,
    INSERT,
    OFFSET,
    TS,
    TS_TYPE,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    BatchInfo,
    TableMeta,
    TableStore,
    WriteResult,
    bucket_of,
)


class MemoryTableStore(TableStore):
    def __init__(self) -> None:
        self._meta: dict[str, TableMeta] = {}
        self._logs: dict[str, list[list[tuple[BatchInfo, pa.Table]]]] = {}
        self._state: dict[str, dict[tuple, dict]] = {}
        self._seqs: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def create_table(self, meta: TableMeta, *, exist_ok: bool = True) -> TableMeta:
        with self._lock:
            if meta.name in self._meta:
                old = self._meta[meta.name]
                if old.schema.equals(meta.schema):
                    return old
                evolved = TableMeta(**{**old.__dict__, "schema": meta.schema, "schema_id": old.schema_id + 1})
                self._meta[meta.name] = evolved
                return evolved
            self._meta[meta.name] = meta
            self._logs[meta.name] = [[] for _ in range(meta.buckets)]
            self._state[meta.name] = {}
            return meta

    def get_table(self, name: str) -> TableMeta:
        if name not in self._meta:
            raise TidehouseError(ErrorCode.TABLE_UNKNOWN, f"no table {name}")
        return self._meta[name]

    def list_tables(self) -> list[str]:
        return sorted(self._meta)

    def incarnation(self, name: str) -> str:
        return f"{name}:{id(self._meta[name])}"  # a re-created table is a new meta object

    def drop_table(self, name: str) -> None:
        self._meta.pop(name, None)

    def write(self, name, data, *, writer, seq, origin_ts=None) -> WriteResult:
        meta = self.get_table(name)
        data = pa.table(data) if isinstance(data, pa.RecordBatch) else data
        with self._lock:
            if self._seqs.get((name, writer), -1) >= seq:
                return WriteResult({}, skipped=True)
            self._seqs[(name, writer)] = seq
            user = [f.name for f in meta.schema]
            buckets = bucket_of(data, meta.effective_bucket_key, meta.buckets).to_pylist()
            rows = data.to_pylist()
            per_bucket: dict[int, list[dict]] = {}
            for b, row in zip(buckets, rows):
                out = {c: row.get(c) for c in user}
                if meta.is_primary_key:
                    key = tuple(row[k] for k in meta.primary_key)
                    state = self._state[name]
                    kind = row.get(CHANGE, INSERT)
                    if kind in (DELETE, UPDATE_BEFORE):
                        if key in state:
                            per_bucket.setdefault(b, []).append({**state.pop(key), CHANGE: DELETE})
                        continue
                    if key in state:
                        per_bucket.setdefault(b, []).append({**state[key], CHANGE: UPDATE_BEFORE})
                        per_bucket[b].append({**out, CHANGE: UPDATE_AFTER})
                    else:
                        per_bucket.setdefault(b, []).append({**out, CHANGE: INSERT})
                    state[key] = out
                else:
                    per_bucket.setdefault(b, []).append(out)
            ranges = {}
            now = time.time()
            for b, batch_rows in per_bucket.items():
                log = self._logs[name][b]
                base = log[-1][0].base_offset + log[-1][0].rows if log else 0
                schema = meta.schema
                if meta.is_primary_key:
                    schema = schema.append(pa.field(CHANGE, pa.string()))
                table = pa.Table.from_pylist(batch_rows, schema=schema)
                log.append((BatchInfo(b, base, table.num_rows, now, origin_ts, writer, seq), table))
                ranges[b] = (base, base + table.num_rows)
            return WriteResult(ranges)

    def last_seq(self, name, writer):
        return self._seqs.get((name, writer))

    def end_offsets(self, name) -> list[int]:
        return [log[-1][0].base_offset + log[-1][0].rows if log else 0 for log in self._logs[name]]

    def start_offsets(self, name) -> list[int]:
        return [0 for _ in self._logs[name]]  # this store never deletes (delete_before is a no-op)

    def read(
        self, name, bucket, start, end=None, *, columns: Sequence[str] | None = None
    ) -> Iterator[pa.RecordBatch]:
        meta = self.get_table(name)
        for info, table in list(self._logs[name][bucket]):
            lo, hi = info.base_offset, info.base_offset + info.rows
            if hi <= start or (end is not None and lo >= end):
                continue
            a, b = max(start, lo) - lo, (min(end, hi) if end is not None else hi) - lo
            part = table.slice(a, b - a)
            cols = list(columns) if columns else [f.name for f in meta.schema]
            arrays = [
                part.column(c)
                if c in part.column_names
                else pa.nulls(part.num_rows, meta.schema.field(c).type)
                for c in cols
            ]
            names = list(cols)
            arrays += [
                pa.array(range(lo + a, lo + b), pa.int64()),
                pa.array([bucket] * part.num_rows, pa.int32()),
                pa.array([int(info.commit_ts * 1e6)] * part.num_rows, pa.int64()).cast(TS_TYPE),
            ]
            names += [OFFSET, BUCKET, TS]
            if meta.is_primary_key:
                arrays.append(part.column(CHANGE))
                names.append(CHANGE)
            yield from pa.Table.from_arrays(arrays, names=names).to_batches()

    def scan(self, name, *, columns=None) -> pa.Table:
        meta = self.get_table(name)
        if meta.is_primary_key:
            return pa.Table.from_pylist(list(self._state[name].values()), schema=meta.schema)
        parts = [
            pa.Table.from_arrays(
                [
                    t.column(f.name) if f.name in t.column_names else pa.nulls(t.num_rows, f.type)
                    for f in meta.schema
                ],
                schema=meta.schema,
            )
            for log in self._logs[name]
            for _, t in log
        ]
        return pa.concat_tables(parts) if parts else meta.schema.empty_table()

    def lookup(self, name, keys):
        raise NotImplementedError

    def batch_info(self, name, bucket):
        log = self._logs[name][bucket]
        return log[-1][0] if log else None

    def offset_times(self, name, bucket, offset):
        for info, _ in self._logs[name][bucket]:
            if info.base_offset <= offset < info.base_offset + info.rows:
                return info
        return None

    def delete_before(self, name, bucket, offset, *, older_than) -> int:
        return 0
