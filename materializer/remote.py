"""Micro-batches over Spark Connect (docs/architecture.md, "Over Spark Connect").

With ``spark.remote`` a query's ``foreachBatch`` function runs in a Python process of the Connect server, not
in the client. So the function is a value, :class:`RemoteBatch`: the table's plan and the :class:`Place` of
its store and lake, pickled to the server, where it builds its query context on first use and runs the
executor-path strategy. Its figures come back through the run's folder under the checkpoint root
(:class:`RemoteRun`): after each batch the server-side function rewrites ``<table>.<instance>.json`` with its
cumulative figures; the client adds each instance's growth to the table's :class:`TableStats`.

The run's folder holds the client's heartbeat (touched every :data:`HEARTBEAT_EVERY_S`): a server-side
batch refuses to run when the folder is not there on its first call (client and server do not share the
checkpoint root) or when the heartbeat is older than :data:`CLIENT_TIMEOUT_S` (the client is gone: its
queries must stop rather than run on unwatched).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from materializer.guard import guarded
from materializer.plan import FlowPlan
from materializer.strategies import QueryContext, TableStats
from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.spark.options import Place

HEARTBEAT = "client.heartbeat"
HEARTBEAT_EVERY_S = 5.0
CLIENT_TIMEOUT_S = 30.0
_LAST = ("last_batch_time", "last_batch_seconds", "last_origin_ts", "last_rows_out", "last_batch_id")
_ERROR = ("error", "error_code", "error_message", "error_hint")


def run_folder(checkpoint_root: str | os.PathLike, flow: str) -> Path:
    """A new folder for one run's heartbeat and figures."""
    return (
        Path(checkpoint_root) / "_connect" / flow / f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    )


@dataclass
class RemoteBatch:
    """``foreachBatch`` function of one table's query, run by the Connect server."""

    plan: FlowPlan
    table: str
    place: Place
    folder: str
    spark_partitions: int
    _ctx: QueryContext | None = field(default=None, repr=False)
    _fn: Any = field(default=None, repr=False)
    _instance: str = field(default="", repr=False)

    def __getstate__(self) -> dict:
        return {
            "plan": self.plan,
            "table": self.table,
            "place": self.place,
            "folder": self.folder,
            "spark_partitions": self.spark_partitions,
        }

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    def __call__(self, batch_df, batch_id: int) -> None:
        self._check_client()
        ctx = self._context()
        try:
            self._fn(batch_df, batch_id)
        finally:
            self._publish(ctx.stats)

    # -- on the server ----------------------------------------------------------------------------------
    def _check_client(self) -> None:
        beat = Path(self.folder) / HEARTBEAT
        try:
            age = time.time() - beat.stat().st_mtime
        except OSError:
            if self._ctx is None:
                raise TidehouseError(
                    ErrorCode.CONFIG_INVALID,
                    f"the Spark Connect server does not see the run folder {self.folder} the client wrote",
                    location=Location(path="checkpoints.root"),
                    hint="with spark.remote, checkpoints.root must be a folder the client and the server "
                    "both see (the same host, or a shared mount)",
                ) from None
            age = float("inf")  # the run ended and its folder was removed
        if age > CLIENT_TIMEOUT_S:
            raise TidehouseError(
                ErrorCode.QUERY_FAILED,
                f"table {self.table}: the tidehouse client of this run stopped answering "
                f"({'gone' if age == float('inf') else f'{age:.0f} s without a heartbeat'}): the query stops",
                hint="the next `tidehouse flow trigger` resumes it from its checkpoint",
            )

    def _context(self) -> QueryContext:
        if self._ctx is None:
            from materializer.executors import EXECUTOR_FUNCTIONS

            t = self.plan.table(self.table)
            store = self.place.store()
            self._ctx = QueryContext(
                store,
                self.place.root,
                self.plan,
                t,
                TableStats(),
                pool=t.layer,
                history=self.place.history(),
                place=self.place,
                spark_partitions=self.spark_partitions,
            )
            self._fn = guarded(EXECUTOR_FUNCTIONS[t.strategy](self._ctx), self._ctx)
            self._instance = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        return self._ctx

    def _publish(self, stats: TableStats) -> None:
        with stats.lock:
            doc = stats.to_dict()
            failure = stats.failure
        doc.update(
            error_code=failure.code.value if failure else None,
            error_message=failure.message if failure else None,
            error_hint=failure.hint if failure else None,
        )
        path = Path(self.folder) / f"{self.table}.{self._instance}.json"
        tmp = path.with_suffix(".tmp")
        with contextlib.suppress(OSError):  # figures are a report: a full disk must not fail the batch
            tmp.write_text(json.dumps(doc, default=str), encoding="utf-8")
            os.replace(tmp, path)


