"""What tiering knows about a table: the offsets the lake covers, a per-table lock, a bounded cycle history.

The **lake snapshot is the source of truth** for how far a table is tiered: every tiering (and compaction)
snapshot carries the summary property ``tidehouse.offsets`` = JSON ``{"<bucket>": <end offset>, ...}``. A
snapshot without it (written by another engine) is skipped: the offsets come from the newest ancestor that
has it; none = all zeros.

The lock and the history live under ``<home>/run/tiering/`` (always local): the lock fences cycles of one
table across the processes of this machine; the catalog's optimistic commit check fences the rest.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyiceberg.table import Table

from runtime.core.errors import ErrorCode, Location, TidehouseError

OFFSETS_PROPERTY = "tidehouse.offsets"
HISTORY_MAX_LINES = 2000  # trimmed to half when exceeded


def offsets_json(offsets: list[int]) -> str:
    return json.dumps({str(b): int(o) for b, o in enumerate(offsets)}, separators=(",", ":"))


def parse_offsets(text: str, buckets: int) -> list[int]:
    raw = json.loads(text)
    out = [0] * buckets
    for key, value in raw.items():
        bucket = int(key)
        if bucket >= buckets:
            raise TidehouseError(
                ErrorCode.STORAGE_CORRUPT,
                f"lake offsets name bucket {bucket} but the table has {buckets} buckets",
            )
        out[bucket] = int(value)
    return out


def lake_offsets(table: Table, buckets: int, *, at: Any = None) -> tuple[list[int], Any]:
    """(per-bucket end offsets the lake covers as of snapshot ``at`` (default: the current one), the snapshot
    that recorded them or None)."""
    snap = table.current_snapshot() if at is None else at
    while snap is not None:
        text = snap.summary.additional_properties.get(OFFSETS_PROPERTY) if snap.summary else None
        if text is not None:
            return parse_offsets(text, buckets), snap
        snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    return [0] * buckets, None


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


@contextmanager
def table_lock(run_dir: Path, name: str, timeout: float = 600.0) -> Iterator[None]:
    """Exclusive lock of one table's tiering across processes (``flock``, released if the process dies)."""
    folder = Path(run_dir) / "tiering"
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / f"{_safe(name)}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TidehouseError(
                        ErrorCode.STORAGE_LOCKED,
                        f"another process has been tiering {name} for over {timeout:.0f}s",
                        location=Location(path=name),
                    ) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def history_path(run_dir: Path, name: str) -> Path:
    return Path(run_dir) / "tiering" / f"{_safe(name)}.jsonl"


def append_history(run_dir: Path, name: str, record: dict[str, Any]) -> None:
    """Append one cycle record; keep the file bounded (call with the table lock held)."""
    path = history_path(run_dir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, separators=(",", ":")) + "\n")
    if path.stat().st_size > HISTORY_MAX_LINES * 200:  # cheap size check before counting lines
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) > HISTORY_MAX_LINES:
            tmp = path.with_suffix(".tmp")
            tmp.write_text("\n".join(lines[-HISTORY_MAX_LINES // 2 :]) + "\n", encoding="utf-8")
            os.replace(tmp, path)


def read_history(run_dir: Path, name: str, since: float | None = None) -> list[dict[str, Any]]:
    path = history_path(run_dir, name)
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a crash
            continue
        if since is None or record.get("at", 0) >= since:
            out.append(record)
    return out
