"""Every setting in one place: dotted name, default, one-line description.

The project file ``tidehouse.yaml`` sets any of them with nested keys (``storage: {fsync: false}`` sets
``storage.fsync``). ``docs/configuration.md`` is generated from :data:`SETTINGS`, so it cannot drift.
Values may use ``${ENV_VAR}`` (or ``${ENV_VAR:-default}``) for secrets; ``tidehouse info`` masks the
settings marked secret and any value that came from an environment variable.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from runtime.core.durations import parse_duration
from runtime.core.uris import local_path, scheme_of


class SettingValueError(ValueError):
    """A value a setting cannot take; ``at`` is the key inside a mapping setting that is wrong (if any)."""

    def __init__(self, message: str, at: tuple = ()) -> None:
        super().__init__(message)
        self.at = tuple(at)


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    description: str
    parse: Callable[[Any], Any] = lambda v: v
    secret: bool = False


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):  # "${FSYNC}" expands to a string
        return value.lower() == "true"
    raise SettingValueError(f"expected true or false, got {value!r}")


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SettingValueError(f"expected an integer, got {value!r}")
    try:
        return int(value)
    except ValueError:
        raise SettingValueError(f"expected an integer, got {value!r}") from None


def _count(value: Any) -> int:
    """A whole number of at least 0."""
    n = _int(value)
    if n < 0:
        raise SettingValueError(f"expected 0 or more, got {n}")
    return n


def _positive(value: Any) -> int:
    """A whole number of at least 1 (a size or a cap that 0 would not bound)."""
    n = _int(value)
    if n < 1:
        raise SettingValueError(f"expected 1 or more, got {n}")
    return n


def _off_or_at_least(minimum: int) -> Callable[[Any], int]:
    """0 (the feature is off, as the description says) or a whole number of at least ``minimum``."""

    def check(value: Any) -> int:
        n = _int(value)
        if n != 0 and n < minimum:
            raise SettingValueError(f"expected 0 (off) or {minimum} or more, got {n}")
        return n

    return check


def _str(value: Any) -> str:
    """A non-empty string: an empty one would silently mean "the default", so it is refused."""
    if not isinstance(value, str):
        raise SettingValueError(f"expected a string, got {value!r}")
    if not value.strip():
        raise SettingValueError("the value is empty (remove the setting to use its default)")
    return value


def _port(value: Any) -> int:
    port = _int(value)
    if not 1 <= port <= 65535:
        raise SettingValueError(f"expected a TCP port from 1 to 65535, got {value!r}")
    return port


def _choice(*choices: str) -> Callable[[Any], str]:
    def choice(value: Any) -> str:
        text = _str(value).strip().lower()
        if text not in choices:
            raise SettingValueError(f"expected one of {', '.join(choices)}, got {value!r}")
        return text

    return choice


def _storage_place(value: Any) -> str:
    """The hot storage's root: a local (or mounted) path, a ``file://`` URI, or ``s3://bucket[/prefix]`` (the
    object-store hot storage); any other scheme is refused at start-up."""
    text = _str(value)
    if scheme_of(text) == "s3":
        if not urlparse(text).netloc:
            raise SettingValueError(f"{text!r} names no bucket: write s3://bucket/prefix")
        return text
    try:
        local_path(text)
    except ValueError as exc:
        raise SettingValueError(f"{exc} (or an s3://bucket/prefix URI)") from None
    return text


_S3_KEYS = ("endpoint", "region", "access_key", "secret_key", "session_token")


def _s3_options(value: Any) -> dict:
    """The S3 client options of an ``s3://`` storage root; an unknown key is refused at its key."""
    options = _mapping(value)
    for key in options:
        if key not in _S3_KEYS:
            raise SettingValueError(f"unknown S3 option '{key}' (known: {', '.join(_S3_KEYS)})", at=(key,))
    if bool(options.get("access_key")) != bool(options.get("secret_key")):
        raise SettingValueError("access_key and secret_key go together")
    return options


def _local_place(value: Any) -> str:
    """A local (or mounted) path or a ``file://`` URI; any other scheme is refused here, at start-up, rather
    than becoming a local folder named after it."""
    text = _str(value)
    try:
        local_path(text)
    except ValueError as exc:
        raise SettingValueError(str(exc)) from None
    return text


def _interval(value: Any) -> float:
    """A duration above 0: a scheduler's interval (APScheduler would silently make 0 an interval of 1 s)."""
    seconds = parse_duration(value)
    if seconds <= 0:
        raise SettingValueError(f"an interval must be above 0, got {value!r}")
    return seconds


# the settings whose values are durations (the scaffold writes their defaults as '30s', not 30.0)
DURATION_PARSES = (parse_duration, _interval)

