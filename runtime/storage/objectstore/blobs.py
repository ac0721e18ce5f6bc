"""Data objects on a pyarrow filesystem: where they live, their byte format, put/get, and a read cache.

A **data object** holds the bucket parts of one write attempt: for each bucket that got rows, one Arrow IPC
*stream* (schema + one record batch), each starting at a multiple of 8 bytes. Its name is unique to the
attempt (``<µs since epoch, hex>-<uuid4>.thd``) and it is never overwritten or appended to. What makes a
part visible is its frame row in the metastore, which records the part's byte range and CRC-32; the object
itself carries no offsets (they are assigned in the commit transaction, after the put).

Layout under the root: ``<layer>/<name>/<incarnation>/data/<object>.thd``; the state snapshots of a
primary-key table (docs/architecture.md, "Retention of state tables") under
``<layer>/<name>/<incarnation>/snapshots/<bucket>-<offset>-<uuid>.thd``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.uris import scheme_of
from runtime.storage.frames import _crc32, ipc_streams

SUFFIX = ".thd"
SCHEMES = ("s3",)  # what open_store maps to this store (any pyarrow FileSystem works through the Python API)
S3_KEYS = ("endpoint", "region", "access_key", "secret_key", "session_token")


@dataclass(frozen=True)
class Part:
    """Where one bucket's part sits in its object, and its checksum."""

    position: int
    length: int
    crc: int


def filesystem_for(root: str, s3: Mapping[str, Any] | None = None) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and base path (``bucket/prefix``) of an ``s3://bucket/prefix`` root."""
    scheme = scheme_of(root)
    loc = Location(path=root)
    if scheme not in SCHEMES:
        raise TidehouseError(
            ErrorCode.CONFIG_INVALID,
            f"storage root {root!r}: the object-store hot storage "
            f"takes {', '.join(s + '://' for s in SCHEMES)} roots",
            location=loc,
        )
    parsed = urlparse(root)
    if not parsed.netloc:
        raise TidehouseError(
            ErrorCode.CONFIG_INVALID,
            f"storage root {root!r} names no bucket (s3://bucket/prefix)",
            location=loc,
        )
    opts = dict(s3 or {})
    unknown = sorted(set(opts) - set(S3_KEYS))
    if unknown:
        raise TidehouseError(
            ErrorCode.CONFIG_INVALID,
            f"storage.s3: unknown key(s) {unknown} (known: {list(S3_KEYS)})",
            location=Location(path="storage.s3"),
        )
    if bool(opts.get("access_key")) != bool(opts.get("secret_key")):
        raise TidehouseError(
            ErrorCode.CONFIG_INVALID,
            "storage.s3: access_key and secret_key go together",
            location=Location(path="storage.s3"),
        )
    kwargs: dict[str, Any] = {"region": str(opts.get("region") or "us-east-1")}
    endpoint = opts.get("endpoint")
    if endpoint:
        endpoint = str(endpoint)
        ep_scheme = scheme_of(endpoint)
        if ep_scheme and ep_scheme not in ("http", "https"):
            raise TidehouseError(
                ErrorCode.CONFIG_INVALID,
                f"storage.s3.endpoint {endpoint!r}: expected http://host:port or https://host:port",
                location=Location(path="storage.s3"),
            )
        kwargs["scheme"] = ep_scheme or "https"
        kwargs["endpoint_override"] = endpoint.split("://", 1)[-1].rstrip("/")
    if opts.get("access_key"):
        kwargs.update(access_key=str(opts["access_key"]), secret_key=str(opts["secret_key"]))
        if opts.get("session_token"):
            kwargs["session_token"] = str(opts["session_token"])
    fs = pafs.S3FileSystem(**kwargs)
    base = f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/")
    return fs, base


def check_root(fs: pafs.FileSystem, base: str) -> None:
    """The S3 bucket of the root ``base`` (``bucket/prefix``) exists and answers."""
    bucket = base.split("/", 1)[0]
    try:
        info = fs.get_file_info(bucket)
    except (OSError, pa.ArrowException) as exc:
        raise TidehouseError(
            ErrorCode.STORAGE_IO,
            f"hot storage s3://{base}: cannot reach bucket {bucket!r}: {exc}",
            location=Location(path="storage.root"),
            hint="check storage.s3 (endpoint, credentials)",
        ) from exc
    if info.type == pafs.FileType.NotFound:
        raise TidehouseError(
            ErrorCode.STORAGE_IO,
            f"hot storage s3://{base}: bucket {bucket!r} does not exist",
            location=Location(path="storage.root"),
            hint="create the bucket first (the store never creates buckets)",
        )


def object_dir(base: str, table: str, incarnation: str) -> str:
    layer, name = table.split(".", 1)
    return f"{base}/{layer}/{name}/{incarnation}/data"