class RemoteRun:
    """The client's side of a run over Spark Connect: the heartbeat, and the figures its queries publish."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        (folder / HEARTBEAT).touch()
        for other in folder.parent.iterdir():  # runs of clients that were killed: their queries have stopped
            if other != folder and _silent(other, 2 * CLIENT_TIMEOUT_S):
                shutil.rmtree(other, ignore_errors=True)
        self._seen: dict[str, dict] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="connect-heartbeat", daemon=True)
        self._beat.start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_EVERY_S):
            with contextlib.suppress(OSError):
                os.utime(self.folder / HEARTBEAT)

    def batch(self, plan: FlowPlan, table: str, place: Place, spark_partitions: int) -> RemoteBatch:
        return RemoteBatch(plan, table, place, str(self.folder), spark_partitions)

    def pull(self, stats: dict[str, TableStats]) -> None:
        """Add what each server-side instance did since the last pull to the tables' figures."""
        with self._lock:
            for path in sorted(self.folder.glob("*.json")):
                table = path.name.split(".", 2)
                name = f"{table[0]}.{table[1]}" if len(table) == 3 else None
                if name not in stats:
                    continue
                try:
                    new = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    continue  # replaced while read: the next pull sees it
                old = self._seen.get(path.name, {})
                _merge(stats[name], old, new)
                self._seen[path.name] = new

    def close(self, stats: dict[str, TableStats]) -> None:
        """The last pull; then the folder goes (a query left running on the server stops at its next one)."""
        self._stop.set()
        self._beat.join(timeout=HEARTBEAT_EVERY_S + 1)
        self.pull(stats)
        shutil.rmtree(self.folder, ignore_errors=True)


def _silent(folder: Path, seconds: float) -> bool:
    """Whether a run folder's heartbeat (or the folder, when it has none) is older than ``seconds``."""
    try:
        beat = folder / HEARTBEAT
        return time.time() - (beat if beat.exists() else folder).stat().st_mtime > seconds
    except OSError:
        return False


def _merge(stats: TableStats, old: dict, new: dict) -> None:
    with stats.lock:
        for key, value in new.items():
            if key in _LAST or key in _ERROR or not hasattr(stats, key):
                continue
            if isinstance(value, bool):
                continue
            if isinstance(value, (int, float)):
                setattr(stats, key, getattr(stats, key) + value - (old.get(key) or 0))
            elif isinstance(value, dict):
                mine, before = getattr(stats, key), old.get(key) or {}
                for k, v in value.items():
                    mine[k] = mine.get(k, 0) + v - before.get(k, 0)
        latest = new.get("last_batch_time")
        if latest is not None and (stats.last_batch_time is None or latest >= stats.last_batch_time):
            for key in _LAST:
                setattr(stats, key, new.get(key))
        if new.get("error") and new.get("error") != old.get("error"):
            stats.error = new["error"]
            if new.get("error_code"):
                stats.failure = TidehouseError(
                    ErrorCode(new["error_code"]),
                    new.get("error_message") or new["error"],
                    hint=new.get("error_hint"),
                )