# the master URLs Spark parses itself (SparkContext.createTaskScheduler and spark-submit's checks)
_LOCAL = re.compile(r"local(\[\s*(\d+|\*)\s*(,\s*\d+\s*)?\])?")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\]")
_HOST_PORT = re.compile(r"[^\s:/,]+:\d+")
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*://\S+")
_MASTERS = "local, local[N], local[*], local[N,F], spark://host:port, yarn or k8s://https://host:port"


def _master(value: Any) -> str:
    """A Spark master URL in a form Spark parses, checked here so that a wrong one is refused at its line
    rather than by the JVM's launcher with a Java stack trace."""
    text = _str(value).strip()
    local = _LOCAL.fullmatch(text)
    if local:
        if local.group(2) is not None and local.group(2) != "*" and int(local.group(2)) < 1:
            raise SettingValueError(f"{text!r} runs no task: local[N] takes N of 1 or more (or local[*])")
        return text
    if _LOCAL_CLUSTER.fullmatch(text):
        return text
    if text.startswith("spark://"):
        hosts = text[len("spark://") :].split(",")
        if not all(_HOST_PORT.fullmatch(h.strip()) for h in hosts):
            raise SettingValueError(f"{text!r}: a standalone master is spark://host:port (or h1:p1,h2:p2)")
        return text
    # yarn's HADOOP_CONF_DIR may come from spark-env.sh, which only Spark's launcher reads (it says so
    # itself); another scheme://... may be a cluster manager's plugin, which Spark finds and judges
    if text == "yarn" or _SCHEME.fullmatch(text):
        return text
    raise SettingValueError(f"{text!r} is not a Spark master URL: expected {_MASTERS}")


def _remote(value: Any) -> str:
    """A Spark Connect URL: ``sc://host[:port][/;param=value...]``."""
    text = _str(value)
    if not text.startswith("sc://") or len(text) <= len("sc://"):
        raise SettingValueError(f"expected a Spark Connect URL sc://host:port, got {text!r}")
    return text


def _mapping(value: Any) -> dict:
    """A flat mapping of property names to scalars (Spark confs, pyiceberg catalog properties).

    Both take ``key: value`` strings; a nested mapping, list or null would reach them as ``"{...}"``,
    ``"[...]"`` or ``"None"`` and be ignored or misread, so each is refused at its key.
    """
    if not isinstance(value, dict):
        raise SettingValueError(f"expected a mapping, got {value!r}")
    for key, item in value.items():
        if isinstance(item, dict):
            raise SettingValueError(
                f"'{key}' holds a nested mapping: write each property in full with dots "
                f"(e.g. '{key}.<name>: value')",
                at=(key,),
            )
        if item is None or not isinstance(item, (str, int, float, bool)):
            raise SettingValueError(f"'{key}' must be a string, number or boolean, got {item!r}", at=(key,))
    return {str(k): v for k, v in value.items()}


# pyiceberg's catalog types (pyiceberg.catalog.CatalogType; tests/config checks this copy against it, so the
# project file is checked without importing pyiceberg). rest and sql are tested against real servers.
CATALOG_TYPES = ("rest", "hive", "glue", "dynamodb", "sql", "in-memory", "bigquery")


