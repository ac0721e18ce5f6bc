"""Spark's pushed filters (``pyspark.sql.datasource.Filter``) as what the ``tidehouse`` source can prune with.

* :func:`iceberg_filter` — the filters on user columns that pyiceberg can evaluate, as one Iceberg row
  filter for the lake scans (files and row groups are skipped by their statistics).
* :func:`bucket_keys` — equality or ``IN`` on every bucket-key column: the only buckets (THE bucket function,
  :func:`runtime.storage.api.bucket_of`) that can hold a matching row.

Both only prune: the source returns every filter to Spark, which applies them to the rows it gets.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pyarrow as pa
from pyiceberg import expressions as ice
from pyspark.sql import datasource as ds

from runtime.storage.api import TableMeta, bucket_of

_COMPARE = {
    ds.GreaterThan: ice.GreaterThan,
    ds.GreaterThanOrEqual: ice.GreaterThanOrEqual,
    ds.LessThan: ice.LessThan,
    ds.LessThanOrEqual: ice.LessThanOrEqual,
}
_MAX_KEY_COMBINATIONS = 1024  # a wider IN list is not worth hashing: read every bucket


def _column(f, meta: TableMeta) -> str | None:
    path = getattr(f, "attribute", ())
    return path[0] if len(path) == 1 and path[0] in meta.schema.names else None


def _one(f, meta: TableMeta):
    name = _column(f, meta)
    if name is None:
        return None
    if isinstance(f, ds.EqualTo) and f.value is not None:
        return ice.EqualTo(name, f.value)
    if isinstance(f, ds.In) and f.value and all(v is not None for v in f.value):
        return ice.In(name, set(f.value))
    if type(f) in _COMPARE and f.value is not None:
        return _COMPARE[type(f)](name, f.value)
    if isinstance(f, ds.IsNull):
        return ice.IsNull(name)
    if isinstance(f, ds.IsNotNull):
        return ice.NotNull(name)
    return None


def iceberg_filter(filters: Sequence, meta: TableMeta):
    """The AND of the filters pyiceberg can evaluate (None when there is none)."""
    parts = []
    for f in filters:
        try:
            expr = _one(f, meta)
        except (TypeError, ValueError):  # a literal pyiceberg has no type for: Spark filters it alone
            expr = None
        if expr is not None:
            parts.append(expr)
    if not parts:
        return None
    out = parts[0]
    for expr in parts[1:]:
        out = ice.And(out, expr)
    return out


def bucket_keys(filters: Sequence, meta: TableMeta) -> list[int] | None:
    """The buckets a row matching every filter can be in, when they fix every bucket-key column (else
    None)."""
    key = meta.effective_bucket_key
    if meta.buckets <= 1 or not key:
        return None
    values: dict[str, list] = {}
    for f in filters:
        name = _column(f, meta)
        if name not in key:
            continue
        if isinstance(f, ds.EqualTo) and f.value is not None:
            values[name] = [f.value]
        elif isinstance(f, ds.In) and f.value and all(v is not None for v in f.value):
            values[name] = list(f.value)
    if set(values) != set(key):
        return None
    combos = list(itertools.islice(itertools.product(*(values[c] for c in key)), _MAX_KEY_COMBINATIONS + 1))
    if len(combos) > _MAX_KEY_COMBINATIONS:
        return None
    try:
        table = pa.table(
            {
                c: pa.array([combo[i] for combo in combos], meta.schema.field(c).type)
                for i, c in enumerate(key)
            }
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):  # a literal of another type: no pruning
        return None
    return sorted(set(bucket_of(table, key, meta.buckets).to_pylist()))
