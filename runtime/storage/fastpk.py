"""Vectorised primary-key merge for ``last_row`` and ``first_row``: Arrow and numpy instead of a loop per row.

It computes exactly what :meth:`runtime.storage.pk.Tablet.apply` computes row by row (that loop stays the
reference and handles every other case), in a fixed number of passes over the batch:

1. the key bytes of every row (the same encoding as :func:`~runtime.storage.pk.key_bytes`) and a dense code
   per distinct key; one RocksDB multi-get for the distinct keys;
2. per row, the image it merges into: the previous row of the same key in this write (or nothing, if that
   row was a delete), else the stored row. A write with several rows for one key is therefore applied in
   order, as the row loop does;
3. the no-op check compares old and new images column by column (``NaN`` equals ``NaN``, null equals null);
4. the changelog (``+I`` / ``-U`` ``+U`` / ``-D``, in input order) is one Arrow ``take`` over the batch and
   the old images;
5. the new state is one ``WriteBatch``: per key touched, the image of its last row, or a delete.

``first_row`` takes this path only when the write has no deletes (then a row matters only when its key is
neither stored nor seen earlier in the write). ``aggregate`` takes it when the write has no deletes and one
row per key (what an incremental aggregation's partials are): each column merged with Arrow as the row loop's
``Merger`` merges it (``sum``, ``min``, ``max``, ``count``, ``last_non_null``, the implicit ``last``); an
integer sum that overflows, and several rows of one key, take the row loop. Other engines, deletes under
``first_row`` or ``aggregate`` and columns whose values Arrow cannot compare (lists, structs, maps, ...) take
the row loop.

One documented difference from the loop, invisible in practice: when an upsert is a no-op because its values
*compare* equal without being bit-identical (``-0.0`` vs ``0.0``), the loop keeps the stored bits and this
path may store the incoming ones.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from rocksdict import Rdict, WriteBatch

from runtime.core.literals import IMPLICIT_AGGREGATION
from runtime.storage.api import CHANGE, DELETE, ROW_KINDS, UPDATE_BEFORE, TableMeta
from runtime.storage.pk import APPLIED, ROW, from_py, pad, to_py

_DUMPS = pickle.dumps
_LOADS = pickle.loads
_PROTO = 5
_DELETES = frozenset((UPDATE_BEFORE, DELETE))
_KIND_ARRAY = pa.array(ROW_KINDS, pa.string())  # +I, -U, +U, -D at codes 0..3
_I, _UB, _UA, _D = 0, 1, 2, 3


def comparable(t: pa.DataType) -> bool:
    """Whether Arrow's ``equal`` kernel compares values of this type the way Python's ``==`` does."""
    return (
        pa.types.is_integer(t)
        or (pa.types.is_floating(t) and not pa.types.is_float16(t))
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_decimal(t)
        or pa.types.is_temporal(t)
    )


def delete_mask(kinds: Sequence[str | None] | None, n: int) -> np.ndarray:
    if kinds is None:
        return np.zeros(n, dtype=bool)
    return np.fromiter((k in _DELETES for k in kinds), dtype=bool, count=n)


def supported(meta: TableMeta, part: pa.Table, is_del: np.ndarray) -> bool:
    """Whether this write can take the vectorised path (else the row loop of :class:`~.pk.Tablet`)."""
    if meta.merge_engine in ("first_row", "aggregate"):
        if is_del.any():
            return False
    elif meta.merge_engine != "last_row":
        return False
    if meta.merge_engine == "aggregate" and not all(
        pa.types.is_integer(meta.schema.field(c).type) or pa.types.is_floating(meta.schema.field(c).type)
        for c, fn in meta.aggregations.items()
        if fn in ("sum", "count") and c in meta.schema.names
    ):
        return False
    return part.column_names == meta.schema.names and all(comparable(f.type) for f in meta.schema)


def key_list(part: pa.Table, primary_key: Sequence[str]) -> list[bytes]:
    """The KV key of every row; byte-identical to ``key_bytes(tuple(pk values))``."""
    cols = [to_py(part.column(c)) for c in primary_key]
    if len(cols) == 1:
        return [ROW + _DUMPS((v,), _PROTO) for v in cols[0]]
    return [ROW + _DUMPS(t, _PROTO) for t in zip(*cols)]


def rows_equal(a: pa.Table, b: pa.Table) -> np.ndarray:
    """Per row, whether every column of ``a`` equals ``b`` (null == null, NaN == NaN)."""
    acc = None
    for ca, cb in zip(a.columns, b.columns):
        ca, cb = ca.combine_chunks(), cb.combine_chunks()
        eq = pc.fill_null(pc.equal(ca, cb), False)
        if ca.null_count or cb.null_count:
            eq = pc.or_(eq, pc.and_(pc.is_null(ca), pc.is_null(cb)))
        if pa.types.is_floating(ca.type):
            eq = pc.or_(eq, pc.and_(pc.fill_null(pc.is_nan(ca), False), pc.fill_null(pc.is_nan(cb), False)))
        acc = eq if acc is None else pc.and_(acc, eq)
    if acc is None:
        return np.ones(a.num_rows, dtype=bool)
    return acc.to_numpy(zero_copy_only=False)


@dataclass
class Merged:
    """What one write does to a bucket: the changelog to append and the KV mutations to commit after it."""

    changelog: pa.Table  # user columns + __change
    put_keys: list[bytes]
    put_values: list[bytes]
    delete_keys: list[bytes]


def _stored_table(schema: pa.Schema, raw: list[bytes | None]) -> pa.Table:
    n = len(schema)
    rows = [pad(_LOADS(r), n) for r in raw if r is not None]
    cols = list(zip(*rows)) if rows else [()] * n
    return pa.Table.from_arrays([from_py(cols[i], f.type) for i, f in enumerate(schema)], schema=schema)


def _encode(table: pa.Table) -> list[bytes]:
    cols = [to_py(c) for c in table.columns]
    return [_DUMPS(t, _PROTO) for t in zip(*cols)]


def merge(meta: TableMeta, part: pa.Table, is_del: np.ndarray, db: Rdict) -> Merged | None:
    """Merge ``part`` (every column of the table, in schema order) into the state held by ``db``; None when
    the write must take the row loop after all (``aggregate``: several rows of a key, an integer overflow)."""
    new = part.combine_chunks()
    new = pa.Table.from_arrays(new.columns, schema=pa.schema([f.with_nullable(True) for f in meta.schema]))
    n = new.num_rows
    keys = key_list(new, meta.primary_key)
    if meta.merge_engine == "aggregate":
        return _aggregate(meta, new, keys, db)
    ids: dict[bytes, int] = {}
    code = np.fromiter((ids.setdefault(k, len(ids)) for k in keys), dtype=np.int64, count=n)
    uniq = list(ids)
    raw = db.get(uniq)
    has_stored = np.fromiter((r is not None for r in raw), dtype=bool, count=len(uniq))
    stored = _stored_table(new.schema, raw)
    stored_pos = np.cumsum(has_stored) - 1  # row of each distinct key in ``stored`` (if it has one)

    # the previous row of the same key in this write (-1: none), and the last row of each key
    order = np.argsort(code, kind="stable")
    sc = code[order]
    same = sc[1:] == sc[:-1]
    prev = np.full(n, -1, dtype=np.int64)
    prev[order[1:][same]] = order[:-1][same]
    last = order[np.r_[np.flatnonzero(~same), n - 1]]  # indexed by key code (codes are 0..u-1, sorted)
    has_prev = prev >= 0
    rows = np.arange(n, dtype=np.int64)

    if meta.merge_engine == "first_row":  # no deletes here: only the first row of an unseen key counts
        insert = ~has_prev & ~has_stored[code]
        put = np.flatnonzero(insert)
        changelog = new.take(pa.array(put)).append_column(
            CHANGE, _KIND_ARRAY.take(np.zeros(len(put), np.int8))
        )
        return Merged(changelog, [keys[i] for i in put], _encode(new.take(pa.array(put))), [])

    # last_row: the old image of row i is in ``base = new ++ stored`` at ``old_src[i]``
    base = pa.concat_tables([new, stored])
    old_exists = np.where(has_prev, ~is_del[np.maximum(prev, 0)], has_stored[code])
    old_src = np.where(has_prev, prev, n + stored_pos[code])
    ups = ~is_del
    cand = ups & old_exists
    equal = np.zeros(n, dtype=bool)
    ci = np.flatnonzero(cand)
    if len(ci):
        equal[ci] = rows_equal(base.take(pa.array(old_src[ci])), new.take(pa.array(ci)))
    insert = ups & ~old_exists
    update = cand & ~equal
    delete = is_del & old_exists

    counts = insert.astype(np.int64) + 2 * update + delete
    pos = np.cumsum(counts) - counts
    emit = counts > 0
    src = np.empty(int(counts.sum()), dtype=np.int64)
    kind = np.empty(len(src), dtype=np.int8)
    src[pos[emit]] = np.where(insert, rows, old_src)[emit]
    kind[pos[emit]] = np.where(insert, _I, np.where(update, _UB, _D))[emit]
    src[pos[update] + 1] = rows[update]
    kind[pos[update] + 1] = _UA
    changelog = base.take(pa.array(src)).append_column(CHANGE, _KIND_ARRAY.take(pa.array(kind)))

    changed = np.bincount(code[emit], minlength=len(uniq)) > 0
    final = last[changed]
    final_del = is_del[final]
    put = final[~final_del]
    return Merged(
        changelog,
        [keys[i] for i in put],
        _encode(new.take(pa.array(put))),
        [keys[i] for i in final[final_del]],
    )


def _aggregate(meta: TableMeta, new: pa.Table, keys: list[bytes], db: Rdict) -> Merged | None:
    """The ``aggregate`` engine over a write of one row per key and no deletes: per row, the stored row
    merged with it column by column as :class:`~.pk.Merger` does; a changed row is ``-U``/``+U``, a new one
    ``+I``, an unchanged one nothing."""
    n = new.num_rows
    if len(set(keys)) != n:
        return None
    raw = db.get(keys)
    has_stored = np.fromiter((r is not None for r in raw), dtype=bool, count=n)
    stored = _stored_table(new.schema, raw)
    at = np.cumsum(has_stored) - 1
    old = stored.take(pa.array(np.where(has_stored, at, 0), mask=~has_stored))  # aligned with ``new``
    pk = set(meta.primary_key)
    columns = []
    try:
        for f in meta.schema:
            o, v = old.column(f.name).combine_chunks(), new.column(f.name).combine_chunks()
            fn = meta.aggregations.get(f.name, IMPLICIT_AGGREGATION)
            if f.name in pk or fn == IMPLICIT_AGGREGATION:
                m = v
            elif fn == "sum":
                m = pc.coalesce(pc.add_checked(o, v), o, v)
            elif fn in ("min", "max"):  # Python's min(old, new): the new value only if it is smaller
                better = pc.less(v, o) if fn == "min" else pc.greater(v, o)
                m = pc.coalesce(pc.if_else(better, v, o), o, v)
            elif fn == "count":  # non-null values counted; the first row of a key counts itself
                m = pc.add_checked(pc.coalesce(o, pa.scalar(0, f.type)), pc.cast(pc.is_valid(v), f.type))
            else:  # last_non_null
                m = pc.coalesce(v, o)
            columns.append(m.cast(f.type))
    except pa.ArrowInvalid:  # an integer sum overflows: the row loop says so as it does for every write
        return None
    merged = pa.Table.from_arrays(columns, schema=new.schema)
    equal = np.zeros(n, dtype=bool)
    si = np.flatnonzero(has_stored)
    if len(si):
        idx = pa.array(si)
        equal[si] = rows_equal(old.take(idx), merged.take(idx))
    insert, update = ~has_stored, has_stored & ~equal
    counts = insert.astype(np.int64) + 2 * update
    pos = np.cumsum(counts) - counts
    rows = np.arange(n, dtype=np.int64)
    base = pa.concat_tables([merged, old])  # merged row i at i, its stored row at n + i
    src = np.empty(int(counts.sum()), dtype=np.int64)
    kind = np.empty(len(src), dtype=np.int8)
    src[pos[insert]] = rows[insert]
    kind[pos[insert]] = _I
    src[pos[update]] = n + rows[update]
    kind[pos[update]] = _UB
    src[pos[update] + 1] = rows[update]
    kind[pos[update] + 1] = _UA
    changelog = base.take(pa.array(src)).append_column(CHANGE, _KIND_ARRAY.take(pa.array(kind)))
    put = np.flatnonzero(insert | update)
    return Merged(changelog, [keys[i] for i in put], _encode(merged.take(pa.array(put))), [])


def write_batch(merged: Merged, applied: int) -> WriteBatch:
    """The KV mutations and the applied offset as one atomic ``WriteBatch``."""
    wb = WriteBatch(raw_mode=True)
    for k, v in zip(merged.put_keys, merged.put_values, strict=True):
        wb.put(k, v)
    for k in merged.delete_keys:
        wb.delete(k)
    wb.put(APPLIED, str(applied).encode())
    return wb
