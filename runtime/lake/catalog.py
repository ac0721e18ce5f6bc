"""The lake: Iceberg tables behind any pyiceberg catalog.

The embedded default is pyiceberg's SQL catalog on SQLite under the home directory with a local warehouse
(``<home>/lake/catalog.db`` and ``<home>/lake/warehouse``); the project file's ``lake.catalog`` points it at
any other pyiceberg catalog (REST e.g. Polaris, Glue, Hive). A hot table ``<layer>.<name>`` is the lake table
``<name>`` in namespace ``<layer>``; see :mod:`runtime.lake.schema` for the columns it keeps.

Tables created here carry properties that make the tiering protocol safe:

* ``commit.retry.num-retries = 0``: pyiceberg's own retry rebuilds a failed append on the new parent, which
  would commit the same hot offset range twice. A conflict must surface so the cycle re-reads the lake's
  offsets (see :mod:`runtime.lake.tiering`).
* ``write.metadata.delete-after-commit.enabled``: old metadata files are removed, the warehouse stays small.
* ``tidehouse.kind`` / ``tidehouse.primary_key`` / ``tidehouse.buckets``: what the hot table was.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from pyiceberg import exceptions as iceberg
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.table import Table

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.settings import default
from runtime.lake.schema import lake_schema, missing_columns, partition_spec
from runtime.storage.api import TableMeta

if TYPE_CHECKING:  # pragma: no cover
    from runtime.core.config import Config

log = logging.getLogger(__name__)

TABLE_PROPERTIES = {
    "format-version": "2",
    "commit.retry.num-retries": "0",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "10",
}


def split_name(name: str) -> tuple[str, str]:
    """``"dwd.clicks"`` -> ``("dwd", "clicks")``; anything else is a user error."""
    layer, dot, table = name.partition(".")
    if not dot or not layer or not table or "." in table:
        raise TidehouseError(
            ErrorCode.TABLE_UNKNOWN,
            f"'{name}' is not a table name of the form <layer>.<name>",
            location=Location(path=name),
        )
    return layer, table


class Lake:
    """The Iceberg side of Tidehouse: one pyiceberg catalog plus where tiering keeps its local state."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        run_dir: Path,
        properties: dict[str, Any] | None = None,
        max_snapshots: int = default("tiering.max_snapshots"),
        compact_min_files: int = default("tiering.compact_min_files"),
        retention_s: float = default("storage.retention"),
        compact_target_bytes: int = default("tiering.compact_target_bytes"),
    ) -> None:
        self.catalog = catalog
        self.run_dir = Path(run_dir)
        self.properties = dict(properties or {})
        self.max_snapshots = max_snapshots
        self.compact_min_files = compact_min_files
        self.compact_target_bytes = compact_target_bytes
        self.compaction_memo: dict[str, int] = {}  # table -> data-file count before which no tier can fill
        self.retention_s = retention_s

    @classmethod
    def open(cls, config: Config) -> Lake:
        """The lake a project's configuration names (embedded SQLite SQL catalog by default)."""
        props = config.lake_catalog_properties
        try:
            _make_local_dirs(props)
            catalog = _load_catalog(config.get("lake.catalog_name"), props)
        except Exception as exc:  # pyiceberg raises many kinds here (ValueError, SQLAlchemy, HTTP, ...)
            raise TidehouseError(
                ErrorCode.LAKE_CATALOG,
                f"cannot open the lake catalog: {exc}",
                location=Location("tidehouse.yaml", path="lake.catalog"),
                hint="check lake.catalog in the project file (tidehouse info shows it)",
            ) from exc
        return cls(
            catalog,
            run_dir=config.run_dir,
            properties=props,
            max_snapshots=config.get("tiering.max_snapshots"),
            compact_min_files=config.get("tiering.compact_min_files"),
            compact_target_bytes=config.get("tiering.compact_target_bytes"),
            retention_s=config.get("storage.retention"),
        )

    # -- tables ------------------------------------------------------------------------------------
    def exists(self, name: str) -> bool:
        return self.catalog.table_exists(split_name(name))

    def load(self, name: str) -> Table:
        """The lake table of a hot table name; TABLE_UNKNOWN if it was never tiered."""
        try:
            return self.catalog.load_table(split_name(name))
        except (iceberg.NoSuchTableError, iceberg.NoSuchNamespaceError) as exc:
            raise TidehouseError(
                ErrorCode.TABLE_UNKNOWN,
                f"lake table {name} does not exist",
                location=Location(path=name),
                hint="run `tidehouse tier run` to create and fill it",
            ) from exc

    def list_tables(self) -> list[str]:
        out: list[str] = []
        for ns in self.catalog.list_namespaces():
            for ident in self.catalog.list_tables(ns):
                out.append(".".join(ident))
        return sorted(out)

    def ensure_table(self, meta: TableMeta) -> Table:
        """Create the lake table of a hot table, or evolve it with the hot schema's new columns."""
        layer, _ = split_name(meta.name)
        self._ensure_namespace(layer)
        if not self.exists(meta.name):
            schema = lake_schema(meta)
            props = dict(TABLE_PROPERTIES)
            props.update(
                {
                    "tidehouse.kind": meta.kind,
                    "tidehouse.primary_key": ",".join(meta.primary_key),
                    "tidehouse.buckets": str(meta.buckets),
                }
            )
            try:
                return self.catalog.create_table(
                    split_name(meta.name),
                    schema=schema,
                    partition_spec=partition_spec(meta, schema),
                    properties=props,
                )
            except iceberg.TableAlreadyExistsError:  # another process created it first: fine
                pass
            except (
                Exception
            ) as exc:  # a racing creator can surface as the catalog's own error (IntegrityError)
                if not self.exists(meta.name):
                    raise TidehouseError(
                        ErrorCode.LAKE_CATALOG,
                        f"cannot create lake table {meta.name}: {exc}",
                        location=Location(path=meta.name),
                    ) from exc
        table = self.load(meta.name)
        new = missing_columns(meta, table.schema())
        if new:
            log.info("lake table %s: adding columns %s", meta.name, [f.name for f in new])
            with table.update_schema() as update:
                for f in new:
                    update.add_column(f.name, f.field_type, doc=f.doc)
            table = self.load(meta.name)
        if table.properties.get("commit.retry.num-retries") != "0":  # created elsewhere: make it safe
            with table.transaction() as tx:
                tx.set_properties({"commit.retry.num-retries": "0"})
            table = self.load(meta.name)
        return table

    def _ensure_namespace(self, layer: str) -> None:
        try:
            self.catalog.create_namespace(layer)
        except iceberg.NamespaceAlreadyExistsError:
            pass
        except Exception as exc:  # SQL catalog: two creators racing get an IntegrityError, not AlreadyExists
            if (layer,) not in [tuple(ns) for ns in self.catalog.list_namespaces()]:
                raise TidehouseError(
                    ErrorCode.LAKE_CATALOG,
                    f"cannot create lake namespace {layer}: {exc}",
                    location=Location(path=layer),
                ) from exc

    def reset(self, meta: TableMeta) -> Table:
        """A full refresh of the lake table of ``meta`` (the hot table is rebuilt from offset 0): ONE snapshot
        that deletes every row and records offsets 0, with the table's columns, key and partitioning made
        those of ``meta``. The table is never dropped: its history (time travel), its id and other engines'
        handles stay valid, and the next tiering cycles fill it again."""
        if not self.exists(meta.name):
            return self.ensure_table(meta)
        from runtime.lake.apply import overwrite_producer
        from runtime.lake.state import OFFSETS_PROPERTY, offsets_json

        table = self.load(meta.name)
        target = lake_schema(meta)
        files = [task.file for task in table.scan().plan_files()] if table.current_snapshot() else []
        properties = {
            OFFSETS_PROPERTY: offsets_json([0] * meta.buckets),
            "tidehouse.rows": "0",
            "tidehouse.refresh": "full",
        }
        with table.transaction() as tx:
            # an overwrite of every data file, committed even when there is none (a table whose rows were
            # all deleted still covers offsets: a delete that matches nothing would commit no snapshot)
            with overwrite_producer(tx, properties) as overwrite:
                for data_file in files:
                    overwrite.delete_data_file(data_file)
            current = table.schema()
            with tx.update_schema(allow_incompatible_changes=True) as update:  # the table is empty now
                for field in current.fields:
                    if field.name not in target.column_names:
                        update.delete_column(field.name)
                for field in target.fields:
                    if field.name not in current.column_names:
                        update.add_column(
                            field.name, field.field_type, doc=field.doc, required=field.required
                        )
                        continue
                    old = current.find_field(field.name)
                    if (old.field_type, old.required) != (field.field_type, field.required):
                        update.update_column(field.name, field_type=field.field_type, required=field.required)
                update.set_identifier_fields(
                    *[target.find_field(i).name for i in target.identifier_field_ids]
                )
            _reset_spec(tx, table, meta)
            tx.set_properties(
                {
                    "tidehouse.kind": meta.kind,
                    "tidehouse.primary_key": ",".join(meta.primary_key),
                    "tidehouse.buckets": str(meta.buckets),
                    "commit.retry.num-retries": "0",
                }
            )
        return self.load(meta.name)

    def drop(self, name: str) -> None:
        with contextlib.suppress(iceberg.NoSuchTableError):
            self.catalog.drop_table(split_name(name))

    def close(self) -> None:
        engine = getattr(self.catalog, "engine", None)
        if engine is not None:
            engine.dispose()


