"""Union reads: SQL over every table's lake data plus its hot tail, with DuckDB over Arrow.

For every table a query names:

* ``layer.t`` — the union read, user columns only:

  - **log table**: the lake rows of the current lake snapshot (which hold exactly the hot offsets below the
    snapshot's ``tidehouse.offsets``) followed by the hot rows from those offsets to the current end.
    The hot log is append-only, so reading the lake snapshot first and the hot tail second is consistent
    even while tiering commits in between (the snapshot is pinned by id).
  - **primary-key table**: the lake's state at its snapshot, overridden by the hot changelog since the
    snapshot's offsets, collapsed to the last row kind per key: keys whose last change is a delete are
    removed, upserted keys take their new image (hot wins). That equals the hot current state without
    reading the whole hot state, and stays correct when old hot segments were deleted by retention.
  - a table only the lake has (its hot table was dropped) reads the lake; one never tiered reads the hot
    log alone.
* ``layer.t$lake`` — the lake table only, as stored (including the kept ``__`` columns).
* ``layer.t$changelog`` — the hot log with its system columns (``__offset``, ``__bucket``, ``__ts`` and, for
  primary-key tables, ``__change``), from the earliest offset the hot storage still holds.

Table references are not rewritten in the SQL text: each layer becomes a DuckDB schema and each table a view
of a registered Arrow table, so ``ods.clicks`` resolves by DuckDB's own name binding, and string literals or
comments that happen to contain ``ods.clicks`` are untouched. Which tables to load is found with DuckDB's
tokenizer (identifier ``.`` identifier, quoted or not), so only the tables a query names are read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.lake.apply import collapse_changelog, key_mask
from runtime.lake.catalog import Lake
from runtime.lake.state import lake_offsets
from runtime.lake.tiering import read_range
from runtime.storage.api import SYSTEM_COLUMNS, TableMeta, TableStore

LAKE_SUFFIX = "$lake"
CHANGELOG_SUFFIX = "$changelog"


@dataclass(frozen=True)
class TableRef:
    layer: str
    name: str  # without suffix
    view: str  # "" (union), "lake" or "changelog"

    @property
    def table(self) -> str:
        return f"{self.layer}.{self.name}"

    @property
    def relation(self) -> str:
        return self.name + ({"lake": LAKE_SUFFIX, "changelog": CHANGELOG_SUFFIX}.get(self.view, ""))


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1].replace('""', '"')
    return text


def referenced_tables(sql: str, tables: Iterable[str]) -> list[TableRef]:
    """Which of ``tables`` (``layer.name``) the SQL names, plain or with ``$lake`` / ``$changelog``."""
    known = set(tables)
    try:
        tokens = duckdb.tokenize(sql)
    except Exception as exc:
        raise TidehouseError(ErrorCode.QUERY_INVALID, f"cannot read the query: {exc}") from exc
    texts = []
    for i, (pos, kind) in enumerate(tokens):
        end = tokens[i + 1][0] if i + 1 < len(tokens) else len(sql)
        texts.append((sql[pos:end].strip(), kind))
    ident = duckdb.token_type.identifier
    keyword = duckdb.token_type.keyword
    found: dict[tuple[str, str, str], TableRef] = {}
    for i in range(len(texts) - 2):
        (a, ka), (dot, _), (b, kb) = texts[i], texts[i + 1], texts[i + 2]
        if dot != "." or ka not in (ident, keyword) or kb not in (ident, keyword):
            continue
        if i > 0 and texts[i - 1][0] == ".":  # part of a longer dotted name (catalog.schema.table)
            continue
        layer, rel = _unquote(a), _unquote(b)
        for suffix, view in ((LAKE_SUFFIX, "lake"), (CHANGELOG_SUFFIX, "changelog"), ("", "")):
            if suffix and not rel.endswith(suffix):
                continue
            name = rel[: len(rel) - len(suffix)] if suffix else rel
            if f"{layer}.{name}" in known:
                found[(layer, name, view)] = TableRef(layer, name, view)
                break
    return list(found.values())


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data`` with exactly ``schema``'s columns and types (missing columns as nulls)."""
    cols = []
    for f in schema:
        if f.name in data.column_names:
            col = data.column(f.name)
            cols.append(col if col.type == f.type else col.cast(f.type, safe=False))
        else:
            cols.append(pa.nulls(data.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=pa.schema([pa.field(f.name, f.type) for f in schema]))


def _user_schema(meta: TableMeta) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type) for f in meta.schema])


