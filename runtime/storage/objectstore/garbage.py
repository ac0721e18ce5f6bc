"""Garbage collection of the object-store hot storage: data objects no committed frame references, and
state snapshot objects no registration names.

They are left by a write that crashed between its put and its commit, by a commit that failed, by retention
that deleted the last frame of an object before its delete reached storage, by a snapshot replaced or never
registered, and by dropped tables. An object is collected only once it is older than a grace period (a
write's put comes before its commit, a snapshot's before its registration).
"""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.fs as pafs

from runtime.storage.objectstore import blobs
from runtime.storage.objectstore.metastore import Metastore


def collect_garbage(
    fs: pafs.FileSystem, base: str, metastore: Metastore, objects: blobs.Blobs, name: str | None, grace: float
) -> int:
    """Delete the data objects under ``base`` no committed frame references and the snapshot objects no
    registration names, last modified more than ``grace`` seconds ago, of one table (or of every table under
    the root, including dropped ones). Returns how many objects were deleted."""
    live = metastore.incarnations()
    if name is not None:
        layer, tname = name.split(".", 1)
        where = f"{base}/{layer}/{tname}"
    else:
        where = base
    try:
        infos = fs.get_file_info(pafs.FileSelector(where, recursive=True, allow_not_found=True))
    except (OSError, pa.ArrowException) as exc:
        raise blobs.io_error("listing", where, exc) from exc
    cutoff = time.time() - grace
    referenced: dict[tuple[str, str], set[str]] = {}
    listed = {"data": metastore.objects, "snapshots": metastore.snapshot_objects}
    doomed = []
    for info in infos:
        if info.type != pafs.FileType.File or not info.path.endswith(blobs.SUFFIX):
            continue
        parts = info.path[len(base) + 1 :].split("/")
        if len(parts) != 5 or parts[3] not in listed:
            continue
        mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
        if mtime > cutoff:
            continue
        inc, kind = parts[2], parts[3]
        if inc in live:
            if (inc, kind) not in referenced:
                referenced[(inc, kind)] = listed[kind](inc)
            if info.path in referenced[(inc, kind)]:
                continue
        doomed.append(info.path)
    objects.delete(doomed)
    return len(doomed)
