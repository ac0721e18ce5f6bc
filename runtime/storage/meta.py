"""Table metadata on disk: ``<root>/<layer>/<name>/meta.json``, validation and additive schema evolution.

``meta.json`` holds the table definition (kind, buckets, keys, merge engine, aggregations, properties) and the
schema history: every schema the table has had, as a base64 Arrow IPC schema plus a readable rendering, with
its ``schema_id``. It is replaced atomically (temp file + fsync + rename + fsync of the directory).

Normalisation: every timestamp column of a table is stored as ``timestamp[us, tz=UTC]`` (Spark refuses
``timestamp[ms]``; a naive timestamp is taken to be UTC). Writes cast incoming timestamps of any unit or zone
to that type (sub-microsecond digits are truncated).

Evolution: re-creating a table with the same definition returns it; a schema that only appends new nullable
columns at the end is a new ``schema_id`` (old frames read with nulls in the new columns); anything else is
refused with ``SCHEMA_INCOMPATIBLE`` naming both schemas.
"""

from __future__ import annotations

import base64
import json
import os
import re
import tempfile
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.files import fsync_dir
from runtime.core.literals import (
    LOG,
    MERGE_ENGINES,
    PRIMARY_KEY,
    STORED_AGGREGATIONS,
    TABLE_KINDS,
    is_system_column,
)
from runtime.storage.api import SYSTEM_COLUMNS, TS_TYPE, TableMeta

FORMAT_VERSION = 1
_NAME = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*\Z"
)  # \Z: "$" would accept a trailing newline


def normalize_type(t: pa.DataType) -> pa.DataType:
    """The stored type of a user column type (timestamps become ``timestamp[us, tz=UTC]``)."""
    if pa.types.is_timestamp(t):
        return TS_TYPE
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(normalize_type(t.value_type)))
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(normalize_type(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(normalize_type(f.type)) for f in t])
    return t


def normalize_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, normalize_type(f.type), f.nullable) for f in schema])


def table_dir(root: Path, name: str) -> Path:
    layer, table = name.split(".", 1)
    return root / layer / table


def validate(meta: TableMeta) -> TableMeta:
    """Check a definition and return it normalised (schema types, default bucket key)."""
    loc = Location(path=meta.name)

    def bad(msg: str, code: ErrorCode = ErrorCode.TABLE_INVALID) -> TidehouseError:
        return TidehouseError(code, msg, location=loc)

    if not isinstance(meta.name, str) or not _NAME.match(meta.name):
        raise bad(f"table name {meta.name!r} must be '<layer>.<name>' with identifier parts")
    names = meta.schema.names
    if len(set(names)) != len(names):
        raise bad(f"duplicate column names in {names}")
    for n in names:
        if is_system_column(n):
            raise bad(f"column {n!r}: user columns may not start with '__' (reserved for system columns)")
    if meta.kind not in TABLE_KINDS:
        raise bad(f"kind must be 'log' or 'primary_key', got {meta.kind!r}")
    if meta.kind == PRIMARY_KEY and not meta.primary_key:
        raise bad("a primary-key table needs primary_key columns", ErrorCode.PRIMARY_KEY_INVALID)
    if meta.kind == LOG and meta.primary_key:
        raise bad("a log table has no primary key (use kind='primary_key')", ErrorCode.PRIMARY_KEY_INVALID)
    for col in meta.primary_key:
        if col not in names:
            raise bad(
                f"primary key column {col!r} is not in the schema {names}", ErrorCode.PRIMARY_KEY_INVALID
            )
    for col in meta.bucket_key:
        if col not in names:
            raise bad(f"bucket key column {col!r} is not in the schema {names}")
    if meta.is_primary_key and meta.bucket_key and not set(meta.bucket_key) <= set(meta.primary_key):
        raise bad(
            "the bucket key of a primary-key table must be part of the primary key",
            ErrorCode.PRIMARY_KEY_INVALID,
        )
    if not isinstance(meta.buckets, int) or meta.buckets < 1 or meta.buckets > 4096:
        raise bad(f"buckets must be an integer in 1..4096, got {meta.buckets!r}")
    if meta.merge_engine not in MERGE_ENGINES:
        raise bad(f"merge engine must be one of {MERGE_ENGINES}, got {meta.merge_engine!r}")
    if meta.aggregations and meta.merge_engine != "aggregate":
        raise bad("aggregations are only allowed with merge_engine='aggregate'")
    for col, fn in meta.aggregations.items():
        if col not in names or col in meta.primary_key:
            raise bad(f"aggregation column {col!r} must be a non-key column of the schema")
        if fn not in STORED_AGGREGATIONS:
            raise bad(f"aggregation {col}: function must be one of {STORED_AGGREGATIONS}, got {fn!r}")
    return replace(
        meta,
        schema=normalize_schema(meta.schema),
        primary_key=tuple(meta.primary_key),
        bucket_key=tuple(meta.bucket_key),
        aggregations=dict(meta.aggregations),
        properties=dict(meta.properties),
    )


def _schema_text(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}{'' if f.nullable else ' not null'}" for f in schema)


