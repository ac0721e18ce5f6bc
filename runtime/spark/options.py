"""Options of the ``tidehouse`` Spark data source, where its tables live, and its streaming offsets.

A source finds its tables from a project, like the CLI: the ``home`` / ``project`` options, else
``$TIDEHOUSE_HOME``, else the project holding ``tidehouse.yaml`` above the current directory. The resolved
configuration travels with the reader to the executors (:class:`Place`): the hot storage root and the lake
catalog, so every task reads the lake part of a range itself. ``root`` names a hot storage root without a
project: such a source has no lake, and a range retention deleted is ``STORAGE_RANGE``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.core.settings import default
from runtime.spark.idlewait import POLL_MS
from runtime.storage.api import TableMeta, TableStore

if TYPE_CHECKING:  # pragma: no cover
    from runtime.core.config import Config
    from runtime.lake.catalog import Lake
    from runtime.lake.history import TableHistory

NAME = "tidehouse"
LAKE_SUFFIX, CHANGELOG_SUFFIX = "$lake", "$changelog"
_STORES: dict[str, TableStore] = {}
_LAKES: dict[str, Lake] = {}
_LOCK = threading.Lock()


def cached_store(
    root: str,
    fsync: bool = default("storage.fsync"),
    config: Config | None = None,
    *,
    shared_writers: bool = False,
) -> TableStore:
    """The process's store for ``root`` (opened once; Spark reuses its Python workers). With the project's
    ``config`` (whose root ``root`` is), it is opened as the façade opens it: with the project's storage
    settings (``storage.metastore``, ``storage.s3``, ...) and the project's lake as the snapshot source of
    primary-key state (:func:`runtime.storage.open_configured`). ``shared_writers``: see
    :func:`runtime.storage.open_store`."""
    key = json.dumps(
        [str(root), bool(fsync), shared_writers, None if config is None else _lake_key(config)]
        + ([] if config is None else [config.get(n) for n in _STORE_SETTINGS]),
        sort_keys=True,
        default=str,
    )
    store = _STORES.get(key)
    if store is None:
        with _LOCK:
            store = _STORES.get(key)
            if store is None:
                if config is None:
                    from runtime.storage import open_store

                    store = open_store(str(root), fsync=fsync, shared_writers=shared_writers)
                else:
                    from runtime.lake import lake_bootstrap
                    from runtime.storage import open_configured

                    store = open_configured(
                        config,
                        fsync=fsync,
                        bootstrap=lake_bootstrap(lambda: cached_lake(config)),
                        shared_writers=shared_writers,
                    )
                _STORES[key] = store
    return store


_STORE_SETTINGS = ("storage.root", "storage.metastore", "storage.s3", "storage.segment_bytes")


def _lake_key(config: Config) -> str:
    return json.dumps(
        [str(config.home), config.get("lake.catalog_name"), config.lake_catalog_properties],
        sort_keys=True,
        default=str,
    )


def cached_lake(config: Config) -> Lake:
    """The process's lake of a project configuration (catalogs are costly to open: once per process)."""
    key = _lake_key(config)
    lake = _LAKES.get(key)
    if lake is None:
        with _LOCK:
            lake = _LAKES.get(key)
            if lake is None:
                from runtime.lake.catalog import Lake

                lake = _LAKES[key] = Lake.open(config)
    return lake


def close_cached() -> None:
    """Close every cached store and lake of this process (tests, and the CLI on exit)."""
    with _LOCK:
        for store in _STORES.values():
            store.close()
        for lake in _LAKES.values():
            lake.close()
        _STORES.clear()
        _LAKES.clear()


@dataclass(frozen=True)
class Place:
    """Where a source's tables are: a project's configuration, or only a hot storage root."""

    root: str
    fsync: bool = default("storage.fsync")
    config: Config | None = None  # None: a bare storage root, no lake

    def store(self) -> TableStore:
        """The store as a Spark task opens it: a writer among the executors' Python workers, which take
        turns writing a primary-key bucket."""
        return cached_store(self.root, self.fsync, self.config, shared_writers=True)

    def history(self) -> TableHistory:
        from runtime.lake.history import TableHistory

        return TableHistory(self.store(), cached_lake(self.config) if self.config is not None else None)

    @classmethod
    def resolve(cls, opts: dict[str, str]) -> Place:
        """From the options: ``root`` alone is a bare root; otherwise the project (``home``/``project``, else
        ``$TIDEHOUSE_HOME``/the current directory's project)."""
        if opts.get("root") and not (opts.get("home") or opts.get("project")):
            return cls(opts["root"], fsync=_flag(opts, "fsync", True))
        from runtime.core.config import load_config

        config = load_config(home=opts.get("home") or None, project_dir=opts.get("project") or None)
        if opts.get("root") and opts["root"] != config.storage_root:
            raise _bad("root", f"{opts['root']!r} is not the project's storage root ({config.storage_root})")
        return cls(
            config.storage_root, fsync=_flag(opts, "fsync", config.get("storage.fsync")), config=config
        )


