"""Per-micro-batch telemetry of a table's query: where a batch's time goes, and log records naming the batch.

:class:`PhaseClock` adds up the seconds of each phase of the micro-batch running in the calling thread:

* ``read``  — reading the batch's input: Spark evaluating the source or the streaming aggregation
  (``toArrow``), the driver's read of a hot offset range, scans of lookup and recomputed inputs;
* ``sql``   — the action's SQL and the expectation checks;
* ``write`` — writes to the hot table and its quarantine table;
* ``wait``  — before the batch function: from the upstream commit of the oldest row the batch reads from a
  hot table to the function's start — the trigger interval, a previous batch of the query still running,
  the scheduler, and Spark deciding and planning the batch (its ``plan`` seconds and the offset log's write
  are inside it). Not measured for a batch that reads no hot rows (a file source).

A phase entered inside another pauses the outer one (a quarantine write during the expectation checks counts
as ``write``, not ``sql``). The batch functions of :mod:`materializer.strategies` mark their phases with
:func:`timed` and ``ctx.clock.phase(...)``; Spark's own phases of the same batch (planning it, the offset and
commit logs) come from its progress events (:mod:`materializer.progress`).

:func:`batch_scope` wraps one call of a batch function (the runner's ``_guarded``): it starts the clock,
then adds the phases to the table's :class:`~materializer.strategies.TableStats` (``phase_seconds``), and logs
the batch — at DEBUG when it succeeded, at ERROR when it raised — with ``flow``, ``table`` and ``batch_id``
as record attributes (``logging.format: json`` prints them as fields). A batch whose Java call its query's
stop interrupted or cancelled raises :class:`BatchInterrupted` instead, logged at INFO (:func:`stop_made`).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from runtime.core.logs import mark_reported
from runtime.spark.reasons import error_line

log = logging.getLogger("materializer.batch")

PHASES = ("read", "sql", "write")  # measured in the batch functions
WAIT = "wait"  # measured by batch_scope before the batch function starts


class PhaseClock:
    """Seconds per phase of the current micro-batch, per thread (a query's batches run one at a time, but a
    reconcile may run on another thread)."""

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self._local = threading.local()
        self._now = now

    def _state(self) -> tuple[dict[str, float], list[list]]:
        state = getattr(self._local, "state", None)
        if state is None:
            state = self._local.state = ({}, [])
        return state

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        totals, stack = self._state()
        now = self._now()
        if stack:  # pause the enclosing phase
            outer = stack[-1]
            totals[outer[0]] = totals.get(outer[0], 0.0) + now - outer[1]
        stack.append([name, now])
        try:
            yield
        finally:
            now = self._now()
            _, since = stack.pop()
            totals[name] = totals.get(name, 0.0) + now - since
            if stack:  # resume it
                stack[-1][1] = now

    def take(self) -> dict[str, float]:
        """The seconds per phase since the last ``take`` in this thread, and start again from zero."""
        totals, _ = self._state()
        out = dict(totals)
        totals.clear()
        return out


def timed(phase: str) -> Callable:
    """Count a batch helper whose first argument is the query's context as ``phase``."""

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(ctx, *args, **kwargs):
            clock = getattr(ctx, "clock", None)
            if clock is None:
                return fn(ctx, *args, **kwargs)
            with clock.phase(phase):
                return fn(ctx, *args, **kwargs)

        return run

    return wrap


def batch_fields(ctx, batch_id: int | None = None) -> dict[str, Any]:
    """The record attributes of a log line about a table's query (and one of its batches)."""
    fields: dict[str, Any] = {"flow": ctx.flow.flow, "table": ctx.table.name}
    if batch_id is not None:
        fields["batch_id"] = int(batch_id)
    return fields


class BatchInterrupted(Exception):
    """A micro-batch whose Java call was interrupted or cancelled, as its query's stop does: not committed, it
    runs again when the query next starts."""


# Spark's own test of whether a batch function's error is its query's stop (StreamExecution.PROXY_ERROR) is a
# regex over the whole Python traceback that recurses once per character. On an interrupted call's Py4J error
# (8 KB: the Java stack) it overflows the stream thread's stack: the query then dies of a StackOverflowError
# with ~1,000 lines of stack on stderr instead of stopping (Spark 4.3, measured). So such an error is raised
# again as its first lines only, which the regex still reads as the stop.
_STOP_MARKS = (
    "java.lang.InterruptedException",
    "java.io.InterruptedIOException",
    "java.nio.channels.ClosedByInterruptException",
    " cancelled ",  # a job of the query's job group, cancelled by the stop
)


