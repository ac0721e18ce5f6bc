"""A flow source's stream, and a file source's micro-batch read by Spark.

A file source in a local folder is listed by Tidehouse (:mod:`runtime.spark.filesource`: each file stat'ed
once, when it is new) when the listing admits its files exactly as Spark's file source would; otherwise, and
with ``materializer.list_sources: false``, Spark's file source lists it (docs/architecture.md, "Listing a
source folder"). Either way the query's checkpoint holds Spark's file log, so the batch functions find a
batch's files there (:func:`runtime.spark.filelog.source_files`). Over Tidehouse's listing the micro-batch's
rows are the files' paths: when Tidehouse does not parse them itself, :class:`SparkFiles` reads them with
Spark's reader and the source's schema and options — the rows Spark's file source would have produced.
Over Spark's listing the micro-batch's rows are Spark's, except for a batch with a file whose name Spark's
reader would take for a glob pattern (:class:`SparkListed`: Spark's own source reads it wrongly).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path

from materializer.plan import SourcePlan
from materializer.rows import CORRUPT, FILE
from registry.graph import node_location
from registry.specs.base import did_you_mean
from registry.specs.flow import FILE_FORMATS
from runtime.core.errors import ErrorCode, TidehouseError, TidehouseErrors
from runtime.core.uris import scheme_of
from runtime.spark.filelog import source_files
from runtime.spark.filesource import NAME as FILES
from runtime.spark.filesource import has_partition_folders, hidden, uri_path
from runtime.spark.reasons import error_line

log = logging.getLogger(__name__)

# options of Spark's file source that change which files a micro-batch takes: Tidehouse's listing does not
# implement them, so a source that sets one is listed by Spark
LISTING_OPTIONS = frozenset(
    k.lower()
    for k in (
        "latestFirst",
        "maxFileAge",
        "fileNameOnly",
        "maxCachedFiles",
        "discardCachedInputRatio",
        "cleanSource",
        "sourceArchiveDir",
        "pathGlobFilter",
        "recursiveFileLookup",
        "modifiedBefore",
        "modifiedAfter",
    )
)
ADMISSION = frozenset({"maxfilespertrigger", "maxbytespertrigger"})  # both listings apply these
# the formats a pip-installed Spark reads as a stream (its connectors, kafka among them, need their jars)
KNOWN_FORMATS = (*FILE_FORMATS, "rate", "rate-micro-batch", "socket", "kafka")
_GLOB = re.compile(r"[*?\[\]{}\\]")


def missing_folder(path: str | None) -> bool:
    """A file source's local folder (a path or a ``file://`` URI) that does not exist; a glob pattern or
    another URI is Spark's to resolve."""
    if not path or _GLOB.search(path) or scheme_of(path) not in ("", "file"):
        return False
    return not Path(uri_path(path)).exists()


