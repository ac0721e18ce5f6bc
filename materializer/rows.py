"""What a micro-batch does to its rows, in Arrow, the same on both data paths (driver and executors).

These functions take and return Arrow tables and touch no store and no Spark, so the driver runs them on a
batch it read itself and an executor task runs them on the rows it holds:

* :func:`split_corrupt` / :func:`split_missing` — source records that do not parse, or lack a column the
  source declares ``NOT NULL``: the rows to keep, and the quarantine rows (raw record, reason, which
  :mod:`materializer.malformed` words, and the file it came from: the :data:`FILE` column a source's
  reader adds to such records);
* :func:`expectation_exprs` / :func:`split_expectations` — the Spark expressions that flag violators of a
  table's expectations, and the split of its rows by those flags (kept, dropped, quarantined, fail);
* :func:`keys_table` — rows as upserts or as deletes of their key (``__change``), for primary-key tables.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc

from materializer.malformed import Malformed
from runtime.core.errors import ErrorCode, TidehouseError
from runtime.core.literals import is_system_column
from runtime.core.uris import scheme_of
from runtime.storage.api import CHANGE, DELETE, TS_TYPE

CORRUPT = "_corrupt_record"
# a file source's records that go to quarantine carry the URI of their file here (null for the others; a
# system column: no source column has its name)
FILE = "__source_file"


def quarantine_rows(
    raw: Sequence[str] | pa.ChunkedArray,
    reason: str | Sequence[str] | pa.ChunkedArray,
    source: str,
    files: Sequence[str | None] | pa.ChunkedArray | None = None,
) -> pa.Table:
    """The quarantine table's rows: each ``raw`` record with its ``reason`` (one for all, or one each; lists
    or Arrow string columns) and the file it was read from (``files``: URIs, a local file's shown as its
    path; None: not read from a file, an expectation's violator for one)."""
    n = len(raw)
    reasons = [reason] * n if isinstance(reason, str) else reason
    now = pa.array([int(time.time() * 1_000_000)] * n, pa.int64()).cast(TS_TYPE)
    if isinstance(files, pa.ChunkedArray):
        files = files.to_pylist()
    return pa.table(
        {
            "raw": raw if isinstance(raw, pa.ChunkedArray) else pa.array(raw, pa.string()),
            "reason": reasons if isinstance(reasons, pa.ChunkedArray) else pa.array(reasons, pa.string()),
            "source": pa.array([source] * n, pa.string()),
            "quarantined_at": now,
            "file": pa.array([None] * n if files is None else [shown_file(f) for f in files], pa.string()),
        }
    )


def shown_file(uri: str | None) -> str | None:
    """A source file's URI as the quarantine shows it: a local file's path, any other URI as it is."""
    if not uri or scheme_of(uri) != "file":  # Spark's input_file_name() is "" where it knows no file
        return uri or None
    return unquote(urlparse(uri).path)


def _files(data: pa.Table, mask) -> pa.ChunkedArray | None:
    return data.column(FILE).filter(mask) if FILE in data.column_names else None


def keys_table(meta_schema: pa.Schema, rows: pa.Table, key: tuple[str, ...], kind: str) -> pa.Table:
    """Rows with the full table schema, ``__change`` = kind (deletes carry only their key columns)."""
    cols = []
    for f in meta_schema:
        if f.name in rows.column_names and (kind != DELETE or f.name in key):
            cols.append(rows.column(f.name).cast(f.type))
        else:
            cols.append(pa.nulls(rows.num_rows, f.type))
    cols.append(pa.array([kind] * rows.num_rows, pa.string()))
    return pa.Table.from_arrays(cols, schema=meta_schema.append(pa.field(CHANGE, pa.string())))


def split_corrupt(data: pa.Table, source: str, why: Malformed) -> tuple[pa.Table, pa.Table]:
    """(rows that parsed, quarantine rows of the records that did not: verbatim, with the field and value
    Spark refused where ``why`` can tell)."""
    if CORRUPT not in data.column_names or data.column(CORRUPT).null_count == data.num_rows:
        return data, quarantine_rows([], "", source)  # every record parsed: no copy of the rows
    corrupt = pc.is_valid(data.column(CORRUPT))
    raws = raw_texts(data.filter(corrupt).column(CORRUPT))
    rows = quarantine_rows(raws, why.reasons(raws), source, _files(data, corrupt))
    return data.filter(pc.invert(corrupt)), rows


def raw_texts(column: pa.ChunkedArray) -> list[str]:
    """The records Spark kept verbatim as text: its bytes, which need not be UTF-8 (a record with an invalid
    byte is malformed for Spark's parser), are decoded with each invalid byte as U+FFFD."""
    try:
        return column.to_pylist()
    except UnicodeDecodeError:
        raw = column.cast(pa.binary()).to_pylist()
        return [None if r is None else r.decode("utf-8", "replace") for r in raw]


def split_missing(
    data: pa.Table, required: Sequence[str], source: str, fmt: str
) -> tuple[pa.Table, pa.Table]:
    """(rows that have every column the source declares ``NOT NULL``, quarantine rows of the others: the
    parsed row as JSON and the columns it lacks — a renamed or dropped field upstream)."""
    required = [c for c in required if c in data.column_names]
    if not required or data.num_rows == 0:
        return data, quarantine_rows([], "", source)
    if not any(data.column(c).null_count for c in required):
        return data, quarantine_rows([], "", source)  # every record has them: no copy of the rows
    missing = [pc.is_null(data.column(c)) for c in required]
    mask = missing[0]
    for m in missing[1:]:
        mask = pc.or_(mask, m)
    bad = data.filter(mask)
    user = [c for c in bad.column_names if c != CORRUPT and not is_system_column(c)]
    absent = [
        [c for c, m in zip(required, flags) if m]
        for flags in zip(*[m.filter(mask).to_pylist() for m in missing])
    ]
    reasons = [
        f"{fmt} record lacks required column(s) {', '.join(a)} (declared NOT NULL in the source schema; a "
        f"renamed or dropped field?)"
        for a in absent
    ]
    raws = [json.dumps(r, default=str, sort_keys=True) for r in bad.select(user).to_pylist()]
    return data.filter(pc.invert(mask)), quarantine_rows(raws, reasons, source, _files(data, mask))


def expectation_exprs(expect: Sequence) -> list[str]:
    """One boolean column per expectation, ``e0``, ``e1``...: true when the row satisfies it (a null
    condition counts as a violation)."""
    return [f"coalesce(CAST(({e.condition}) AS BOOLEAN), false) AS `e{i}`" for i, e in enumerate(expect)]


@dataclass
class Violations:
    """A batch's rows split by its table's expectations."""

    kept: pa.Table
    violators: pa.Table
    raws: list[str] = field(default_factory=list)  # every violator as JSON (in violator order)
    reasons: list[str] = field(default_factory=list)  # per violator: the first expectation it fails
    quarantine: list[bool] = field(default_factory=list)  # per violator: whether it goes to quarantine
    counts: dict[str, int] = field(default_factory=dict)  # violations per expectation


def split_expectations(table: str, rows: pa.Table, passed: pa.Table, expect: Sequence) -> Violations:
    """Split ``rows`` by the flags of :func:`expectation_exprs` (``passed``: its columns ``e0``...), raising
    ``QUERY_FAILED`` for a violated expectation set to fail the flow."""
    failed = [pc.invert(passed.column(f"e{i}").combine_chunks()) for i in range(len(expect))]
    bad = failed[0] if failed else pa.array([False] * rows.num_rows)
    for mask in failed[1:]:
        bad = pc.or_(bad, mask)
    if not failed or not pc.any(bad).as_py():
        return Violations(rows, rows.slice(0, 0))
    violators = rows.filter(bad)
    out = Violations(rows.filter(pc.invert(bad)), violators)
    out.raws = [json.dumps(r, default=str, sort_keys=True) for r in violators.to_pylist()]
    reasons: list[str | None] = [None] * violators.num_rows
    quarantined = [False] * violators.num_rows
    for e, mask in zip(expect, failed):
        flags = mask.filter(bad).to_pylist()
        count = sum(flags)
        if not count:
            continue
        if e.on_violation == "fail":
            raise TidehouseError(
                ErrorCode.QUERY_FAILED,
                f"table {table}: {count} row(s) violate expectation '{e.name}' ({e.condition}), which is set "
                "to fail the flow",
                hint="fix the input, or set on_violation: drop or quarantine",
            )
        out.counts[e.name] = count
        for j, flag in enumerate(flags):
            if flag:
                if reasons[j] is None:
                    reasons[j] = f"expectation {e.name} failed: {e.condition}"
                quarantined[j] = quarantined[j] or e.on_violation == "quarantine"
    out.reasons, out.quarantine = [r or "" for r in reasons], quarantined
    return out


def key_tuples(rows: pa.Table, columns: Sequence[str]) -> list[tuple]:
    """The rows' values of ``columns``, a tuple per row (``()`` per row for no columns)."""
    if not columns:
        return [()] * rows.num_rows
    return list(zip(*[rows.column(c).to_pylist() for c in columns])) if rows.num_rows else []


def several_rows(table: str, action: str, keys: list[tuple]) -> str | None:
    """Why a result of ``action`` whose primary keys are ``keys`` is refused (a key twice), or None."""
    counts = Counter(keys)
    dup = next((k for k in keys if counts[k] > 1), None)
    if dup is None:
        return None
    return f"table {table}: the SQL of {action} yields several rows for primary key {dup}"


def held_otherwise(
    store, table: str, action: str, key: Sequence[str], rows: pa.Table, where: str
) -> str | None:
    """Why ``rows`` (cast to the table's types) are refused: a primary key the table holds with other values
    comes from another of ``where`` (the partitions); None when none does. A replay's own earlier write
    holds the same values (NaN equals itself here)."""
    found = store.lookup(table, rows.select(list(key)))
    if found.num_rows == 0:
        return None
    mine = dict(zip(key_tuples(rows, key), rows.to_pylist()))
    for k, row in zip(key_tuples(found, key), found.select(rows.column_names).to_pylist()):
        if repr(mine.get(k)) != repr(row):
            return f"table {table}: the SQL of {action} yields rows with primary key {k} for two {where}"
    return None