def stop_made(exc: BaseException) -> BatchInterrupted | None:
    """``exc`` as a short :class:`BatchInterrupted` when it is a Py4J call that an interrupt or a cancelled
    job ended; else None (the error stays as it is: its text may carry a Python worker's error)."""
    from py4j.protocol import Py4JJavaError

    if not isinstance(exc, Py4JJavaError):
        return None
    text = str(exc)
    head = text.split("\n\tat ", 1)[0]  # the call and the Java exception's line, without its stack
    if any(mark in head for mark in _STOP_MARKS):
        return BatchInterrupted(f"py4j.protocol.Py4JJavaError: {head[:2000]}")
    lines = (line.strip() for line in text.splitlines())
    cause = next((line for line in lines if any(mark in line for mark in _STOP_MARKS)), None)
    if cause is None:
        return None
    return BatchInterrupted(f"py4j.protocol.Py4JJavaError: {head[:2000]}\n{cause[:500]}")  # "Caused by: ..."


@contextmanager
def batch_scope(ctx, batch_id: int) -> Iterator[None]:
    """One call of a table's batch function: its phases go into the table's stats, and it is logged."""
    stats = ctx.stats
    ctx.clock.take()  # whatever an interrupted call left behind is not this batch's
    waited = _waited(ctx, batch_id)
    with stats.lock:
        before = (stats.rows_in, stats.rows_out, stats.quarantined)
    began = time.perf_counter()
    failed: BaseException | None = None
    try:
        yield
    except BaseException as exc:
        failed = stop_made(exc)
        if failed is not None:
            raise failed from None  # short: see _STOP_MARKS
        failed = exc
        raise
    finally:
        seconds = time.perf_counter() - began
        phases = ctx.clock.take()
        if waited is not None:
            phases[WAIT] = waited
        with stats.lock:
            for name, value in phases.items():
                stats.phase_seconds[name] = stats.phase_seconds.get(name, 0.0) + value
            stats.last_batch_id = int(batch_id)
            rows_in, rows_out, quarantined = (
                stats.rows_in - before[0],
                stats.rows_out - before[1],
                stats.quarantined - before[2],
            )
        fields = batch_fields(ctx, batch_id)
        if isinstance(failed, BatchInterrupted):
            log.info(
                "batch %d of %s interrupted after %.3fs, as a stop does: not committed, it runs again "
                "when the query next starts",
                batch_id,
                ctx.table.name,
                seconds,
                extra=fields,
            )
        elif failed is not None:
            log.error(
                "batch %d of %s failed after %.3fs: %s",
                batch_id,
                ctx.table.name,
                seconds,
                error_line(failed),
                extra=fields,
            )
            mark_reported(failed)
        elif log.isEnabledFor(logging.DEBUG):
            fields.update(
                rows_in=rows_in,
                rows_out=rows_out,
                quarantined=quarantined,
                seconds=round(seconds, 6),
                **{f"{name}_s": round(phases.get(name, 0.0), 6) for name in (*PHASES, WAIT)},
            )
            log.debug(
                "batch %d of %s: %d rows in, %d out, %d quarantined in %.3fs (read %.3fs, sql %.3fs, "
                "write %.3fs)",
                batch_id,
                ctx.table.name,
                rows_in,
                rows_out,
                quarantined,
                seconds,
                phases.get("read", 0.0),
                phases.get("sql", 0.0),
                phases.get("write", 0.0),
                extra=fields,
            )


def _waited(ctx, batch_id: int) -> float | None:
    """Seconds from the upstream commit of the oldest hot row the batch reads to now; None when it reads
    none (a file source, or a batch with no offset-log entry)."""
    from runtime.spark.writer import input_times

    checkpoint = getattr(ctx.table, "checkpoint", None)
    if not checkpoint:
        return None
    _, committed = input_times(ctx.store, checkpoint, int(batch_id))
    return None if committed is None else max(0.0, time.time() - committed)
