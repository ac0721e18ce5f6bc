"""Status of a flow: what ``home/run/<flow>.status.json`` holds and ``tidehouse flow status`` prints.

Per table: query state, last batch time, rows/s, hot end offsets, quarantined rows, rows dropped as later
than a watermark during the run (``late_dropped``, from :mod:`materializer.progress`), hot delay, and the
tiering figures of :func:`runtime.lake.tiering.lake_status` (tiered offsets, lake snapshot, lake delay).

Hot delay of a table = ``commit_ts - origin_ts`` of its newest committed batch: the time from the first
layer's commit of the oldest source data in that batch to its visibility in this table. ``idle_s`` is how
long ago that batch was committed.

Where the run's time went: ``batch_seconds`` per phase, summed over the run — ``read``, ``sql`` and
``write`` measured in the batch functions (:mod:`materializer.telemetry`), ``plan``, ``commit`` and ``total``
from Spark's progress events (:mod:`materializer.progress`; ``spark_batches`` counts them), and ``wait``: per
batch, from the upstream commit of the oldest hot row it reads to the start of its function (Spark's
``plan`` is inside it). ``tiering`` holds
each tiered table's cycles, commits, failures and cycle seconds.

Freshness: a table with a target (``freshness:`` in the flow) is ``fresh`` while neither its hot delay nor its
lake delay exceeds it; ``freshness_missed`` names the delays that do.
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from materializer.lock import RunLock

RATE_WINDOW_S = 10.0
LAKE_REREAD_S = 10.0  # a running flow's status re-reads a lake table at least this often


class RateMeter:
    """Rows per second committed to each hot table over the last :data:`RATE_WINDOW_S` seconds.

    Measured from the growth of the table's hot log (its end offsets: rows of a log table, changelog rows of a
    primary-key table), so it is the same figure for every strategy — Spark's own ``processedRowsPerSecond``
    counts only rows Spark read itself, which is 0 for queries that read their batch in the driver.
    """

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: dict[str, deque[tuple[float, int]]] = {}

    def rate(self, table: str, total: int, now: float) -> float | None:
        """Record ``total`` rows at ``now``; the rate since the oldest sample of the window (None: the
        first)."""
        samples = self._samples.setdefault(table, deque())
        samples.append((now, total))
        while len(samples) > 2 and now - samples[1][0] >= self.window_s:
            samples.popleft()
        then, before = samples[0]
        if now <= then:
            return None
        return round(max(0, total - before) / (now - then), 1)


class LakeSnapshots:
    """A running flow's last read of each table's lake snapshot, for its status snapshots every couple of
    seconds: re-read when the flow's own tiering committed the table since (its commit count moved), and at
    least every :data:`LAKE_REREAD_S` seconds, for a commit by another process (``tidehouse tier run`` or
    ``tier schedule``). Meanwhile the lake delay still grows with the clock from the offsets last read. A read
    is a catalog call and a metadata file; reading every table every 2 s cost the driver ~40 ms a snapshot on
    the vs_sdp flow's four tables (py-spy)."""

    def __init__(self, reread_s: float = LAKE_REREAD_S) -> None:
        self.reread_s = reread_s
        self._read: dict[str, tuple[int | None, float, Any]] = {}  # table -> (commits, read at, snapshot)

    def get(self, lake, table: str, buckets: int, commits: int | None, now: float):
        from runtime.lake.tiering import lake_snapshot

        seen = self._read.get(table)
        if seen is not None and seen[0] == commits and now - seen[1] < self.reread_s:
            return seen[2]
        snapshot = lake_snapshot(lake, table, buckets)
        self._read[table] = (commits, now, snapshot)
        return snapshot


@dataclass
class StatusMemory:
    """What a running flow's status snapshots carry from one to the next."""

    rates: RateMeter = field(default_factory=RateMeter)
    lake: LakeSnapshots = field(default_factory=LakeSnapshots)


