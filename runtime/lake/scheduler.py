"""The tiering service: one APScheduler interval job per table, in parallel across tables.

Scheduling choices (APScheduler 3's defaults would silently drop runs):

* ``misfire_grace_time=None``: a run that starts late (a busy thread pool, a long GC pause) still runs,
  however late; the default (1 s) drops it with only a log line.
* ``coalesce=True``: if several runs of a table are overdue, ONE run is made. No data is skipped by this:
  a cycle always tiers everything up to the hot end offsets, so one run covers all the missed ones.
* No overlap, no skip: APScheduler skips a run whose previous instance is still running
  (``max_instances``). Jobs here allow 2 instances, and a per-table lock serialises them: a run that fires
  while the previous one is still going waits for it and then runs at once, instead of being dropped until
  the next interval (which would double the lake delay). The cross-process file lock in
  :func:`~runtime.lake.tiering.tier_table` fences other processes.
* Errors of one table's cycle are logged and counted in :attr:`TieringService.stats`; they never stop the
  other tables or the service.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED
from apscheduler.executors.pool import ThreadPoolExecutor as APThreadPool
from apscheduler.schedulers.background import BackgroundScheduler

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.lake.tiering import CycleResult, LakeFiles, tier_table

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TierReport:
    """What one cycle of every table did (``tidehouse tier run``): each table's result, or its error."""

    results: dict[str, CycleResult]
    errors: dict[str, str]

    def raise_for_errors(self) -> None:
        if self.errors:
            raise TidehouseError(
                ErrorCode.TIERING_FAILED,
                "tiering failed for " + "; ".join(f"{name}: {error}" for name, error in self.errors.items()),
                hint="run with --debug for the trace; the next cycle starts from the lake's offsets",
            )