def unread_subfolders(path: str | None, options: Mapping[str, str]) -> list[str]:
    """The subfolders of a local source folder that hold files no micro-batch will read: Spark's file
    source (and Tidehouse's listing, which admits what it admits) reads the files directly in the folder and
    in ``key=value`` partition folders, and those below any other folder only with the option
    ``recursiveFileLookup``. Folders whose names Spark's listing skips (``_x``, ``.x``) are not reported."""
    if not path or _GLOB.search(path) or scheme_of(path) not in ("", "file"):
        return []
    if any(k.lower() == "recursivefilelookup" and v.lower() == "true" for k, v in options.items()):
        return []
    try:
        entries = sorted(os.scandir(uri_path(path)), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [e.name for e in entries if not hidden(e.name) and "=" not in e.name and _holds_files(e)]


def _holds_files(entry: os.DirEntry) -> bool:
    """Whether ``entry`` is a folder with a file somewhere below it (in folders Spark's listing keeps)."""
    if not entry.is_dir():
        return False
    for _folder, names, files in os.walk(entry.path):
        if any(not hidden(f) for f in files):
            return True
        names[:] = [n for n in names if not hidden(n)]
    return False


def _named(folders: list[str], most: int = 3) -> str:
    shown = ", ".join(folders[:most])
    return shown + (f" and {len(folders) - most} more" if len(folders) > most else "")


def refuse_unread(sources: Mapping[str, tuple[str | None, Mapping[str, str]]], locate) -> None:
    """An ``--until-idle`` run that would end with a file source's rows unread: the source's local folder
    does not exist (a mistyped path: it would read nothing and end as if drained), or it has subfolders whose
    files Spark's file source does not read (:func:`unread_subfolders`). Refused, each at ``locate(name)``
    (its ``path``). ``sources``: each source's path as its plan holds it
    (:func:`materializer.plan.source_path`) and its options."""
    errors = []
    for name, (path, options) in sources.items():
        if missing_folder(path):
            errors.append(
                TidehouseError(
                    ErrorCode.SOURCE_INVALID,
                    f"source {name}: the folder {path} does not exist, so an --until-idle run would read "
                    "nothing from it",
                    location=locate(name),
                    hint="fix the source's path, or create the folder (a run without --until-idle creates "
                    "it and waits for files)",
                )
            )
        elif folders := unread_subfolders(path, options):
            errors.append(
                TidehouseError(
                    ErrorCode.SOURCE_INVALID,
                    f"source {name}: the folder {path} has subfolders whose files a Spark file source does "
                    f"not read ({_named(folders)}), so an --until-idle run would end without them",
                    location=locate(name),
                    hint="set the source's option recursiveFileLookup: true to read every file below the "
                    "folder, move the files into the folder itself, or start a subfolder's name with _ to "
                    "keep it out",
                )
            )
    if errors:
        raise TidehouseErrors(errors) if len(errors) > 1 else errors[0]


def unreadable(
    name: str, fmt: str, exc: BaseException, *, declared: bool, location_of=None
) -> TidehouseError:
    """The error of a source whose stream Spark would not make when the flow is planned (``exc``: Spark's):
    a format Spark has no source for (mistyped, or a connector whose jars are not on the class path) at the
    source's ``format``, else what Spark said about the format with its options (and the declared schema)."""
    reason = error_line(exc)
    if any(word in reason for word in ("DATA_SOURCE_NOT_FOUND", "DATA_SOURCE_NOT_ENABLED", "Failed to find")):
        return TidehouseError(
            ErrorCode.SOURCE_INVALID,
            f"source {name}: Spark has no source of format '{fmt}': {reason}",
            location=node_location(location_of, f"sources.{name}.format", prefixed=True),
            hint=did_you_mean(fmt, [f for f in KNOWN_FORMATS if f != fmt])
            or "a connector's format (kafka, ...) needs its jars on Spark's class path: spark.conf "
            "{spark.jars: ...} in tidehouse.yaml",
        )
    return TidehouseError(
        ErrorCode.SOURCE_INVALID,
        f"source {name}: Spark cannot read format '{fmt}' "
        + ("with the declared schema and these options" if declared else "without a schema")
        + f": {reason}",
        location=node_location(location_of, f"sources.{name}", prefixed=True),
        hint=None if declared else "declare the source's schema: as a Spark DDL string",
    )


def listing_refusal(src: SourcePlan, options: dict[str, str], config, *, connect: bool) -> str | None:
    """Why Spark's file source lists ``src`` instead of Tidehouse (None: Tidehouse lists it)."""
    if src.format not in FILE_FORMATS or not src.path:
        return "not a file source"
    if not config.get("materializer.list_sources"):
        return "materializer.list_sources is false"
    if connect:
        return "over Spark Connect the server's file source lists it"
    if not src.ddl:  # Spark's source infers the schema once, from the folder; a batch read would per batch
        return "the source declares no schema"
    if scheme_of(src.path) not in ("", "file"):
        return f"{src.path} is not a local folder"
    if _GLOB.search(src.path):
        return f"{src.path} is a glob pattern"
    own = sorted(k for k in options if k.lower() in LISTING_OPTIONS)
    if own:
        return f"the source sets the option {own[0]}"
    if has_partition_folders(_local(src.path)):
        return f"{src.path} holds key=value folders (Spark adds their partition columns)"
    return None


def _local(path: str) -> str:
    return uri_path(path) if path.startswith("file:") else path


def _configured(reader, src: SourcePlan, options: dict[str, str]):
    """A Spark reader (batch or stream) of ``src``'s format, options and schema (a quarantining source's
    schema has the corrupt-record column, and Spark's permissive mode fills it)."""
    reader = reader.format(src.format).options(**options)
    if src.ddl:
        reader = reader.schema(src.ddl + (f", `{CORRUPT}` string" if src.quarantines else ""))
        if src.quarantines:
            reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT)
    return reader