def _catalog(value: Any) -> dict:
    """pyiceberg catalog properties: a flat mapping whose ``type``, if given, is one pyiceberg knows (a
    misspelt type would otherwise pass every check and fail only at the first tiering cycle or lake read)."""
    props = _mapping(value)
    kind = props.get("type")
    if kind is not None and str(kind).lower() not in CATALOG_TYPES:
        raise SettingValueError(
            f"unknown catalog type {kind!r}: expected one of {', '.join(CATALOG_TYPES)} "
            "(or leave type out and give py-catalog-impl for a catalog class of your own)",
            at=("type",),
        )
    return props


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "spark.master",
        "local[*]",
        "Spark master URL: local[*] or a standalone cluster's spark://host:7077 (both tested; other "
        "masters such as yarn take the same settings but are not tested).",
        _master,
    ),
    Setting(
        "spark.remote",
        None,
        "Spark Connect server to run on instead of a master (sc://host:15002): tidehouse is then a client "
        "and the flow's data path runs on the server's executors; set spark.master or spark.remote, not "
        "both.",
        _remote,
    ),
    Setting(
        "spark.conf",
        {},
        "Extra Spark configuration, e.g. {spark.executor.memory: 4g}. Spark ignores keys it does not "
        "define, so a key within two edits (or a change of case) of one of Spark's is refused as a typo "
        "when Spark starts; other keys (a connector's) pass as they are. Not checked over Spark Connect. "
        "spark.sql.warehouse.dir defaults to <home>/spark-warehouse (Spark's is the current directory).",
        _mapping,
    ),
    Setting(
        "spark.class_archive",
        True,
        "Start the driver JVM from a class-data-sharing archive of the classes Spark loads, made by the "
        "first start that finds none (~115 MB in ~/.cache/tidehouse/jvm, per Java and Spark installation): "
        "Spark starts ~1.5 s faster with ~18% less CPU. false: start without one.",
        _bool,
    ),
    Setting(
        "registry.url",
        None,
        "SQLAlchemy URL of the registry database; default: SQLite under the home.",
        _str,
        secret=True,
    ),
    Setting(
        "storage.root",
        None,
        "Root of the hot storage: a local (or mounted) path or a file:// URI, relative "
        "paths from the project directory, or s3://bucket/prefix (object-store hot storage: needs "
        "storage.metastore); default: <home>/hot.",
        _storage_place,
    ),
    Setting(
        "storage.metastore",
        None,
        "SQLAlchemy URL of the hot storage's metastore (commits, offsets, "
        "fencing), e.g. postgresql+psycopg://user:${PGPASSWORD}@host/db; required with an s3:// "
        "storage.root, refused with a local one (nothing would use it).",
        _str,
        secret=True,
    ),
    Setting(
        "storage.s3",
        {},
        "S3 client options of an s3:// storage.root: endpoint (http(s)://host:port), region, "
        "access_key, secret_key, session_token (use ${ENV} for secrets); default: AWS's own chain "
        "(environment, profile, instance role). Refused with a local storage.root.",
        _s3_options,
        secret=True,
    ),
    Setting(
        "storage.fsync",
        True,
        "fsync every hot append before acknowledging it (false trades durability on power loss for latency).",
        _bool,
    ),
    Setting(
        "storage.segment_bytes", 64 * 1024 * 1024, "Roll a log segment when it reaches this size.", _positive
    ),
    Setting(
        "storage.retention",
        24 * 3600.0,
        "Delete hot log segments fully tiered to the lake and older than this (a duration).",
        parse_duration,
    ),
    Setting(
        "storage.state_snapshot_rows",
        10_000,
        "On an object-store root (s3://): snapshot a bucket of a query's private state (<table>__state) once "
        "its changelog since the last snapshot has at least this many rows, and as many as the state holds; "
        "retention then deletes that changelog below the snapshot (docs/architecture.md, Retention of state "
        "tables). Unused with a local root, whose state is durable on its disk.",
        _positive,
    ),
    Setting(
        "lake.catalog",
        {},
        "pyiceberg catalog properties (type, uri, warehouse, credentials); default: a SQL catalog on SQLite "
        "under the home. Tested: type rest (SeaweedFS's Iceberg REST catalog) and sql (SQLite, PostgreSQL); "
        "pyiceberg's other types (hive, glue, ...) take their own properties and are not tested.",
        _catalog,
        secret=True,
    ),
    Setting("lake.catalog_name", "tidehouse", "Name of the pyiceberg catalog.", _str),
    Setting("tiering.interval", 30.0, "Default tiering interval of every table (a duration).", _interval),
    Setting(
        "tiering.max_snapshots",
        100,
        "Expire lake snapshots beyond this many per table. 0: never expire.",
        _off_or_at_least(1),
    ),
    Setting(
        "tiering.compact_min_files",
        32,
        "Compact a lake partition's files of similar size (within 8x) "
        "once there are at least this many of them. 0: no compaction.",
        _off_or_at_least(2),
    ),
    Setting(
        "tiering.compact_target_bytes",
        128 * 1024 * 1024,
        "Compaction writes files up to this size and never rewrites a file this big.",
        _positive,
    ),
    Setting(
        "tiering.executor_rows",
        100_000,
        "On the executor data path: a log table's tiering cycle of at least this many rows has its Iceberg "
        'data files written by Spark tasks, which the driver commits (docs/architecture.md, "Tiering on '
        'the executor path"); a smaller cycle is written by the driver. 0: every cycle by tasks.',
        _count,
    ),
    Setting(
        "checkpoints.root",
        None,
        "Where streaming checkpoints live: a local (or mounted) path or a file:// "
        "URI, relative paths from the project directory; default: <home>/checkpoints.",
        _local_place,
    ),
    Setting(
        "materializer.data_path",
        "auto",
        "Where micro-batches read, transform and write their rows: 'driver' (one machine: the driver reads "
        "a batch's hot range, runs the SQL on a local relation and writes; fastest for small batches), "
        "'executors' (Spark tasks read, Spark runs the SQL, tasks write routed by bucket; scales out), or "
        "'auto' (driver for a local[...] master, executors for any cluster).",
        _choice("auto", "driver", "executors"),
    ),
    Setting(
        "materializer.max_rows_per_batch",
        1_000_000,
        "On the driver data path: at most this many rows of a hot input per micro-batch "
        "of an append or changelog query (they read the batch in the driver): a backlog is worked off in "
        "several batches, so driver memory stays bounded.",
        _positive,
    ),
    Setting(
        "materializer.source_bytes_per_batch",
        64 * 1024 * 1024,
        "At most about this many bytes of new files per micro-batch of a file source (json, csv, parquet, "
        "orc, text: Spark's maxBytesPerTrigger), unless the flow's source sets maxFilesPerTrigger or "
        "maxBytesPerTrigger itself: a backlog of files is worked off in several batches, which the next "
        "layers start on while the rest is read, and the driver data path holds one batch at a time. "
        "0: no cap (one batch takes every new file).",
        _count,
    ),
    Setting(
        "materializer.executor_source_bytes_per_batch",
        256 * 1024 * 1024,
        "The same cap on the executor data path: the driver never holds the batch (one task parses and "
        "writes a JSON source's batch, so this bounds that task's memory), and each micro-batch costs the "
        "driver fixed planning and commit. Measured on the scale-out backlog on a cluster "
        "(docs/benchmarks.md, Scale-out): 64 MiB took 10% more CPU than 128; 256 MiB with "
        "executor_rows_per_batch 4,000,000 added 5.6 CPU s to the driver against 6.9 with 128 MiB and "
        "2,000,000 (means of 5 and 4 runs), 3% less CPU in all, in the same wall time; 512 MiB was slower "
        "(the next layers start later). 0: no cap.",
        _count,
    ),
    Setting(
        "materializer.arrow_json",
        True,
        "On the driver data path: a JSON source's micro-batch is parsed by Arrow in the driver when its "
        "schema, options and records are ones Arrow reads exactly as Spark does (docs/architecture.md, "
        '"Reading JSON sources"; a third of Spark\'s CPU per row), else by Spark; false: always Spark.',
        _bool,
    ),
    Setting(
        "materializer.list_sources",
        True,
        "A file source in a local folder is listed by Tidehouse (os.scandir; a file is stat'ed once, when it "
        "is new) instead of by Spark's file source, which lists and stats every file of the folder at every "
        "trigger, so an idle flow over a folder that keeps its files costs its driver more every day "
        '(docs/architecture.md, "Listing a source folder"). Files are admitted as Spark admits them and the '
        "checkpoint keeps Spark's own file log. Spark's file source still lists a folder that holds "
        "key=value folders, a glob path, a remote URI, a source with a listing option Tidehouse does not "
        "implement (latestFirst, maxFileAge, cleanSource, ...) and every source over Spark Connect; "
        "false: Spark's file source always.",
        _bool,
    ),
    Setting(
        "materializer.local_relation_rows",
        10_000,
        "On the driver data path: Arrow data the driver hands to Spark (a micro-batch's rows, a table's "
        "state for a lookup or a recomputation) goes as a local relation up to this many rows (the least "
        "latency), and as a Parquet file Spark reads above it (a fifth of the CPU per row: "
        "docs/benchmarks.md, Scale-out). 0: always a file.",
        _count,
    ),
    Setting(
        "materializer.executor_rows_per_batch",
        4_000_000,
        "On the executor data path: at most this many rows of a hot input per micro-batch of an append or "
        "changelog query, over all its tasks. Larger than the driver path's cap because the driver never "
        "holds the rows, and each micro-batch costs the driver fixed planning and commit "
        "(executor_source_bytes_per_batch); but the one write task of a table of one bucket holds its batch: "
        "lower it for wide rows.",
        _positive,
    ),
    Setting(
        "metrics.port",
        None,
        "Serve Prometheus metrics on this port while flow trigger or tier schedule runs "
        "(docs/operations.md, Monitoring); default: off.",
        _port,
    ),
    Setting(
        "metrics.host",
        "127.0.0.1",
        "Address the metrics endpoint listens on (0.0.0.0: every interface).",
        _str,
    ),
    Setting(
        "logging.level",
        "warning",
        "Level of Tidehouse's own log records on stderr: debug (a line per "
        "micro-batch), info, warning or error. Spark's log goes to <home>/logs/spark.log.",
        _choice("debug", "info", "warning", "error"),
    ),
    Setting(
        "logging.format",
        "text",
        "Log records as text lines, or json: one JSON object per line with flow, table and batch_id fields.",
        _choice("text", "json"),
    ),
)

SETTINGS_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def default(name: str) -> Any:
    """The default of a setting. A function of a lower layer whose parameter mirrors a setting takes its
    default from here (``segment_bytes: int = default("storage.segment_bytes")``): a default is written once,
    above."""
    return SETTINGS_BY_NAME[name].default


# `home:` in the project file: where everything is stored, after --home and $TIDEHOUSE_HOME (not a setting
# of the running project: `tidehouse info` shows the home it resolved to).
HOME = Setting(
    "home",
    None,
    "Home directory, relative to the project directory; --home and $TIDEHOUSE_HOME take precedence.",
    _str,
)
