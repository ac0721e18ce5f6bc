"""Union reads: SQL over every table's lake data plus its hot tail, with DuckDB over Arrow.

For every table a query names:

* ``layer.t`` — the union read, user columns only:

  - **log table**: every row, as if retention had never deleted any: the lake below each bucket's first
    hot offset, then the hot log (:class:`runtime.lake.history.TableHistory`).
  - **primary-key table**: the lake's state at its snapshot, overridden by the hot changelog since the
    snapshot's offsets, collapsed to the last row kind per key: keys whose last change is a delete are
    removed, upserted keys take their new image (hot wins). It stays correct when old hot segments were
    deleted by retention.
  - a table only the lake has (its hot table was dropped) reads the lake; one never tiered reads the hot
    log alone.
* ``layer.t$lake`` — the lake table only, as stored (including the kept ``__`` columns).
* ``layer.t$changelog`` — the hot log with its system columns (``__offset``, ``__bucket``, ``__ts`` and, for
  primary-key tables, ``__change``), from the earliest offset the hot storage still holds.

Table references are not rewritten in the SQL text: each layer becomes a DuckDB schema and each table a view
of a registered Arrow table, so ``ods.clicks`` resolves by DuckDB's own name binding, and string literals or
comments that happen to contain ``ods.clicks`` are untouched. Which tables to load is found with DuckDB's
tokenizer (identifier ``.`` identifier, quoted or not, in any case as DuckDB binds names), so only the tables
a query names are read. A query may hold several statements (``SET TimeZone = 'UTC'; SELECT ...``); its
result is the last one's rows, so an earlier statement that returns rows is refused, as is an empty query.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import duckdb
import pyarrow as pa

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.literals import is_internal_table
from runtime.lake.catalog import Lake
from runtime.lake.history import TableHistory
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
        # DuckDB matches identifiers case-insensitively, quoted or not (tables are named in lower case)
        layer, rel = _unquote(a).lower(), _unquote(b).lower()
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
        self._hot = {t for t in store.list_tables() if not is_internal_table(t)}  # private query state
        self._lake = set(lake.list_tables())
        self.history = TableHistory(store, lake)

    @property
    def tables(self) -> set[str]:
        return self._hot | self._lake

    def lake_only(self, name: str) -> pa.Table:
        if name not in self._lake:
            raise TidehouseError(
                ErrorCode.TABLE_UNKNOWN,
                f"{name} has no lake table yet",
                location=Location(path=name),
                hint="run `tidehouse tier run` first",
            )
        return self.lake.load(name).scan().to_arrow()

    def changelog(self, name: str) -> pa.Table:
        """The hot log from the earliest offset each bucket still holds (retention deleted what is older)."""
        meta = self.store.get_table(name)
        return read_range(self.store, meta, self.store.start_offsets(name), self.store.end_offsets(name))

    def union(self, name: str) -> pa.Table:
        """The table's current content (user columns): its history (lake snapshot + hot tail)."""
        if name not in self._hot:
            data = self.lake_only(name)
            return data.select([c for c in data.column_names if c not in SYSTEM_COLUMNS])
        meta = self.store.get_table(name)
        return self.history.state(name) if meta.is_primary_key else self.history.rows(name)

    def build(self, ref: TableRef) -> pa.Table:
        if ref.view == "lake":
            return self.lake_only(ref.table)
        if ref.view == "changelog":
            return self.changelog(ref.table)
        return self.union(ref.table)


_HINT = (
    "tables are named <layer>.<name> (also <layer>.<name>$lake, <layer>.<name>$changelog); the SQL dialect "
    "is DuckDB's"
)
# statements that return rows: before the last one, their rows would be computed and never shown
_ROWS = {getattr(duckdb.StatementType, kind) for kind in ("SELECT", "EXPLAIN", "PRAGMA", "CALL")}
# what a query may end with besides rows: an export to files, or a PIVOT (several statements in one)
_LAST = _ROWS | {
    getattr(duckdb.StatementType, kind)
    for kind in ("COPY", "EXPORT", "COPY_DATABASE", "MULTI")
    if hasattr(duckdb.StatementType, kind)
}