def hot_figures(store, table: str) -> dict[str, Any]:
    if not store.has_table(table):
        return {"hot_end_offsets": None, "hot_rows": 0, "hot_delay_s": None, "last_commit_at": None}
    meta = store.get_table(table)
    ends = store.end_offsets(table)
    newest = None
    for bucket in range(meta.buckets):
        info = store.batch_info(table, bucket)
        if info is not None and (newest is None or info.commit_ts > newest.commit_ts):
            newest = info
    delay = None
    if newest is not None:
        origin = newest.origin_ts if newest.origin_ts is not None else newest.commit_ts
        delay = round(max(0.0, newest.commit_ts - origin), 3)
    return {
        "hot_end_offsets": ends,
        "hot_rows": sum(ends),  # log entries (a primary-key table: changelog rows)
        "hot_delay_s": delay,
        "last_commit_at": newest.commit_ts if newest else None,
        "idle_s": round(time.time() - newest.commit_ts, 3) if newest else None,
    }


def caught_up(row: dict[str, Any]) -> None:
    """A table whose newest batch read new input and wrote nothing (a filter kept no row, an aggregate or a
    top-N came out the same) is as fresh as that batch: its hot delay is that batch's end minus the origin of
    the input it read, not the delay of its last commit, however old (a freshness target would be missed
    while the table is current)."""
    at, origin = row.get("last_batch_time"), row.get("last_batch_origin")
    if row.get("last_batch_rows_written") != 0 or at is None or origin is None:
        return
    if at > (row.get("last_commit_at") or 0.0):
        row["hot_delay_s"] = round(max(0.0, at - origin), 3)


def input_offsets(checkpoint: str | None) -> dict[str, list[int]] | None:
    """Per hot table a query streams, the end offsets (per bucket) its newest committed micro-batch read up
    to, from the checkpoint's commit and offset logs; None when the checkpoint does not say (not a local
    folder, no committed micro-batch yet, an entry that cannot be read): the table's hot delay is then its
    last commit's."""
    from runtime.core.errors import TidehouseError
    from runtime.core.uris import local_path
    from runtime.spark.writer import read_offset_log

    try:
        commits = local_path(checkpoint) / "commits" if checkpoint else None
        done = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits else []
        entries = read_offset_log(checkpoint, max(done)) if done else None
    except (ValueError, OSError, TidehouseError):
        return None
    if not entries:
        return None
    return {e["table"]: [int(e["offsets"].get(str(b), 0)) for b in range(len(e["offsets"]))] for e in entries}


def downstream_caught_up(rows: list[dict[str, Any]]) -> None:
    """A table whose streamed inputs hold no row it has not read (``input_offsets`` reach each input's
    ``hot_end_offsets``) while one of them ran a micro-batch after the table's last commit and last batch is
    as fresh as its stalest input: that batch wrote nothing for it (a filter kept no row upstream), so it got
    no micro-batch and its last commit's delay, however old, is not its freshness. ``rows`` in plan order
    (inputs first)."""
    by_name = {row["table"]: row for row in rows}
    current_at: dict[str, float] = {}  # per table: the newest time it was known to hold all its input
    for row in rows:
        at = max(row.get("last_commit_at") or 0.0, row.get("last_batch_time") or 0.0)
        read = row.get("input_offsets") or {}
        inputs = [by_name[name] for name in read if name in by_name]
        known = len(inputs) == len(read) and all(i.get("hot_delay_s") is not None for i in inputs)
        if read and known and all(_reached(read[i["table"]], i.get("hot_end_offsets")) for i in inputs):
            newest = max(current_at.get(i["table"], 0.0) for i in inputs)
            if newest > at:
                row["hot_delay_s"] = max(i["hot_delay_s"] for i in inputs)
                at = newest
        current_at[row["table"]] = at


def _reached(read: list[int], ends: list[int] | None) -> bool:
    return ends is not None and all(b < len(read) and read[b] >= end for b, end in enumerate(ends))


def lake_figures(store, lake, table: str, read_snapshot=None) -> dict[str, Any]:
    """``read_snapshot``: gives the lake table's :class:`~runtime.lake.tiering.LakeSnapshot` (a running flow's
    :class:`LakeSnapshots`); None: read it from the catalog here."""
    from runtime.lake.tiering import lake_status

    try:
        status = lake_status(store, lake, table, snapshot=read_snapshot() if read_snapshot else None)
    except Exception as exc:  # noqa: BLE001 - the lake being unreachable must not hide the hot figures
        return {"lake_error": str(exc).splitlines()[0]}
    return {
        "tiered_offsets": status.get("lake_offsets"),
        "lake_snapshot_id": status.get("last_snapshot_id"),
        "lake_snapshot_at": status.get("last_snapshot_at"),
        "lake_pending_rows": status.get("pending_rows"),
        "lake_delay_s": status.get("lake_delay_s"),
        "max_lake_delay_s": status.get("max_lake_delay_s"),
    }