class UnionReader:
    """Builds the Arrow table behind each view name; see the module docstring for the semantics."""

    def __init__(self, store: TableStore, lake: Lake) -> None:
        self.store = store
        self.lake = lake
        self._hot = set(store.list_tables())
        self._lake = set(lake.list_tables())

    @property
    def tables(self) -> set[str]:
        return self._hot | self._lake

    def lake_snapshot(self, name: str, buckets: int):
        """(lake rows of the current snapshot, offsets it covers) — (None, zeros) if never tiered."""
        if name not in self._lake:
            return None, [0] * buckets
        table = self.lake.load(name)
        offsets, _ = lake_offsets(table, buckets)
        snap = table.current_snapshot()
        if snap is None:
            return None, offsets
        return table.scan(snapshot_id=snap.snapshot_id).to_arrow(), offsets

    def lake_only(self, name: str) -> pa.Table:
        if name not in self._lake:
            raise TidehouseError(ErrorCode.TABLE_UNKNOWN, f"{name} has no lake table yet",
                                 location=Location(path=name), hint="run `tidehouse tier run` first")
        return self.lake.load(name).scan().to_arrow()

    def changelog(self, name: str) -> pa.Table:
        """The hot log from the earliest offset each bucket still holds (retention deleted what is older)."""
        meta = self.store.get_table(name)
        return read_range(self.store, meta, self.store.start_offsets(name), self.store.end_offsets(name))

    def union(self, name: str) -> pa.Table:
        if name not in self._hot:
            data = self.lake_only(name)
            return data.select([c for c in data.column_names if c not in SYSTEM_COLUMNS])
        meta = self.store.get_table(name)
        schema = _user_schema(meta)
        lake_rows, offsets = self.lake_snapshot(name, meta.buckets)
        ends = self.store.end_offsets(name)
        tail = read_range(self.store, meta, offsets, [max(o, e) for o, e in zip(offsets, ends)])
        base = _conform(lake_rows, schema) if lake_rows is not None else schema.empty_table()
        if not meta.is_primary_key:
            return pa.concat_tables([base, _conform(tail, schema)]) if tail.num_rows else base
        if tail.num_rows == 0:
            return base
        images, keys = collapse_changelog(tail, meta.primary_key)
        if base.num_rows:
            base = base.filter(pc.invert(key_mask(base, keys, meta.primary_key)))
        return pa.concat_tables([base, _conform(images, schema)])

    def build(self, ref: TableRef) -> pa.Table:
        if ref.view == "lake":
            return self.lake_only(ref.table)
        if ref.view == "changelog":
            return self.changelog(ref.table)
        return self.union(ref.table)


def union_query(store: TableStore, lake: Lake, sql: str) -> pa.Table:
    """Run ``sql`` (DuckDB dialect) over union reads of the tables it names; return the result as Arrow."""
    reader = UnionReader(store, lake)
    refs = referenced_tables(sql, reader.tables)
    con = duckdb.connect(":memory:")
    try:
        for i, ref in enumerate(refs):
            data = reader.build(ref)
            handle = f"__tidehouse_{i}"
            con.register(handle, data)
            layer, relation = _quote(ref.layer), _quote(ref.relation)
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {layer}")
            con.execute(f'CREATE VIEW {layer}.{relation} AS SELECT * FROM "{handle}"')
        try:
            relation = con.sql(sql)
            if relation is None:
                return pa.table({})
            return relation.to_arrow_table()
        except duckdb.Error as exc:
            raise TidehouseError(ErrorCode.QUERY_INVALID, str(exc).strip().splitlines()[0],
                                 hint="tables are named <layer>.<name> (also <layer>.<name>$lake, "
                                      "<layer>.<name>$changelog); the SQL dialect is DuckDB's") from exc
    finally:
        con.close()
