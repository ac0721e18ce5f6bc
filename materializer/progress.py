"""What Spark reports per micro-batch, gathered while a flow runs: rows dropped by watermarks, and where
each micro-batch's time went on Spark's side.

A streaming aggregation with a watermark (``windowed_count``, any ``... WATERMARK ts DELAY OF ...`` that the
``aggregate`` strategy keeps) drops rows whose event time is behind the watermark the previous micro-batch
left; Spark counts them in each query progress (``stateOperators[].numRowsDroppedByWatermark``). A
:class:`ProgressListener` receives every progress event (a ``StreamingQueryListener``: one event per
micro-batch, none missed between two status snapshots) and keeps the count per table (the query's name),
cumulative over the run. The status snapshot shows it as ``late_dropped``.

Spark counts rows at its state operator: for an aggregation, after the late rows of one group in one
micro-batch were combined, so several late rows of the same window and key in one micro-batch count once
(docs/concepts.md, Correctness).

The same events give Spark's share of each micro-batch's time (``durationMs``), summed per table over the run
(:meth:`ProgressListener.seconds`): ``plan`` (deciding the batch's offsets and planning it: ``latestOffset``,
``getBatch``, ``queryPlanning``), ``commit`` (writing the offset log and the commit log of the checkpoint:
``walCommit``, ``commitOffsets``) and ``total`` (the whole trigger, ``triggerExecution``). What runs inside
the ``foreachBatch`` function (read, sql, write) is measured there (:mod:`materializer.telemetry`).

Listeners belong to one session's query manager and only see the queries started in that session: the
runner calls :meth:`ProgressListener.watch` with the session of each query it starts.

On a classic session pyspark would hand each event to Python as objects built field by field over Py4J —
hundreds of JVM round trips per progress event, measured at ~29 % of a core of the driver's Python (and its
GIL, which the batch functions need) in a 4-layer flow at 500 ms triggers. :class:`_JsonEvents` is the Py4J
side of the listener instead: one call for the progress's JSON, none for the events it ignores. Over Spark
Connect events already arrive as JSON and go through pyspark's own listener.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import ClassVar

from py4j.protocol import Py4JError
from pyspark.sql.streaming import StreamingQueryListener

log = logging.getLogger(__name__)


# Spark's progress durations (ms) -> the phase they belong to
SPARK_PHASES = {
    "latestOffset": "plan",
    "getBatch": "plan",
    "queryPlanning": "plan",
    "walCommit": "commit",
    "commitOffsets": "commit",
    "triggerExecution": "total",
}


class _JsonEvents:
    """The Java side of a :class:`ProgressListener` on a classic session (Py4J implements Spark's
    ``PythonStreamingQueryListener`` with it): a progress event is read as its JSON, in one call."""

    def __init__(self, listener: ProgressListener) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent) -> None:
        pass

    def onQueryProgress(self, jevent) -> None:
        progress = json.loads(jevent.progress().json())
        dropped = sum(
            int(op.get("numRowsDroppedByWatermark") or 0) for op in progress.get("stateOperators") or []
        )
        self.listener.record(progress.get("name"), dropped, progress.get("durationMs") or {})

    def onQueryIdle(self, jevent) -> None:
        pass

    def onQueryTerminated(self, jevent) -> None:
        pass

    class Java:
        implements: ClassVar[list[str]] = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


class ProgressListener(StreamingQueryListener):
    """Per table (query name), summed over every micro-batch of this run: late rows dropped, micro-batches
    Spark ran, and Spark's seconds per phase."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._late: dict[str, int] = {}
        self._batches: dict[str, int] = {}
        self._seconds: dict[str, dict[str, float]] = {}
        self._sessions: list = []
        self._events = 0  # progress events received (over Spark Connect: to see the stream go quiet)

    def watch(self, session) -> None:
        """Receive the progress of the queries started in ``session``."""
        session.streams.addListener(self)
        self._sessions.append(session)

    def late_dropped(self, table: str) -> int:
        with self._lock:
            return self._late.get(table, 0)

    def batches(self, table: str) -> int:
        """Micro-batches Spark reported for the table's query (restarts included)."""
        with self._lock:
            return self._batches.get(table, 0)

    def seconds(self, table: str) -> dict[str, float]:
        """Spark's seconds per phase (``plan``, ``commit``, ``total``) over the table's micro-batches."""
        with self._lock:
            return {phase: round(value, 6) for phase, value in self._seconds.get(table, {}).items()}

    def close(self) -> None:
        """Wait until Spark has delivered every event queued so far, then stop listening."""
        if not self._sessions:
            return
        from runtime.spark.session import is_connect

        if is_connect(self._sessions[0]):
            self._settle()
        else:
            try:
                self._sessions[0].sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
            except Py4JError as exc:  # the JVM may be gone (the process is being killed)
                log.debug("waiting for streaming progress events: %s", exc)
        for session in self._sessions:
            try:
                session.streams.removeListener(self)
            except Exception as exc:  # noqa: BLE001 - py4j's or Spark Connect's: the session is going anyway
                log.debug("removing the progress listener: %s", exc)
        self._sessions.clear()

    def _settle(self, quiet: float = 0.5, at_most: float = 5.0) -> None:
        """Over Spark Connect events stream from the server with no queue to drain: wait until none arrived
        for ``quiet`` seconds (at most ``at_most``)."""
        import time

        deadline = time.monotonic() + at_most
        seen = -1
        while time.monotonic() < deadline:
            with self._lock:
                now = self._events
            if now == seen:
                return
            seen = now
            time.sleep(quiet)

    # -- StreamingQueryListener ------------------------------------------------------------------------
    @property
    def _jlistener(self):
        """What a classic session registers (pyspark's ``StreamingQueryManager.addListener``): the JSON
        reader of :class:`_JsonEvents` instead of pyspark's field-by-field conversion."""
        from pyspark import SparkContext

        if getattr(self, "_jlistenerobj", None) is None:
            self._jlistenerobj = SparkContext._jvm.PythonStreamingQueryListenerWrapper(_JsonEvents(self))
        return self._jlistenerobj

    def record(self, name: str | None, dropped: int, durations: dict) -> None:
        """One micro-batch's progress of query ``name``: rows dropped as late, Spark's durations (ms)."""
        if not name:
            return
        with self._lock:
            self._events += 1
            if dropped:
                self._late[name] = self._late.get(name, 0) + dropped
            self._batches[name] = self._batches.get(name, 0) + 1
            seconds = self._seconds.setdefault(name, {"plan": 0.0, "commit": 0.0, "total": 0.0})
            for key, phase in SPARK_PHASES.items():
                seconds[phase] += float(durations.get(key) or 0) / 1000.0

    def onQueryProgress(self, event) -> None:  # over Spark Connect (classic sessions: _JsonEvents)
        progress = event.progress
        dropped = sum(int(op.numRowsDroppedByWatermark or 0) for op in progress.stateOperators)
        self.record(progress.name, dropped, progress.durationMs or {})

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass
