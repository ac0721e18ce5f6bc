"""Readers: which markers does a table show right now? One per kind of table an outside reader sees."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlparse

Reader = Callable[[set[str]], set[str]]  # wanted markers -> the ones visible now


def _markers_in(column, wanted: set[str]) -> set[str]:
    import pyarrow as pa
    import pyarrow.compute as pc

    if not wanted or len(column) == 0:
        return set()
    hits = pc.filter(column, pc.is_in(column, value_set=pa.array(sorted(wanted))))
    return set(hits.to_pylist())


def _read_user_ids(path: str):
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=["user_id"]).column("user_id")


class SdpTableReader:
    """A batch read of one SDP table in the Spark warehouse, as any outside reader would do it.

    A streaming table is a file-sink directory: only files listed in its ``_spark_metadata`` commit log are
    committed. A materialized view is rewritten by each run: its committed files are the ``part-*`` files
    (the job commit moves them out of ``_temporary``). Every Parquet file is immutable, so each is read once
    and the markers it holds are remembered.
    """

    def __init__(self, table_dir: Path, streaming: bool) -> None:
        self.table_dir, self.streaming = Path(table_dir), streaming
        self._read: dict[str, set[str]] = {}
        self._logs_done: set[str] = set()
        self._committed: set[str] = set()

    def _files(self) -> list[str]:
        if self.streaming:
            log = self.table_dir / "_spark_metadata"
            if not log.is_dir():
                return []
            for entry in sorted(os.listdir(log)):
                if entry.startswith(".") or entry in self._logs_done:
                    continue
                try:
                    lines = (log / entry).read_text(encoding="utf-8").splitlines()[1:]
                except (OSError, UnicodeDecodeError):
                    continue
                for line in lines:
                    item = json.loads(line)
                    if item.get("action", "add") == "add":
                        self._committed.add(unquote(urlparse(item["path"]).path))
                self._logs_done.add(entry)
            return sorted(self._committed)
        try:
            names = os.listdir(self.table_dir)
        except OSError:
            return []
        return [str(self.table_dir / n) for n in names if n.startswith("part-") and n.endswith(".parquet")]

    def __call__(self, wanted: set[str]) -> set[str]:
        found: set[str] = set()
        current = self._files()
        for path in current:
            if path not in self._read:
                try:
                    ids = _read_user_ids(path)
                except (OSError, ValueError):  # an overwritten view file vanished: read it next time
                    continue
                self._read[path] = _markers_in(ids, wanted)
        for path in current:
            found |= self._read.get(path, set())
        if not self.streaming:  # forget files of older view versions
            live = set(current)
            self._read = {p: v for p, v in self._read.items() if p in live}
        return found & wanted


class HotReader:
    """Reads a Tidehouse hot table's log (or changelog) incrementally through the store."""

    def __init__(self, store, table: str) -> None:
        self.store, self.table = store, table
        self._next: list[int] = []

    def __call__(self, wanted: set[str]) -> set[str]:
        from runtime.core.errors import TidehouseError

        try:
            ends = self.store.end_offsets(self.table)
        except TidehouseError:  # not created yet
            return set()
        self._next += [0] * (len(ends) - len(self._next))
        found: set[str] = set()
        for bucket, end in enumerate(ends):
            if end > self._next[bucket]:
                batches = self.store.read(self.table, bucket, self._next[bucket], end, columns=["user_id"])
                for batch in batches:
                    found |= _markers_in(batch.column("user_id"), wanted)
                self._next[bucket] = end
        return found


class LakeReader:
    """Reads a Tidehouse lake table with plain pyiceberg whenever it has a new snapshot."""

    def __init__(self, lake, table: str) -> None:
        self.lake, self.table = lake, table
        self._iceberg = None
        self._snapshot = None
        self._seen: set[str] = set()

    def __call__(self, wanted: set[str]) -> set[str]:
        from pyiceberg.expressions import In

        from runtime.core.errors import TidehouseError

        try:
            if self._iceberg is None:
                self._iceberg = self.lake.load(self.table)
            else:
                self._iceberg.refresh()
        except TidehouseError:
            return set()
        snapshot = self._iceberg.current_snapshot()
        pending = wanted - self._seen
        if snapshot is None or not pending or snapshot.snapshot_id == self._snapshot:
            return self._seen & wanted
        self._snapshot = snapshot.snapshot_id
        ids = self._iceberg.scan(row_filter=In("user_id", pending), selected_fields=("user_id",)).to_arrow()
        self._seen |= _markers_in(ids.column("user_id"), pending)
        return self._seen & wanted