def evolve(current: TableMeta, wanted: TableMeta) -> TableMeta | None:
    """None when ``wanted`` equals ``current``; the evolved meta when it only appends nullable columns;
    else raise SCHEMA_INCOMPATIBLE naming both sides."""

    def refuse(what: str) -> TidehouseError:
        return TidehouseError(
            ErrorCode.SCHEMA_INCOMPATIBLE,
            f"table {current.name} exists with an incompatible definition ({what}): existing "
            f"[{_schema_text(current.schema)}] kind={current.kind} pk={list(current.primary_key)} "
            f"buckets={current.buckets} engine={current.merge_engine}; requested "
            f"[{_schema_text(wanted.schema)}] kind={wanted.kind} pk={list(wanted.primary_key)} "
            f"buckets={wanted.buckets} engine={wanted.merge_engine}",
            location=Location(path=current.name),
            hint="only new nullable columns at the end can be added; drop the table to change anything else",
        )

    for attr in ("kind", "primary_key", "buckets", "bucket_key", "merge_engine"):
        if getattr(current, attr) != getattr(wanted, attr):
            raise refuse(f"{attr} differs")
    old, new = current.schema, wanted.schema
    if len(new) < len(old):
        raise refuse("columns removed")
    for i, f in enumerate(old):
        g = new.field(i)
        if g.name != f.name or g.type != f.type or g.nullable != f.nullable:
            raise refuse(f"column {f.name!r} changed or moved")
    added = [new.field(i) for i in range(len(old), len(new))]
    for g in added:
        if not g.nullable:
            raise refuse(f"new column {g.name!r} must be nullable")
    for col, fn in wanted.aggregations.items():
        if current.aggregations.get(col, fn) != fn:
            raise refuse(f"aggregation of {col!r} changed")
        if col not in current.aggregations and col in old.names:
            raise refuse(f"aggregation added to existing column {col!r}")
    if not added and dict(wanted.aggregations) == dict(current.aggregations):
        return None
    return replace(
        current,
        schema=new,
        schema_id=current.schema_id + 1,
        aggregations={**current.aggregations, **wanted.aggregations},
    )


# -- json codec ------------------------------------------------------------------------------------------


def _schema_b64(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def _schema_from_b64(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def to_json(meta: TableMeta, history: list[dict[str, Any]]) -> dict[str, Any]:
    entry = {
        "schema_id": meta.schema_id,
        "schema": _schema_b64(meta.schema),
        "columns": _schema_text(meta.schema),
    }
    history = [h for h in history if h["schema_id"] != meta.schema_id] + [entry]
    return {
        "format": FORMAT_VERSION,
        "name": meta.name,
        "kind": meta.kind,
        "primary_key": list(meta.primary_key),
        "buckets": meta.buckets,
        "bucket_key": list(meta.bucket_key),
        "merge_engine": meta.merge_engine,
        "aggregations": dict(meta.aggregations),
        "properties": dict(meta.properties),
        "schema_id": meta.schema_id,
        "schemas": history,
    }


def from_json(doc: dict[str, Any]) -> TableMeta:
    sid = doc["schema_id"]
    schema = next(_schema_from_b64(h["schema"]) for h in doc["schemas"] if h["schema_id"] == sid)
    return TableMeta(
        name=doc["name"],
        schema=schema,
        kind=doc["kind"],
        primary_key=tuple(doc["primary_key"]),
        buckets=doc["buckets"],
        bucket_key=tuple(doc["bucket_key"]),
        merge_engine=doc["merge_engine"],
        aggregations=dict(doc["aggregations"]),
        schema_id=sid,
        properties=dict(doc["properties"]),
    )


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file in the same folder, fsync, rename, fsync the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def _checksum(body: dict[str, Any]) -> str:
    return f"{zlib.crc32(json.dumps(body, sort_keys=True, separators=(',', ':')).encode()):08x}"


def encode_doc(doc: dict[str, Any]) -> bytes:
    """``meta.json`` bytes with a CRC of the content: a flipped bit is detected rather than trusted."""
    body = {k: v for k, v in doc.items() if k != "checksum"}
    return json.dumps({**body, "checksum": _checksum(body)}, indent=1).encode()


def read_doc(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_bytes())
    except (ValueError, KeyError) as exc:
        raise TidehouseError(
            ErrorCode.STORAGE_CORRUPT,
            f"table metadata {path} is not valid JSON: {exc}",
            location=Location(file=str(path)),
        ) from exc
    if isinstance(doc, dict) and "checksum" in doc:  # files written before checksums have none
        body = {k: v for k, v in doc.items() if k != "checksum"}
        if doc["checksum"] != _checksum(body):
            raise TidehouseError(
                ErrorCode.STORAGE_CORRUPT,
                f"table metadata {path} is damaged (checksum mismatch)",
                location=Location(file=str(path)),
                hint="restore it from a backup, or drop and rebuild the table",
            )
    try:  # valid JSON is not enough: a damaged key or value must not escape as a KeyError later
        from_json(doc)
    except Exception as exc:
        raise TidehouseError(
            ErrorCode.STORAGE_CORRUPT,
            f"table metadata {path} is damaged: {type(exc).__name__}: {exc}",
            location=Location(file=str(path)),
        ) from exc
    return doc


def system_names() -> tuple[str, ...]:
    return SYSTEM_COLUMNS