def check_statements(sql: str) -> None:
    """A query is one or more statements, and only the last one's rows are the result: an empty query, or a
    statement before the last that returns rows (``SELECT 1; SELECT 2``), is an error, not a result that
    silently leaves something out. So is a query that ends with a statement that returns no rows (``DROP VIEW
    ods.events`` printed "Success"): what it did was gone with the query's in-memory database. It may end with
    an export (``COPY ... TO``, ``EXPORT DATABASE``), or with any statement after an ``ATTACH`` (a database
    file that keeps what is written to it)."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise TidehouseError(ErrorCode.QUERY_INVALID, str(exc).strip().splitlines()[0], hint=_HINT) from exc
    if not statements:
        raise TidehouseError(ErrorCode.QUERY_INVALID, "the query is empty", hint="give one SQL statement")
    for i, statement in enumerate(statements[:-1], start=1):
        if statement.type in _ROWS:
            raise TidehouseError(
                ErrorCode.QUERY_INVALID,
                f"statement {i} of {len(statements)} ({_short(statement)}) returns rows, and only the last "
                "statement's rows are shown",
                hint="run each query on its own, or combine them with UNION ALL or a join",
            )
    attached = any(s.type == duckdb.StatementType.ATTACH for s in statements[:-1])
    if statements[-1].type not in _LAST and not attached:
        raise TidehouseError(
            ErrorCode.QUERY_INVALID,
            f"the last statement ({_short(statements[-1])}) returns no rows, and what it creates or changes "
            "lasts for this query only: the project's tables are read in a throw-away in-memory database",
            hint="end with a query (SELECT ...); the project's tables change through their flows. To keep "
            "rows: COPY (SELECT ...) TO 'rows.parquet', or ATTACH a database file first",
        )


def _short(statement) -> str:
    """A statement's text on one line, at most 60 characters."""
    text = " ".join(statement.query.split()).rstrip(";")
    return text if len(text) <= 60 else text[:57] + "..."


_BIT = re.compile(r"\bBIT\b")


def _bits_as_text(relation):
    """``relation`` with its BIT values (also in lists and structs) as their text, ``'101'``: DuckDB hands
    BIT to Arrow as its internal bytes (``b'\\x05\\xfd'``). Columns by position: two may have one name."""
    types = [str(t) for t in relation.types]
    if not any(_BIT.search(t) for t in types):
        return relation
    columns = []
    for i, (name, kind) in enumerate(zip(relation.columns, types), start=1):
        text = _BIT.sub("VARCHAR", kind)
        value = f"CAST(#{i} AS {text})" if text != kind else f"#{i}"
        columns.append(f'{value} AS "{name.replace(chr(34), chr(34) * 2)}"')
    return relation.project(", ".join(columns))


def union_query(
    store: TableStore, lake: Lake, sql: str, *, declared: Callable[[], Mapping[str, str]] | None = None
) -> pa.Table:
    """Run ``sql`` (DuckDB dialect) over union reads of the tables it names; return the result as Arrow (the
    last statement's rows: :func:`check_statements`). ``declared``: the tables registered flows declare (table
    -> flow), asked only to name a missing table (:func:`unknown_table`)."""
    check_statements(sql)
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
            return _bits_as_text(relation).to_arrow_table()
        except duckdb.Error as exc:
            message = str(exc).strip().splitlines()[0]
            raise TidehouseError(
                ErrorCode.QUERY_INVALID,
                unknown_table(message, reader.tables, declared) or message,
                hint=_HINT,
            ) from exc
    finally:
        con.close()


_MISSING = re.compile(r'Table with name "?([^"!\s]+)"? does not exist')


def unknown_table(
    message: str, tables: Iterable[str], declared: Callable[[], Mapping[str, str]] | None = None
) -> str | None:
    """DuckDB's catalog error for a table the query names and the project does not have, said in the
    project's terms (``Table with name "ods.nope" does not exist because schema "ods" does not exist`` -> ``no
    table ods.nope in this project (did you mean ods.events?)``; a table a registered flow declares
    (``declared``: table -> flow) but never made: that flow has not run); None for any other error."""
    found = _MISSING.search(message)
    if not found:
        return None
    named = found.group(1).lower()
    base, dollar, view = named.partition("$")
    if dollar and f"${view}" not in (LAKE_SUFFIX, CHANGELOG_SUFFIX):
        return f"no view ${view} of a table: write {base}{LAKE_SUFFIX} or {base}{CHANGELOG_SUFFIX}"
    flows = declared() if declared else {}
    if base in flows:
        return (
            f"table {base} of flow {flows[base]} holds no rows yet: the flow has not run "
            f"(tidehouse flow trigger {flows[base]})"
        )
    known = sorted(t for t in {*tables, *flows} if not is_internal_table(t))
    layer, _, leaf = base.rpartition(".")
    leaves = difflib.get_close_matches(leaf, {t.rpartition(".")[2] for t in known}, n=3)
    close = [t for t in known if t.rpartition(".")[2] in leaves]
    close.sort(key=lambda t: t.rpartition(".")[0] != layer)  # the named layer's first
    text = f"no table {base} in this project"
    if close:
        text += f" (did you mean {' or '.join(c + dollar + view for c in close)}?)"
    elif known:
        text += f" (its tables: {', '.join(known[:12])}{', ...' if len(known) > 12 else ''})"
    return text
