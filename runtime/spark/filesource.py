"""The ``tidehouse_files`` streaming source: a file source's folder listed once per new file.

Spark's file source lists its whole folder at every trigger and builds a Hadoop path, a URI and a status for
every file in it, read or not (~21 µs per file here): a long-running flow over a folder that keeps its files
costs its driver more every day (docs/architecture.md, "Listing a source folder"). This source lists the
folder with ``os.scandir`` — names only; only a name it has not admitted yet is stat'ed — and admits new
files exactly as Spark's file source does:

* *Which files*: every file directly in the folder (Spark's file source reads no subfolder unless it is a
  ``key=value`` partition folder, which this source refuses) except names Spark leaves out (``_x``
  without ``=``, ``.x``, ``x._COPYING_``), oldest modification time first, at most ``maxFilesPerTrigger``
  files or ``maxBytesPerTrigger`` bytes (but at least one file) per micro-batch. A file whose modification
  time is more than 7 days (Spark's ``maxFileAge``) older than the newest admitted file is not new, except
  in the first batch; a file is admitted once, by path.
* *The log*: each admitted batch is a file of the query's checkpoint, ``sources/0/<k>``, in Spark's own
  file-source log format (``"v1"``, then ``{"path", "timestamp", "batchId"}`` per file, paths as Spark's URIs
  spell them), and every 10th a ``<k>.compact`` of every file still within the age; the offset is Spark's,
  ``{"logOffset": k}``. So :mod:`runtime.spark.filelog` reads a batch's files as before, and a checkpoint
  Spark's source wrote goes on here, and back.
* *Rows*: one per file of the micro-batch (``path``: the URI); the batch functions read the files
  (``materializer.sources``).
* *Waiting*: given ``idleWaitMs`` (and ``pollMs``, ``awakeFile``), a trigger whose folder did not change
  waits for it to change instead of answering at once (:mod:`runtime.spark.idlewait`).

Crash cases: a log file is written to a temporary name and linked into place, never over an existing one (two
writers of one query fail, they do not mix). Dying after a log file was written and before Spark wrote its
offset leaves admitted files no batch covers yet: the next ``latestOffset`` returns them (the log says what
was admitted; offsets only say how far a batch reaches). A replayed batch reads the same log entries. A log
Spark wrote in another layout is an error, not a guess.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import unicodedata
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxFiles
from pyspark.sql.types import StructType

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.core.files import fsync_dir
from runtime.spark.idlewait import POLL_MS, wait_for_rows
from runtime.spark.worker_memory import keep_pandas_out

# a source query's runner process runs only this source's methods: no pandas there (see worker_memory)
keep_pandas_out()

NAME = "tidehouse_files"
SCHEMA = "path string"
COMPACT_INTERVAL = 10  # Spark's spark.sql.streaming.fileSource.log.compactInterval
MAX_FILE_AGE_MS = 7 * 24 * 3600 * 1000  # Spark's maxFileAge default
KEEP_BATCHES = 100  # plain log files kept behind a compaction (Spark's minBatchesToRetain)
# a folder whose modification time (a name added, removed or renamed) is what it was at the last listing, and
# more than this far in the past (a file system's clock may tick coarsely), is not listed again
SETTLED_NS = 2_000_000_000
OLD_RECHECK_S = 10.0  # how often a file too old to be new is stat'ed again (a newer file of that name is new)
# java.net.URI's legal path characters (unreserved, punct, "/", "@"); others are %-quoted as UTF-8
_QUOTED_CATEGORIES = ("Zs", "Zl", "Zp", "Cc", "Cs")  # Character.isSpaceChar, isISOControl, unpaired
_URI_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!~*'();:@&=+$,/")


def spark_uri(path: str) -> str:
    """``file://`` + ``path`` quoted as Spark's file source writes it in its log (``java.net.URI``: a
    non-ASCII character stays as it is unless it is a space or a control character; ``%`` is always
    quoted)."""
    out = []
    for ch in path:
        if ch in _URI_SAFE or (ord(ch) > 127 and unicodedata.category(ch) not in _QUOTED_CATEGORIES):
            out.append(ch)
        else:
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogateescape")))
    return "file://" + "".join(out)


def uri_path(uri: str) -> str:
    """The local path of a log entry's URI (either quoting: Spark's or Python's)."""
    return unquote(urlparse(uri).path) if uri.startswith("file:") else uri


def hidden(name: str) -> bool:
    """Whether Spark's file listing leaves a file or folder of this name out (InMemoryFileIndex)."""
    if name.startswith(("_common_metadata", "_metadata")):
        return False
    return (name.startswith("_") and "=" not in name) or name.startswith(".") or name.endswith("._COPYING_")


class FileLog:
    """A query's file-source log, ``<checkpoint>/sources/0``: read whole at start, appended per batch."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)

    def _ids(self) -> tuple[list[int], list[int]]:
        """(plain batch ids, compact batch ids) present, ascending."""
        plain, compact = [], []
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return [], []
        for name in names:
            stem, _, suffix = name.partition(".")
            if not stem.isdigit() or suffix not in ("", "compact"):
                continue  # Spark's temporary files, ours
            (compact if suffix else plain).append(int(stem))
        return sorted(plain), sorted(compact)

    def _read(self, path: Path) -> list[dict]:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise self._corrupt(f"cannot read {path}: {exc}") from exc
        if not lines or lines[0] != "v1":
            raise self._corrupt(f"{path} is not a file-source log of version v1")
        try:
            entries = [json.loads(line) for line in lines[1:] if line]
        except ValueError as exc:
            raise self._corrupt(f"{path} holds a line that is not JSON") from exc
        if not all(isinstance(e, dict) and {"path", "timestamp", "batchId"} <= e.keys() for e in entries):
            raise self._corrupt(f"{path} holds an entry without path, timestamp and batchId")
        return entries

    def _corrupt(self, what: str) -> TidehouseError:
        return TidehouseError(
            ErrorCode.STORAGE_CORRUPT,
            f"the file log of a source query: {what}",
            hint="the query's checkpoint was changed by hand; `tidehouse flow trigger --full-refresh` "
            "rebuilds the table from its source folder",
        )

    def restore(self) -> tuple[int, list[dict]]:
        """(the last batch id, -1 for none; every entry of the latest compact file and of the batches after
        it)."""
        plain, compact = self._ids()
        last = max(plain + compact, default=-1)
        entries: list[dict] = []
        after = -1
        if compact:
            after = compact[-1]
            entries.extend(self._read(self.folder / f"{after}.compact"))
        for k in plain:
            if k > after:
                entries.extend(self._read(self.folder / str(k)))
        return last, entries

    def batch(self, k: int) -> list[dict]:
        """Batch ``k``'s entries: from its own file, else from the first compact file at or after it."""
        own = self.folder / str(k)
        if own.exists():
            return self._read(own)
        _, compact = self._ids()
        for c in compact:
            if c >= k:
                return [e for e in self._read(self.folder / f"{c}.compact") if e["batchId"] == k]
        raise self._corrupt(f"batch {k} is in neither {own} nor a compact file after it")

    def write(self, k: int, entries: Sequence[dict], *, compact: bool = False) -> None:
        """Write batch ``k``'s file (or compact file) whole, or fail if another writer made it first."""
        self.folder.mkdir(parents=True, exist_ok=True)
        final = self.folder / (f"{k}.compact" if compact else str(k))
        tmp = self.folder / f".{final.name}.{os.getpid()}.tmp"
        body = "v1\n" + "".join(
            json.dumps(e, separators=(",", ":"), ensure_ascii=False) + "\n" for e in entries
        )
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(tmp, final)
        except FileExistsError as exc:
            raise TidehouseError(
                ErrorCode.FLOW_RUNNING,
                f"{final} was written by another process: two runs of one source query",
                hint="stop the other run of this flow",
            ) from exc
        finally:
            os.unlink(tmp)
        fsync_dir(self.folder)

    def prune(self, compacted: int) -> None:
        """After compact file ``compacted``: drop older compact files, plain files more than
        :data:`KEEP_BATCHES` batches behind it, and the temporary files a writer killed between writing and
        linking one left (``.<k>.<pid>.tmp``, ``.<k>.compact.<pid>.tmp``) of batches up to it — those are
        written, no writer is at them."""
        plain, compact = self._ids()
        doomed = [f"{c}.compact" for c in compact if c < compacted]
        doomed += [str(k) for k in plain if k <= compacted - KEEP_BATCHES]
        doomed += [name for name in os.listdir(self.folder) if _temporary_of(name, compacted)]
        for name in doomed:
            with contextlib.suppress(FileNotFoundError):
                (self.folder / name).unlink()


def _temporary_of(name: str, last: int) -> bool:
    """Whether ``name`` is :meth:`FileLog.write`'s temporary file of a batch up to ``last``."""
    parts = name.split(".")  # ["", k, pid, "tmp"] or ["", k, "compact", pid, "tmp"]
    return (
        len(parts) in (4, 5)
        and parts[0] == ""
        and parts[-1] == "tmp"
        and parts[1].isdigit()
        and int(parts[1]) <= last
        and (len(parts) == 4 or parts[2] == "compact")
    )