def freshness(row: dict[str, Any], target: float | None) -> dict[str, Any]:
    """The freshness verdict of a status row (its ``hot_delay_s`` and ``lake_delay_s``) against ``target``."""
    if target is None:
        return {"freshness_s": None, "fresh": None, "freshness_missed": []}
    missed = [kind for kind in ("hot", "lake") if (row.get(f"{kind}_delay_s") or 0.0) > target]
    return {"freshness_s": target, "fresh": not missed, "freshness_missed": missed}


def batch_seconds(stats, spark_seconds: dict[str, float]) -> dict[str, float]:
    """Seconds per phase over the run: Spark's (plan, commit, total), the batch functions' (read, sql,
    write), and the batches' wait for their trigger (materializer.telemetry: it contains plan)."""
    with stats.lock:
        ours = dict(stats.phase_seconds)
    return {
        "plan": spark_seconds.get("plan", 0.0),
        "read": round(ours.get("read", 0.0), 6),
        "sql": round(ours.get("sql", 0.0), 6),
        "write": round(ours.get("write", 0.0), 6),
        "commit": spark_seconds.get("commit", 0.0),
        "total": spark_seconds.get("total", 0.0),
        "wait": round(ours.get("wait", 0.0), 6),
    }


def tiering_figures(service) -> dict[str, dict[str, Any]]:
    """Per tiered table (quarantine tables too): the tiering service's cycles, commits, failures, seconds."""
    if service is None:
        return {}
    keys = ("interval", "runs", "commits", "errors", "seconds", "last_seconds", "last_error")
    return {name: {key: figures.get(key) for key in keys} for name, figures in service.summary().items()}


def table_figures(store, lake, table: str, quarantine: str | None, read_snapshot=None) -> dict[str, Any]:
    row = {"table": table, **hot_figures(store, table)}
    if not store.has_table(table):  # never made: nothing was counted (0 would read as "none quarantined")
        row["quarantined"] = None
    else:
        row["quarantined"] = (
            sum(store.end_offsets(quarantine)) if quarantine and store.has_table(quarantine) else 0
        )
    if lake is not None and store.has_table(table):
        row.update(lake_figures(store, lake, table, read_snapshot))
    return row


def _commits(service, table: str) -> int | None:
    """How many times the flow's tiering service committed ``table`` (None: it has no such table)."""
    stats = getattr(service, "stats", {}).get(table) if service is not None else None
    return None if stats is None else stats.commits


def _lake_snapshot(runner, lake, table: str, now: float):
    buckets = runner.store.get_table(table).buckets
    return runner.status_memory.lake.get(lake, table, buckets, _commits(runner.tiering, table), now)


def run_snapshot(runner) -> dict[str, Any]:
    """The live snapshot of a running :class:`~materializer.runner.FlowRunner`."""
    now = time.time()
    lake, lake_error = open_lake(runner.project)
    tables = []
    for t in runner.plan.tables:
        query = runner.queries.get(t.name)
        stats = runner.stats[t.name]
        state = "not started"
        if query is not None and getattr(runner, "server_lost", False):
            state = "unknown"  # its Spark Connect server is gone: asking would wait out the retries
        elif query is not None:
            try:
                state = "active" if query.isActive else ("failed" if query.exception() else "stopped")
            except Exception:  # noqa: BLE001 - the JVM may be shutting down: say so, do not guess
                state = "unknown"
        row = table_figures(
            runner.store, lake, t.name, t.quarantine, partial(_lake_snapshot, runner, lake, t.name, now)
        )
        if lake_error:
            row["lake_error"] = lake_error
        row.update(
            {
                "layer": t.layer,
                "strategy": t.strategy,
                "state": state,
                "rows_per_s": runner.status_memory.rates.rate(t.name, row["hot_rows"], now),
                "batches": stats.batches,
                "rows_in": stats.rows_in,
                "rows_written": stats.rows_out,
                "last_batch_id": stats.last_batch_id,
                "last_batch_time": stats.last_batch_time,
                "last_batch_seconds": stats.last_batch_seconds,
                "last_batch_origin": stats.last_origin_ts,
                "last_batch_rows_written": stats.last_rows_out,
                "spark_batches": runner.progress.batches(t.name),
                "batch_seconds": batch_seconds(stats, runner.progress.seconds(t.name)),
                "dropped": stats.dropped,
                "source_batches": dict(stats.source_batches),
                "expectations": dict(stats.expectations),
                "error": stats.error,
                "late_dropped": runner.progress.late_dropped(t.name),
                "input_offsets": input_offsets(t.checkpoint),
            }
        )
        caught_up(row)
        tables.append(row)
    downstream_caught_up(tables)
    for t, row in zip(runner.plan.tables, tables):
        row.update(freshness(row, t.freshness))
    return {
        "flow": runner.plan.flow,
        "version": runner.plan.version,
        "state": runner.state,
        "spark": runner.spark_target,
        "data_path": runner.data_path,
        "pid": _pid(),
        "started_at": runner.started,
        "updated_at": now,
        "tables": tables,
        "tiering": tiering_figures(runner.tiering),
    }


