"""The files one micro-batch of a Spark file source covers, read from the query's checkpoint.

Spark's file stream source records every file it admits in its own log, ``<checkpoint>/sources/0/``: one
file per source batch (``"v1"``, then one JSON line per input file: ``{"path": ..., "timestamp": ...,
"batchId": k}``), and every ``compactInterval`` batches a ``<k>.compact`` file holding all entries so far
(older files are deleted later). The query's offset log records the source's position per micro-batch
(``{"logOffset": k}``): micro-batch N covers the source batches after N-1's position, up to N's.

The driver data path reads these files itself (:mod:`materializer.jsonlines`). Anything this module does not
find as described — an offset log with more than one source, a missing entry, a line it cannot read — is
``None``, and Spark reads the batch as it always does: the log is Spark's, and a guess here would read the
wrong files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from runtime.core.uris import local_path


def _log_offset(checkpoint: Path, batch_id: int) -> int | None:
    """The file source's position after micro-batch ``batch_id``; None when the entry is not readable."""
    try:
        lines = (checkpoint / "offsets" / str(batch_id)).read_text(encoding="utf-8").splitlines()
        sources = [json.loads(line) for line in lines[2:]]  # "v1", batch metadata, one line per source
    except (OSError, ValueError):
        return None
    if len(sources) != 1 or not isinstance(sources[0], dict):
        return None
    offset = sources[0].get("logOffset")
    return offset if isinstance(offset, int) else None


def _candidates(log: Path, k: int):
    """Where source batch ``k``'s entries may be, in order; the folder is listed only when neither of its own
    files is there (None: the folder cannot be listed)."""
    yield log / str(k)
    yield log / f"{k}.compact"
    try:
        compacts = sorted(int(p.name.split(".")[0]) for p in log.iterdir() if p.name.endswith(".compact"))
    except (OSError, ValueError):
        yield None
        return
    yield from (log / f"{c}.compact" for c in compacts if c > k)


def _entries(log: Path, k: int) -> list[str] | None:
    """The paths source batch ``k`` admitted: from its own file, else from the first compact file that holds
    it (Spark compacts every few batches and deletes the files it compacted)."""
    for path in _candidates(log, k):
        if path is None:
            return None
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            continue
        except OSError:
            return None
        if not lines or lines[0] != "v1":
            return None
        out = []
        for line in lines[1:]:
            try:
                entry = json.loads(line)
            except ValueError:
                return None
            if entry.get("batchId") == k:
                out.append(entry["path"])
        return out
    return None


def source_files(checkpoint: str | os.PathLike, batch_id: int) -> list[str] | None:
    """The input files (URIs, as Spark recorded them) micro-batch ``batch_id`` of a query with one file
    source covers, in the order Spark admitted them; None when the checkpoint does not say."""
    root = local_path(str(checkpoint))
    end = _log_offset(root, batch_id)
    if end is None:
        return None
    start = -1
    if batch_id > 0:
        previous = _log_offset(root, batch_id - 1)
        if previous is None:  # Spark keeps the previous entry while it runs a batch
            return None
        start = previous
    files: list[str] = []
    log = root / "sources" / "0"
    for k in range(start + 1, end + 1):
        entries = _entries(log, k)
        if entries is None:
            return None
        files.extend(entries)
    return files


__all__ = ["source_files"]