class SeenFiles:
    """The files admitted so far, by local path, with Spark's age rule (``SeenFilesMap``): a file is new when
    its path was not admitted and its time is not older than the newest admitted time minus the age, counted
    from the last purge (so the first batch takes every file)."""

    def __init__(self, max_age_ms: int = MAX_FILE_AGE_MS) -> None:
        self.max_age_ms = max_age_ms
        self.entries: dict[str, dict] = {}  # local path -> log entry
        self.latest = 0
        self.purged_below = 0

    def add(self, entry: dict) -> None:
        self.entries[uri_path(entry["path"])] = entry
        self.latest = max(self.latest, int(entry["timestamp"]))

    def is_new(self, path: str, timestamp: int) -> bool:
        return timestamp >= self.purged_below and path not in self.entries

    def purge(self) -> None:
        self.purged_below = self.latest - self.max_age_ms
        for path in [p for p, e in self.entries.items() if int(e["timestamp"]) < self.purged_below]:
            del self.entries[path]


def list_files(root: str) -> Iterator[os.DirEntry]:
    """The files directly in ``root`` that Spark's listing keeps. Spark's file source reads no file of a
    subfolder (``PartitioningAwareFileIndex.allFiles`` without partition columns) unless the folder is named
    ``key=value``: then it reads them with partition columns, which this listing does not add, so such a
    folder appearing is an error."""
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        raise _missing(root) from None
    for entry in entries:
        if hidden(entry.name):
            continue
        if entry.is_dir():
            if "=" in entry.name:
                raise TidehouseError(
                    ErrorCode.SOURCE_INVALID,
                    f"the source folder {root} now holds the partition folder {entry.path}: Spark "
                    "reads its partition columns from such folders, which Tidehouse's listing does not",
                    hint="restart the flow: a folder with key=value folders is listed by Spark's own "
                    "file source (or set materializer.list_sources: false)",
                )
        elif entry.is_file():
            yield entry


def _folder_mtime(root: str) -> int:
    try:
        return os.stat(root).st_mtime_ns
    except FileNotFoundError:
        raise _missing(root) from None


def _missing(root: str) -> TidehouseError:
    return TidehouseError(
        ErrorCode.SOURCE_INVALID,
        f"the source folder {root} does not exist (any more)",
        hint="create it again; the files the query admitted are in its checkpoint",
    )


def has_partition_folders(root: str) -> bool:
    """Whether any folder under ``root`` is named ``key=value`` (Spark reads partition columns from it)."""
    for _folder, names, _ in os.walk(root):
        if any("=" in n and not hidden(n) for n in names):
            return True
        names[:] = [n for n in names if not hidden(n)]
    return False


class Files(InputPartition):
    """One task: the URIs of a micro-batch's files."""

    def __init__(self, uris: Sequence[str]) -> None:
        self.uris = tuple(uris)