def open_lake(project) -> tuple[Any, str | None]:
    """(the project's lake, None), or (None, the reason) when its catalog cannot be opened: the hot figures
    are still shown, and every table row says why its lake figures are missing."""
    from runtime.core.errors import TidehouseError

    try:
        return project.lake, None
    except TidehouseError as exc:
        return None, exc.render()


def _pid() -> int:
    import os

    return os.getpid()


def flow_status(project, name: str) -> dict[str, Any]:
    """Status of a flow, running or not: the last snapshot's query figures + live hot and lake figures, for
    the version that ran last (``latest_version`` names a newer one registered since, which has not run)."""
    latest = project.registry.get_flow(name)
    path = Path(project.config.run_dir) / f"{name}.status.json"
    snap: dict[str, Any] = {}
    if path.is_file():
        try:
            snap = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:  # replaced atomically, so this is damage: say so
            snap = {"snapshot_error": f"cannot read {path}: {exc}"}
    ran = snap.get("version")
    version = (
        project.registry.get_flow(name, ran) if isinstance(ran, int) and ran < latest.version else latest
    )
    running = RunLock(project.config.run_dir, name).taken_elsewhere()
    last = {row["table"]: row for row in snap.get("tables", [])}
    store = project.store
    lake, lake_error = open_lake(project)
    tables = []
    for table, _tspec in version.spec.tables():
        quarantine = last.get(table, {}).get("quarantine") or _quarantine_of(store, table)
        row = {"table": table, "layer": table.split(".", 1)[0]}
        prev = last.get(table, {})
        for key in (
            "strategy",
            "rows_per_s",
            "batches",
            "rows_in",
            "rows_written",
            "last_batch_id",
            "last_batch_time",
            "last_batch_seconds",
            "last_batch_origin",
            "last_batch_rows_written",
            "spark_batches",
            "batch_seconds",
            "dropped",
            "source_batches",
            "expectations",
            "error",
            "late_dropped",
            "input_offsets",
        ):
            row[key] = prev.get(key)
        row["state"] = (
            prev.get("state", "never run")
            if running
            else ("failed" if prev.get("state") == "failed" else ("stopped" if prev else "never run"))
        )
        row["rows_per_s"] = row["rows_per_s"] if running else None  # a rate only while the flow runs
        row.update(table_figures(store, lake, table, quarantine))
        if lake_error:
            row["lake_error"] = lake_error
        caught_up(row)
        tables.append(row)
    downstream_caught_up(tables)
    for row in tables:
        row.update(freshness(row, version.spec.freshness_of(row["table"])))
    out = {
        "flow": name,
        "version": version.version,
        **({"latest_version": latest.version} if latest.version != version.version else {}),
        "running": running,
        "state": snap.get("state") if running else ("stopped" if snap else "never run"),
        "updated_at": snap.get("updated_at"),
        "tables": tables,
        "tiering": snap.get("tiering", {}),
    }
    if "snapshot_error" in snap:
        out["snapshot_error"] = snap["snapshot_error"]
    return out


def _quarantine_of(store, table: str) -> str | None:
    from materializer.plan import quarantine_name

    name = quarantine_name(table)
    return name if store.has_table(name) else None