def with_file(df, src: SourcePlan):
    """``df`` (a file source's rows as Spark read them) with the :data:`FILE` column: the file of each record
    that goes to quarantine (does not parse, or lacks a column declared ``NOT NULL``), null for the others.
    ``input_file_name()``, evaluated for those records alone: Spark's ``_metadata.file_path`` costs every row
    (a read of 500,000 JSON records into Arrow: 21% longer with it, 4% with this; docs/architecture.md)."""
    bad = ([f"`{CORRUPT}` IS NOT NULL"] if src.quarantines else []) + [f"`{c}` IS NULL" for c in src.required]
    if src.format not in FILE_FORMATS or not bad:
        return df
    return df.selectExpr("*", f"CASE WHEN {' OR '.join(bad)} THEN input_file_name() END AS `{FILE}`")


def source_stream(
    session,
    src: SourcePlan,
    options: dict[str, str],
    checkpoint: str,
    table: str,
    config,
    waiting: dict[str, str] | None = None,
):
    """The stream of flow source ``src`` for the query of ``table`` (checkpoint ``checkpoint``), and how its
    micro-batch's rows are read by Spark: Tidehouse's listing and a :class:`SparkFiles` when
    :func:`listing_refusal` has no reason against it, else Spark's file source (its batch DataFrame is the
    rows: None). ``waiting``: the options of a listing that waits for new files inside its trigger
    (``materializer.hotstream.Waiting``); Spark's listing does not wait."""
    from runtime.spark.session import is_connect

    # a long-running flow waits for a source folder that does not exist; an --until-idle run refused it
    if missing_folder(src.path):
        log.warning(
            "source %s: the folder %s does not exist: created it empty, the query waits for files",
            src.name,
            src.path,
            extra={"table": table},
        )
        Path(uri_path(src.path)).mkdir(parents=True, exist_ok=True)
    elif folders := unread_subfolders(src.path, options):
        log.warning(
            "source %s: the files in the subfolders %s of %s are not read (a Spark file source reads them "
            "only with the option recursiveFileLookup: true)",
            src.name,
            _named(folders),
            src.path,
            extra={"table": table},
        )
    why = listing_refusal(src, options, config, connect=is_connect(session))
    if why is None:
        log.info("%s: Tidehouse lists the source folder %s", table, src.path)
        admission = {k: v for k, v in options.items() if k.lower() in ADMISSION}
        stream = (
            session.readStream.format(FILES)
            .option("path", _local(src.path))
            .option("log", str(Path(checkpoint) / "sources" / "0"))
            .options(**admission, **(waiting or {}))
            .load()
        )
        return stream, SparkFiles(src, options, checkpoint)
    reader = _configured(session.readStream, src, options)
    stream = reader.load(src.path) if src.path else reader.load()
    if src.format not in FILE_FORMATS:
        return stream, None
    log.info("%s: Spark's file source lists %s: %s", table, src.path, why)
    return with_file(stream, src), SparkListed(src, options, checkpoint)


_HADOOP_GLOB = re.compile(r"([\\*?\[\]{}])")