class FolderStream(DataSourceStreamReader):
    """Offsets ``{"logOffset": k}``: the last log batch a micro-batch reaches (see the module docstring)."""

    def __init__(
        self,
        root: str,
        log: str,
        max_files: int | None,
        max_bytes: int | None,
        idle_wait_ms: int | None = None,
        poll_ms: int = POLL_MS,
        awake_file: str | None = None,
    ) -> None:
        self.root, self.log = root, FileLog(log)
        self.max_files, self.max_bytes = max_files, max_bytes
        self.idle_wait_ms, self.poll_ms, self.awake_file = idle_wait_ms, poll_ms, awake_file
        self.seen: SeenFiles | None = None
        self.last = -1
        self.old: set[str] = set()  # listed files too old to be new: stat'ed again every OLD_RECHECK_S
        self.old_checked = time.monotonic()
        self.listed: int | None = None  # the folder's modification time when it was last listed
        self.pending = False  # the last listing found more new files than one batch takes

    def _restore(self) -> SeenFiles:
        if self.seen is None:
            seen = SeenFiles()
            self.last, entries = self.log.restore()
            for entry in entries:
                seen.add(entry)
            seen.purge()
            self.seen = seen
        return self.seen

    def initialOffset(self) -> dict:
        return {"logOffset": -1}

    def getDefaultReadLimit(self):
        if self.max_files:
            return ReadMaxFiles(self.max_files)
        if self.max_bytes:
            return ReadMaxBytes(self.max_bytes)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit) -> dict:
        seen = self._restore()
        recheck = time.monotonic() - self.old_checked >= OLD_RECHECK_S
        if recheck:
            self.old, self.old_checked = set(), time.monotonic()
        folder = _folder_mtime(self.root)
        if (
            not recheck
            and not self.pending
            and folder == self.listed
            and time.time_ns() - folder > SETTLED_NS
        ):
            if not self._folder_moved(folder):
                return {"logOffset": self.last}  # no name came or went since the last listing
            folder = _folder_mtime(self.root)
        new = []
        for entry in list_files(self.root):
            path = entry.path  # absolute: the root is
            if path in seen.entries or path in self.old:
                continue
            try:
                stat = entry.stat()
            except FileNotFoundError:
                continue  # gone since the listing
            mtime = stat.st_mtime_ns // 1_000_000
            if seen.is_new(path, mtime):
                new.append((mtime, path, stat.st_size))
            else:
                self.old.add(path)
        self.listed = folder
        if new:
            new.sort()
            taken = admitted(new, limit)
            self.pending = len(taken) < len(new)  # the rest is new at the next call, whatever the folder
            self._admit(taken)
        return {"logOffset": self.last}

    def _folder_moved(self, folder: int) -> bool:
        """Given ``idleWaitMs``: wait for a name to come or go in the folder (runtime.spark.idlewait)."""
        if not self.idle_wait_ms:
            return False
        return wait_for_rows(
            lambda: _folder_mtime(self.root) != folder,
            wait_s=self.idle_wait_ms / 1000,
            poll_s=self.poll_ms / 1000,
            awake=self.awake_file,
        )

    def _admit(self, files: list[tuple[int, str, int]]) -> None:
        """Log batch ``k`` = the next one: as Spark does, a compaction batch is written as ``k.compact`` only,
        which holds every admitted file still within the age and all of batch ``k``'s."""
        k = self.last + 1
        entries = [{"path": spark_uri(path), "timestamp": mtime, "batchId": k} for mtime, path, _ in files]
        if (k + 1) % COMPACT_INTERVAL == 0:
            floor = max(self.seen.latest, *(e["timestamp"] for e in entries)) - self.seen.max_age_ms
            kept = [e for e in self.seen.entries.values() if int(e["timestamp"]) >= floor]
            self.log.write(k, kept + entries, compact=True)
            self.log.prune(k)
        else:
            self.log.write(k, entries)
        self.last = k
        for entry in entries:
            self.seen.add(entry)
        self.seen.purge()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        first, last = int(start.get("logOffset", -1)) + 1, int(end["logOffset"])
        uris = [e["path"] for k in range(first, last + 1) for e in self.log.batch(k)]
        return [Files(uris)] if uris else []

    def read(self, partition: Files) -> Iterator[tuple]:
        for uri in partition.uris:
            yield (uri,)

    def commit(self, end: dict) -> None:
        """Nothing to release: the files stay where they are (Spark's ``cleanSource`` is not offered)."""


def admitted(new: list[tuple[int, str, int]], limit) -> list[tuple[int, str, int]]:
    """The new files (sorted oldest first) one micro-batch takes under ``limit``: Spark's rules."""
    if isinstance(limit, ReadMaxFiles):
        return new[: max(1, limit.max_files)]
    if isinstance(limit, ReadMaxBytes):
        taken, size = [], 0
        for f in new:
            size += f[2]
            if taken and size > limit.max_bytes:
                break
            taken.append(f)
        return taken
    return new


class FolderSource(DataSource):
    """``readStream.format("tidehouse_files").option("path", folder)``, with
    ``.option("log", "<checkpoint>/sources/0")``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> FolderStream:
        options = {str(k).lower(): v for k, v in dict(self.options).items()}
        missing = [k for k in ("path", "log") if not options.get(k)]
        if missing:
            raise TidehouseError(
                ErrorCode.SOURCE_INVALID, f"the {NAME} source needs the option {missing[0]!r}"
            )

        def positive(key: str) -> int | None:
            value = options.get(key.lower())
            return int(value) if value not in (None, "") and int(value) > 0 else None

        return FolderStream(
            os.path.abspath(options["path"]),
            options["log"],
            positive("maxFilesPerTrigger"),
            positive("maxBytesPerTrigger"),
            positive("idleWaitMs"),
            positive("pollMs") or POLL_MS,
            options.get("awakefile") or None,
        )


__all__ = [
    "NAME",
    "FileLog",
    "FolderSource",
    "FolderStream",
    "has_partition_folders",
    "spark_uri",
    "uri_path",
]