def new_object_name(base: str, table: str, incarnation: str) -> str:
    return f"{object_dir(base, table, incarnation)}/{time.time_ns() // 1000:016x}-{uuid.uuid4().hex}{SUFFIX}"


def snapshot_dir(base: str, table: str, incarnation: str) -> str:
    layer, name = table.split(".", 1)
    return f"{base}/{layer}/{name}/{incarnation}/snapshots"


def new_snapshot_name(base: str, table: str, incarnation: str, bucket: int, offset: int) -> str:
    return f"{snapshot_dir(base, table, incarnation)}/{bucket}-{offset:020d}-{uuid.uuid4().hex}{SUFFIX}"


def encode_table(table: pa.Table) -> pa.Buffer:
    """A state snapshot object: one Arrow IPC stream of the rows (read back with :func:`decode_table`)."""
    return ipc_streams([table])[0]


def decode_table(buf: pa.Buffer) -> pa.Table:
    return pa.ipc.open_stream(buf).read_all()


def encode(batches: Sequence[pa.RecordBatch]) -> tuple[pa.Buffer, list[Part]]:
    """One object's bytes holding ``batches`` (one IPC stream each, 8-byte aligned) and where each part is."""
    buf, spans = ipc_streams(batches, align=8)
    return buf, [
        Part(position, length, _crc32(buf[position : position + length])) for position, length in spans
    ]


def decode(buf: pa.Buffer, part: Part) -> pa.RecordBatch:
    return pa.ipc.open_stream(buf.slice(part.position, part.length)).read_next_batch()


def part_ok(buf: pa.Buffer, part: Part) -> bool:
    return (
        part.position + part.length <= buf.size and _crc32(buf.slice(part.position, part.length)) == part.crc
    )


def io_error(what: str, path: str, exc: BaseException, hint: str | None = None) -> TidehouseError:
    return TidehouseError(
        ErrorCode.STORAGE_IO, f"{what} {path} failed: {exc}", location=Location(file=path), hint=hint
    )


CACHE_BYTES = 256 << 20  # a process's cache of objects, by default


class Blobs:
    """Put and get whole objects; an LRU cache by bytes of the objects read or written by this process
    (objects are immutable, so a cached copy is never stale)."""

    def __init__(self, fs: pafs.FileSystem, *, cache_bytes: int = CACHE_BYTES) -> None:
        self.fs = fs
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[str, pa.Buffer] = OrderedDict()
        self._cached = 0
        self._lock = threading.Lock()
        self._local = fs.type_name == "local"
        self._dirs: set[str] = set()

    def put(self, path: str, buf: pa.Buffer) -> None:
        try:
            if self._local:  # an object store has no folders; a local filesystem needs them
                parent = path.rsplit("/", 1)[0]
                if parent not in self._dirs:
                    self.fs.create_dir(parent, recursive=True)
                    self._dirs.add(parent)
            with self.fs.open_output_stream(path) as out:
                out.write(buf)
        except (OSError, pa.ArrowException) as exc:
            raise io_error(
                "putting the data object",
                path,
                exc,
                hint="nothing was committed; retry with the same writer and seq",
            ) from exc
        self._remember(path, buf)

    def get(self, path: str) -> pa.Buffer:
        with self._lock:
            buf = self._cache.get(path)
            if buf is not None:
                self._cache.move_to_end(path)
                return buf
        try:
            with self.fs.open_input_stream(path) as src:
                buf = src.read_buffer()
        except FileNotFoundError:
            raise
        except (OSError, pa.ArrowException) as exc:
            if "NoSuchKey" in str(exc) or "does not exist" in str(exc).lower():
                raise FileNotFoundError(path) from exc
            raise io_error("reading the data object", path, exc) from exc
        self._remember(path, buf)
        return buf

    def delete(self, paths: Sequence[str]) -> None:
        """Delete objects (missing ones are fine: another process's retention may have been first)."""
        for path in paths:
            self.forget(path)
            try:
                self.fs.delete_file(path)
            except FileNotFoundError:
                pass
            except (OSError, pa.ArrowException) as exc:
                if "NoSuchKey" not in str(exc):
                    raise io_error(
                        "deleting the data object", path, exc, hint="it is collected later (collect_garbage)"
                    ) from exc

    def forget(self, path: str) -> None:
        with self._lock:
            buf = self._cache.pop(path, None)
            if buf is not None:
                self._cached -= buf.size

    def _remember(self, path: str, buf: pa.Buffer) -> None:
        if buf.size > self.cache_bytes // 4:
            return
        with self._lock:
            if path in self._cache:
                return
            self._cache[path] = buf
            self._cached += buf.size
            while self._cached > self.cache_bytes and self._cache:
                _, old = self._cache.popitem(last=False)
                self._cached -= old.size

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
            self._cached = 0