@dataclass
class TableStats:
    interval: float
    runs: int = 0
    commits: int = 0
    errors: int = 0
    dropped: int = 0  # fires APScheduler dropped: only while one run is active AND one is queued (no loss)
    seconds: float = 0.0  # spent in this table's cycles, failed ones included
    last_seconds: float | None = None  # of the last cycle, failed or not
    last: CycleResult | None = None
    last_error: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class TieringService:
    """Per-table tiering jobs on their intervals. ``start()``, ``stop()``, ``run_all_now()``.

    ``source`` is a :class:`runtime.project.Project` (its ``store`` and ``lake`` are used) or a
    ``(store, lake)`` pair. ``tables`` maps ``"layer.name"`` to its interval in seconds.
    ``on_cycle(result)`` / ``on_error(table, exc)`` are called after each cycle (progress lines).
    ``files``: who writes log tables' data files (``runtime.spark.tiering`` on the executor data path).
    """

    def __init__(
        self,
        source: Any,
        tables: Mapping[str, float],
        *,
        max_workers: int | None = None,
        on_cycle: Callable[[CycleResult], None] | None = None,
        on_error: Callable[[str, BaseException], None] | None = None,
        files: LakeFiles | None = None,
    ) -> None:
        self.files = files
        if isinstance(source, tuple):
            self.store, self.lake = source
        else:
            self.store, self.lake = source.store, source.lake
        self.stats: dict[str, TableStats] = {name: TableStats(float(iv)) for name, iv in tables.items()}
        self._on_cycle = on_cycle
        self._on_error = on_error
        # threads start as cycles need them: 8 at most, whatever the tables now (more may be added)
        self._workers = max_workers or 8
        self._scheduler: BackgroundScheduler | None = None
        self._soon: ThreadPoolExecutor | None = None  # run_soon's cycles
        self._pending: set[str] = set()  # tables whose run_soon cycle has not started yet
        self._pending_lock = threading.Lock()

    # -- one cycle ---------------------------------------------------------------------------------
    def run_table(self, name: str) -> CycleResult | None:
        """One cycle of one table now (waits for a running cycle of the same table to finish first)."""
        stats = self.stats[name]
        with stats.lock:
            stats.runs += 1
            began = time.perf_counter()
            try:
                result = tier_table(self.store, self.lake, name, files=self.files)
            except Exception as exc:  # one table's failure never stops the others
                self._took(stats, began)
                stats.errors += 1
                stats.last_error = (
                    exc.render() if isinstance(exc, TidehouseError) else f"{type(exc).__name__}: {exc}"
                )
                log.error(
                    "tiering %s failed: %s",
                    name,
                    stats.last_error,
                    exc_info=not isinstance(exc, TidehouseError),
                    extra={"table": name},
                )
                if self._on_error:
                    self._on_error(name, exc)
                return None
            self._took(stats, began)
            stats.last = result
            stats.last_error = None
            stats.commits += int(result.committed)
        if self._on_cycle:
            self._on_cycle(result)
        return result

    @staticmethod
    def _took(stats: TableStats, began: float) -> None:
        stats.last_seconds = time.perf_counter() - began
        stats.seconds += stats.last_seconds

    def run_all_now(self) -> TierReport:
        """One cycle of every table now, in parallel (``tier run``, ``--until-idle``'s final cycle)."""
        with ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="tier-now") as pool:
            futures = {name: pool.submit(self.run_table, name) for name in self.stats}
            done = {name: f.result() for name, f in futures.items()}
        return TierReport(
            {n: r for n, r in done.items() if r is not None},
            {n: self.stats[n].last_error or "failed" for n, r in done.items() if r is None},
        )

    def run_soon(self, names: Iterable[str]) -> None:
        """Start one cycle of each of ``names`` in the background, unless one of that table's is queued and
        has not started yet (``--until-idle`` tiers a generation as soon as it is drained, while the next
        generations run; its final :meth:`run_all_now` waits for them, table by table, through their
        locks). Errors are logged and counted as for any cycle."""
        if self._soon is None:
            self._soon = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="tier-soon")
        for name in names:
            with self._pending_lock:
                if name in self._pending:
                    continue
                self._pending.add(name)
            self._soon.submit(self._run_pending, name)

    def _run_pending(self, name: str) -> None:
        # from here a new request queues another cycle: this one may have read the hot end offsets before the
        # rows that request wants in the lake were written
        with self._pending_lock:
            self._pending.discard(name)
        self.run_table(name)

    # -- the schedule ------------------------------------------------------------------------------
    def start(self) -> None:
        if self._scheduler is not None:
            return
        scheduler = BackgroundScheduler(
            executors={"default": APThreadPool(max_workers=self._workers)},
            job_defaults={"coalesce": True, "misfire_grace_time": None, "max_instances": 2},
            timezone=timezone.utc,
        )
        scheduler.add_listener(self._dropped, EVENT_JOB_MAX_INSTANCES | EVENT_JOB_MISSED)
        for name in self.stats:
            self._schedule(scheduler, name)
        scheduler.start()
        self._scheduler = scheduler

    def _schedule(self, scheduler: BackgroundScheduler, name: str) -> None:
        scheduler.add_job(
            self.run_table,
            "interval",
            args=[name],
            id=name,
            name=f"tier {name}",
            seconds=self.stats[name].interval,
            next_run_time=datetime.now(timezone.utc),
        )

    def follow_tables(self, tables: Mapping[str, float]) -> tuple[list[str], dict[str, float]]:
        """Follow ``tables`` (name -> interval), as ``tier schedule`` does while it runs: tier also the ones
        this service does not tier yet, from now (a table made after it started), and tier each one whose
        interval changed at its new interval from now (its flow registered again with another one). Returns
        the names added and ``{name: previous interval}`` of those changed; a table missing from ``tables``
        is left as it is."""
        added = [name for name in tables if name not in self.stats]
        changed = {
            name: self.stats[name].interval
            for name in tables
            if name in self.stats and float(tables[name]) != self.stats[name].interval
        }
        for name in added:
            self.stats[name] = TableStats(float(tables[name]))
            if self._scheduler is not None:
                self._schedule(self._scheduler, name)
        for name in changed:
            self.stats[name].interval = float(tables[name])
            if self._scheduler is not None:
                self._scheduler.reschedule_job(name, trigger="interval", seconds=self.stats[name].interval)
        return added, changed

    def _dropped(self, event) -> None:
        stats = self.stats.get(event.job_id)
        if stats is not None:
            stats.dropped += 1
            log.warning("tiering run of %s was dropped by the scheduler (%s)", event.job_id, event.code)

    def stop(self, *, wait: bool = True) -> None:
        """Stop scheduling; with ``wait`` let running cycles finish (they are safe to interrupt anyway)."""
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=wait)
            self._scheduler = None
        if self._soon is not None:
            self._soon.shutdown(wait=wait, cancel_futures=True)
            self._soon = None

    @property
    def running(self) -> bool:
        return self._scheduler is not None

    def __enter__(self) -> TieringService:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def summary(self) -> dict[str, dict[str, Any]]:
        return {
            name: {
                "interval": s.interval,
                "runs": s.runs,
                "commits": s.commits,
                "errors": s.errors,
                "dropped": s.dropped,
                "seconds": round(s.seconds, 6),
                "last_seconds": None if s.last_seconds is None else round(s.last_seconds, 6),
                "last_error": s.last_error,
                "last": s.last.to_dict() if s.last else None,
            }
            for name, s in list(self.stats.items())  # follow_tables may add one (metrics thread)
        }


def wait_until(predicate: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    """Poll ``predicate`` until true or ``timeout`` seconds passed (used by tests and ``--until-idle``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()