class SparkFiles:
    """A micro-batch of a source Tidehouse lists, read by Spark: its files (from the checkpoint's file log)
    through Spark's reader with the source's schema and options."""

    def __init__(self, src: SourcePlan, options: dict[str, str], checkpoint: str) -> None:
        self.src, self.checkpoint = src, checkpoint
        self.options = {k: v for k, v in options.items() if k.lower() not in ADMISSION}

    def __call__(self, batch_df, batch_id: int):
        files = source_files(self.checkpoint, batch_id)
        if files is None:
            raise TidehouseError(
                ErrorCode.STORAGE_CORRUPT,
                f"the checkpoint {self.checkpoint} does not list the files of micro-batch {batch_id} of "
                f"source {self.src.name}",
                hint="the checkpoint was changed by hand; `tidehouse flow trigger --full-refresh` rebuilds "
                "the table from its source folder",
            )
        return self.read(batch_df.sparkSession, files)

    def read(self, session, files: list[str]):
        """``files`` (URIs) through Spark's batch reader, each by its own name."""
        # Spark's reader takes paths as glob patterns: a file named x[1].json is escaped to be itself
        paths = [_HADOOP_GLOB.sub(r"\\\1", uri_path(f)) for f in files]
        return with_file(_configured(session.read, self.src, self.options).load(paths), self.src)


class SparkListed:
    """A micro-batch of a file source Spark's file source lists: the rows of Spark's batch DataFrame, except
    in a batch with a file whose name holds a glob character (``x[1].json``), of which Spark 4.3's file source
    reads the batch's other files once more per such name (SPARK-58518, docs/architecture.md). Such a batch
    is read by :class:`SparkFiles` (each file by its escaped name) when that reads what Spark's source means
    to: local files, a declared schema (Spark's source inferred one for the whole stream) and no
    ``key=value`` folders (whose partition columns only the streaming source adds); otherwise it fails with
    an error naming the file. Never rows read twice."""

    def __init__(self, src: SourcePlan, options: dict[str, str], checkpoint: str) -> None:
        self.src, self.files = src, SparkFiles(src, options, checkpoint)

    def __call__(self, batch_df, batch_id: int):
        files = source_files(self.files.checkpoint, batch_id)
        if files is None:  # the checkpoint does not say (a remote one): the batch's plan does
            files = list(batch_df.inputFiles())
        named = [f for f in files if _GLOB.search(os.path.basename(uri_path(f)))]
        if not named:
            return batch_df
        why = self._unreadable(files)
        if why is None:
            log.info(
                "%s: Spark reads batch %d by file names (%s has a glob character)",
                self.src.name,
                batch_id,
                named[0],
            )
            return self.files.read(batch_df.sparkSession, files)
        raise TidehouseError(
            ErrorCode.SOURCE_INVALID,
            f"source {self.src.name}: the name of file {uri_path(named[0])} has a glob character, and "
            f"Spark's file source, which lists this source ({why}), would read the other files of its "
            f"micro-batch {batch_id} once more for it (SPARK-58518)",
            hint="rename the file without [ ] { } * ? \\, or let Tidehouse list the source: a local folder "
            'and a declared schema (docs/architecture.md, "Listing a source folder")',
            params={"source": self.src.name, "file": uri_path(named[0])},
        )

    def _unreadable(self, files: list[str]) -> str | None:
        """Why the batch's files cannot be read by name as Spark's source means to (None: they can)."""
        if not self.src.ddl:
            return "the source declares no schema"
        path = self.src.path
        folder = bool(path) and scheme_of(path) in ("", "file") and not _GLOB.search(path)
        if folder and has_partition_folders(_local(path)):
            return "its folder holds key=value folders"
        remote = next((f for f in files if not f.startswith("file:")), None)
        return None if remote is None else f"{remote} is not a local file"


__all__ = ["LISTING_OPTIONS", "SparkFiles", "SparkListed", "listing_refusal", "source_stream", "with_file"]