@dataclass(frozen=True)
class SourceOptions:
    place: Place
    table: str  # layer.name, without a suffix
    view: str  # "" (the table), "lake" (the Iceberg table only) or "changelog" (the hot log)
    columns: tuple[str, ...] | None
    starting: str
    max_rows_per_trigger: int | None
    max_rows_per_partition: int
    single_partition_rows: int
    system_columns: bool
    idle_wait_ms: int | None = None  # streams: wait this long for rows when none are new (idlewait)
    poll_ms: int = POLL_MS
    awake_file: str | None = None

    @classmethod
    def parse(cls, options) -> SourceOptions:
        opts = {str(k).lower(): str(v) for k, v in dict(options).items()}
        name = (opts.get("table") or opts.get("path") or "").strip()
        if not name:
            raise _bad("table", "is required: spark.read.format('tidehouse').load('layer.name')")
        view = ""
        for suffix, kind in ((LAKE_SUFFIX, "lake"), (CHANGELOG_SUFFIX, "changelog")):
            if name.endswith(suffix):
                name, view = name[: -len(suffix)], kind
        columns = None
        if opts.get("columns", "").strip():
            columns = tuple(c.strip() for c in opts["columns"].split(",") if c.strip())
        return cls(
            place=Place.resolve(opts),
            table=name,
            view=view,
            columns=columns,
            starting=opts.get("startingoffsets", "earliest").strip(),
            max_rows_per_trigger=_positive(opts, "maxrowspertrigger", None),
            max_rows_per_partition=_positive(opts, "maxrowsperpartition", 500_000),
            single_partition_rows=_positive(opts, "singlepartitionrows", 100_000),
            system_columns=_flag(opts, "systemcolumns", True),
            idle_wait_ms=_positive(opts, "idlewaitms", None),
            poll_ms=_positive(opts, "pollms", POLL_MS),
            awake_file=opts.get("awakefile", "").strip() or None,
        )

    def store(self) -> TableStore:
        return self.place.store()


def _bad(option: str, message: str) -> TidehouseError:
    return TidehouseError(
        ErrorCode.SOURCE_INVALID, f"tidehouse source option '{option}': {message}", params={"option": option}
    )


def _positive(opts: dict, key: str, default: int | None) -> int | None:
    if key not in opts:
        return default
    try:
        value = int(opts[key])
    except ValueError:
        value = 0
    if value <= 0:
        raise _bad(key, f"expected a positive integer, got {opts[key]!r}")
    return value


def _flag(opts: dict, key: str, default: bool) -> bool:
    value = opts.get(key, str(default)).lower()
    if value not in ("true", "false"):
        raise _bad(key, f"expected true or false, got {opts[key]!r}")
    return value == "true"


# -- streaming offsets ----------------------------------------------------------------------------------
def make_offset(
    table: str, ends: Sequence[int], *, incarnation: str | None = None, snapshot: dict | None = None
) -> dict:
    """``{"table", "offsets": {"<bucket>": end}}``, plus the hot table's ``incarnation`` (a rebuilt table has
    a new one) and, for the first micro-batch of a primary-key stream that starts below the hot log, the lake
    ``snapshot`` (``{"id", "offsets"}``) whose state that batch reads."""
    out: dict = {"table": table, "offsets": {str(b): int(e) for b, e in enumerate(ends)}}
    if incarnation:
        out["incarnation"] = incarnation
    if snapshot:
        out["snapshot"] = snapshot
    return out


def offset_ends(offset: dict, buckets: int) -> list[int]:
    """Per-bucket offsets of a streaming offset dict (``{"table":…, "offsets":{…}}``)."""
    raw = offset.get("offsets", offset)
    return [int(raw.get(str(b), 0)) for b in range(buckets)]


def parse_starting(value: str, meta: TableMeta, store: TableStore) -> list[int]:
    """``earliest`` | ``latest`` | JSON per bucket -> per-bucket start offsets."""
    if value.lower() == "earliest":
        return [0] * meta.buckets
    if value.lower() == "latest":
        return list(store.end_offsets(meta.name))
    try:
        raw = json.loads(value)
    except json.JSONDecodeError as exc:
        raise _bad(
            "startingOffsets", f'expected earliest, latest or JSON like {{"0": 42}}, got {value!r}'
        ) from exc
    if isinstance(raw, dict) and "offsets" in raw:
        raw = raw["offsets"]
    if not isinstance(raw, dict):
        raise _bad("startingOffsets", f"expected a JSON object of bucket -> offset, got {value!r}")
    starts = [0] * meta.buckets
    for key, off in raw.items():
        if not str(key).isdigit() or int(key) >= meta.buckets:
            raise _bad("startingOffsets", f"table {meta.name} has buckets 0..{meta.buckets - 1}, not {key!r}")
        if isinstance(off, bool) or not isinstance(off, int) or off < 0:
            raise _bad("startingOffsets", f"bucket {key}: expected an offset >= 0, got {off!r}")
        starts[int(key)] = off
    return starts


def cap_rows(starts: Sequence[int], ends: Sequence[int], budget: int) -> list[int]:
    """Limit the total rows of ``[starts, ends)`` to ``budget``, shared in proportion to each bucket's
    backlog (every bucket with a backlog advances when the budget allows)."""
    backlog = [max(0, e - s) for s, e in zip(starts, ends)]
    total = sum(backlog)
    if total <= budget:
        return list(ends)
    take = [budget * b // total for b in backlog]
    left = budget - sum(take)
    for i in sorted(range(len(backlog)), key=lambda i: -backlog[i]):
        if left == 0:
            break
        extra = min(left, backlog[i] - take[i])
        take[i] += extra
        left -= extra
    return [s + t for s, t in zip(starts, take)]
