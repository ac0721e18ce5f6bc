"""Prometheus metrics of a running flow (``flow trigger``) or tiering service (``tier schedule``).

Opt-in: with the setting ``metrics.port``, the process serves ``/metrics`` in the Prometheus text format on
``metrics.host`` (default 127.0.0.1: loopback only) for as long as the flow or the service runs
(:class:`MetricsEndpoint`, started and stopped by :meth:`runtime.project.Project.trigger` and ``tier
schedule``).

A flow's figures are those of its status snapshot (:func:`materializer.status.run_snapshot`, refreshed every
couple of seconds) — the very figures ``tidehouse flow status --json`` shows, so a dashboard and ``flow
status`` never disagree; Spark's side of them comes from the run's ``StreamingQueryListener``
(:mod:`materializer.progress`), not from polling ``lastProgress``. ``tier schedule`` serves its service's
tiering figures, live. :data:`TABLE_METRICS`, :data:`TIERING_METRICS` and :data:`FLOW_METRICS` list every
metric with its help text (``docs/operations.md`` is generated from them).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from runtime.core.errors import ErrorCode, Location, TidehouseError

log = logging.getLogger(__name__)

PREFIX = "tidehouse_"
PHASES = ("plan", "read", "sql", "write", "commit", "total")


@dataclass(frozen=True)
class Metric:
    """One metric family: ``value`` reads its figure from a status row (None: no sample)."""

    name: str  # without the prefix and, for counters, without _total
    kind: Literal["counter", "gauge"]
    help: str
    value: Callable[[dict[str, Any]], Any]
    labels: tuple[str, ...] = ()  # beyond the family's own (flow, table, layer)

    @property
    def full_name(self) -> str:
        return PREFIX + self.name + ("_total" if self.kind == "counter" else "")


def _key(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda row: row.get(name)


def _flag(test: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    return lambda row: None if test(row) is None else int(bool(test(row)))


TABLE_METRICS: tuple[Metric, ...] = (
    Metric(
        "table_rows_in",
        "counter",
        "Rows the table's query read from its input in this run (a recomputed "
        "table re-reads its inputs' state: 0).",
        _key("rows_in"),
    ),
    Metric(
        "table_rows_out",
        "counter",
        "Rows the table's query wrote to the hot table in this run.",
        _key("rows_written"),
    ),
    Metric("table_batches", "counter", "Micro-batches that wrote to the table in this run.", _key("batches")),
    Metric(
        "table_spark_batches",
        "counter",
        "Micro-batches Spark ran for the table's query in this run (from its progress events).",
        _key("spark_batches"),
    ),
    Metric(
        "table_batch_seconds",
        "counter",
        "Seconds of the table's micro-batches in this run, by phase: plan, "
        "commit and total from Spark's progress; read, sql and write measured in the batch function; wait "
        "from the upstream commit of a batch's oldest hot row to the batch function's start.",
        lambda row: row.get("batch_seconds") or {},
        labels=("phase",),
    ),
    Metric(
        "table_hot_delay_seconds",
        "gauge",
        "Hot delay: seconds from the first layer's commit of the oldest source data in the newest batch to "
        "its commit in this table (a newest batch that wrote nothing: to its end; a table that has read all "
        "its inputs hold, below such a batch: its stalest input's).",
        _key("hot_delay_s"),
    ),
    Metric(
        "table_lake_delay_seconds",
        "gauge",
        "Lake delay: how far the table's lake copy is behind its hot copy, in seconds.",
        _key("lake_delay_s"),
    ),
    Metric(
        "table_lake_pending_rows",
        "gauge",
        "Hot log rows not tiered to the lake yet.",
        _key("lake_pending_rows"),
    ),
    Metric(
        "table_hot_rows",
        "gauge",
        "Rows in the table's hot log (a primary-key table: changelog rows).",
        _key("hot_rows"),
    ),
    Metric(
        "table_rows_per_second",
        "gauge",
        "Rows per second committed to the hot table over the last 10 s.",
        _key("rows_per_s"),
    ),
    Metric("table_quarantined_rows", "gauge", "Rows in the table's quarantine table.", _key("quarantined")),
    Metric(
        "table_expectation_dropped", "counter", "Rows dropped by expectations in this run.", _key("dropped")
    ),
    Metric(
        "table_source_batches",
        "counter",
        "Micro-batches of a file source read in this run, by reader: arrow (the driver path's JSON Lines "
        "reader) or spark.",
        lambda row: row.get("source_batches") or {},
        labels=("reader",),
    ),
    Metric(
        "table_late_dropped", "counter", "Rows a watermark dropped as late in this run.", _key("late_dropped")
    ),
    Metric(
        "table_active",
        "gauge",
        "1 while the table's streaming query is active.",
        lambda row: int(row.get("state") == "active"),
    ),
    Metric(
        "table_failed",
        "gauge",
        "1 when the table's query failed (flow status shows the error).",
        lambda row: int(bool(row.get("error"))),
    ),
    Metric(
        "table_freshness_target_seconds",
        "gauge",
        "The table's freshness target (flow key freshness:).",
        _key("freshness_s"),
    ),
    Metric(
        "table_fresh",
        "gauge",
        "1 while neither the hot nor the lake delay exceeds the freshness target, "
        "0 when one does (tables with a target only).",
        _flag(_key("fresh")),
    ),
)

TIERING_METRICS: tuple[Metric, ...] = (
    Metric("tiering_cycles", "counter", "Tiering cycles run for the table by this process.", _key("runs")),
    Metric("tiering_commits", "counter", "Tiering cycles that committed a lake snapshot.", _key("commits")),
    Metric(
        "tiering_failures", "counter", "Tiering cycles that failed (the next one retries).", _key("errors")
    ),
    Metric(
        "tiering_cycle_seconds",
        "counter",
        "Seconds spent in the table's tiering cycles, failed ones included.",
        _key("seconds"),
    ),
    Metric(
        "tiering_last_cycle_seconds",
        "gauge",
        "Seconds of the table's last tiering cycle.",
        _key("last_seconds"),
    ),
    Metric("tiering_interval_seconds", "gauge", "The table's tiering interval.", _key("interval")),
)

FLOW_METRICS: tuple[Metric, ...] = (
    Metric(
        "flow_running",
        "gauge",
        "1 while the flow runs in this process (its state is running).",
        lambda snap: int(snap.get("state") == "running"),
    ),
    Metric(
        "flow_started_timestamp_seconds",
        "gauge",
        "When this run of the flow started (Unix time).",
        _key("started_at"),
    ),
    Metric(
        "flow_status_timestamp_seconds",
        "gauge",
        "When the figures served were taken (the status snapshot, refreshed every couple of seconds).",
        _key("updated_at"),
    ),
)


def metric_names() -> list[tuple[str, str, str, str]]:
    """(name, type, labels, help) of every metric, for the docs."""
    out = []
    for group, labels in (
        (FLOW_METRICS, ("flow",)),
        (TABLE_METRICS, ("flow", "table", "layer")),
        (TIERING_METRICS, ("flow", "table")),
    ):
        for m in group:
            out.append((m.full_name, m.kind, ", ".join(labels + m.labels), m.help))
    return out


def _family(metric: Metric, labels: tuple[str, ...]):
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    cls = CounterMetricFamily if metric.kind == "counter" else GaugeMetricFamily
    return cls(PREFIX + metric.name, metric.help, labels=list(labels + metric.labels))


def _add(family, metric: Metric, labels: list[str], row: dict[str, Any]) -> None:
    value = metric.value(row)
    if metric.labels:  # a mapping: label value -> figure
        for key, figure in (value or {}).items():
            if figure is not None:
                family.add_metric(labels + [str(key)], float(figure))
    elif value is not None:
        family.add_metric(labels, float(value))


def tiering_families(flow: str, tiering: dict[str, dict[str, Any]]) -> Iterator:
    for metric in TIERING_METRICS:
        family = _family(metric, ("flow", "table"))
        for table, figures in sorted(tiering.items()):
            _add(family, metric, [flow, table], figures)
        yield family


class FlowCollector:
    """The figures of a flow's latest status snapshot (``snapshot()`` returns it, or None before the
    first)."""

    def __init__(self, flow: str, snapshot: Callable[[], dict[str, Any] | None]) -> None:
        self.flow = flow
        self.snapshot = snapshot

    def collect(self) -> Iterator:
        snap = self.snapshot() or {}
        for metric in FLOW_METRICS:
            family = _family(metric, ("flow",))
            if snap:
                _add(family, metric, [self.flow], snap)
            yield family
        rows = snap.get("tables", [])
        for metric in TABLE_METRICS:
            family = _family(metric, ("flow", "table", "layer"))
            for row in rows:
                _add(family, metric, [self.flow, row["table"], row.get("layer") or ""], row)
            yield family
        yield from tiering_families(self.flow, snap.get("tiering") or {})


class TieringCollector:
    """The live figures of a tiering service (``tier schedule``)."""

    def __init__(self, service, flow: str | None = None) -> None:
        self.service = service
        self.flow = flow or ""

    def collect(self) -> Iterator:
        from materializer.status import tiering_figures

        yield from tiering_families(self.flow, tiering_figures(self.service))


class MetricsEndpoint:
    """``/metrics`` on ``host:port`` in a daemon thread, serving one collector; ``stop()`` closes the socket.

    A port that cannot be bound is an error naming the setting (no silent fallback to no metrics).
    """

    def __init__(self, collector, host: str, port: int) -> None:
        from prometheus_client import CollectorRegistry, start_http_server
        from prometheus_client.gc_collector import GCCollector
        from prometheus_client.process_collector import ProcessCollector

        registry = CollectorRegistry(auto_describe=True)
        registry.register(collector)
        ProcessCollector(registry=registry)  # process_cpu_seconds_total, process_resident_memory_bytes...
        GCCollector(registry=registry)
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise TidehouseError(
                ErrorCode.CONFIG_INVALID,
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}",
                location=Location(path="metrics.port"),
                hint="choose a free port (or remove metrics.port to turn the endpoint off)",
            ) from exc
        self.host, self.port = host, int(self._server.server_port)
        self._stopped = threading.Event()
        log.info("serving Prometheus metrics on http://%s:%d/metrics", host, self.port)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsEndpoint:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