def _reset_spec(tx, table: Table, meta: TableMeta) -> None:
    """Partition by ``__bucket`` exactly when the table has several buckets (see :func:`partition_spec`)."""
    from runtime.storage.api import BUCKET

    wanted = not partition_spec(meta, table.schema()).is_unpartitioned()
    have = any(f.name == BUCKET for f in table.spec().fields)
    if wanted == have:
        return
    with tx.update_spec() as spec:
        if wanted:
            spec.add_identity(BUCKET)
        else:
            spec.remove_field(BUCKET)


def _load_catalog(name: str, props: dict[str, Any], *, attempts: int = 3) -> Catalog:
    """``load_catalog``, opened again when another process created the SQL catalog's tables meanwhile.

    pyiceberg's SQL catalog checks whether its tables exist and creates them if not; two processes opening a
    fresh catalog at once (two tiering schedulers, a flow and a scheduler) can both see none, and the later
    ``CREATE TABLE`` fails with "already exists". Opening again then finds the tables. Any other failure, or
    the same one ``attempts`` times, is raised.
    """
    for attempt in range(1, attempts + 1):
        try:
            return load_catalog(name, **props)
        except Exception as exc:
            if attempt == attempts or not _lost_table_creation_race(exc):
                raise
            log.debug("lake catalog %s: its tables were created concurrently, opening again", name)
            time.sleep(0.05 * attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def _lost_table_creation_race(exc: BaseException) -> bool:
    """A SQLAlchemy error raised by a ``CREATE TABLE`` whose table (or its type) another process just made."""
    statement = str(getattr(exc, "statement", "") or "").lstrip().upper()
    text = str(getattr(exc, "orig", exc)).lower()
    return statement.startswith("CREATE TABLE") and ("already exists" in text or "duplicate" in text)


def _make_local_dirs(props: dict[str, Any]) -> None:
    """Create the directories of a local SQLite catalog and ``file://`` warehouse (no-op for remote ones)."""
    uri = str(props.get("uri", ""))
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    warehouse = str(props.get("warehouse", ""))
    parsed = urlparse(warehouse)
    if parsed.scheme == "file":
        Path(parsed.path).mkdir(parents=True, exist_ok=True)
    elif warehouse and not parsed.scheme:
        Path(warehouse).mkdir(parents=True, exist_ok=True)
