"""Metrics, freshness and logs without Spark: phase clocks, the collectors, the endpoint, the settings, the
log formats, the freshness key of flows."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from materializer.metrics import FLOW_METRICS, TABLE_METRICS, TIERING_METRICS, FlowCollector, MetricsEndpoint
from materializer.status import freshness
from materializer.telemetry import PhaseClock
from runtime.core.config import PROJECT_FILE, load_config
from runtime.core.errors import ErrorCode, TidehouseError, TidehouseErrors
from runtime.core.logs import JsonFormatter, TextFormatter, configure_logging

SNAPSHOT = {
    "flow": "f",
    "state": "running",
    "started_at": 100.0,
    "updated_at": 160.0,
    "tables": [
        {
            "table": "ods.a",
            "layer": "ods",
            "state": "active",
            "rows_in": 12,
            "rows_written": 10,
            "batches": 2,
            "spark_batches": 3,
            "batch_seconds": {
                "plan": 0.1,
                "read": 0.2,
                "sql": 0.3,
                "write": 0.05,
                "commit": 0.02,
                "total": 0.9,
            },
            "hot_delay_s": 0.4,
            "lake_delay_s": 45.0,
            "lake_pending_rows": 7,
            "hot_rows": 10,
            "rows_per_s": 1.5,
            "quarantined": 2,
            "dropped": 0,
            "late_dropped": 0,
            "error": None,
            "freshness_s": 30.0,
            "fresh": False,
            "freshness_missed": ["lake"],
        },
        {
            "table": "dwd.b",
            "layer": "dwd",
            "state": "not started",
            "rows_in": 0,
            "rows_written": 0,
            "batches": 0,
            "spark_batches": 0,
            "batch_seconds": {},
            "hot_delay_s": None,
            "lake_delay_s": None,
            "hot_rows": 0,
            "rows_per_s": None,
            "quarantined": 0,
            "dropped": 0,
            "late_dropped": 0,
            "error": "boom",
            "freshness_s": None,
            "fresh": None,
            "freshness_missed": [],
        },
    ],
    "tiering": {
        "ods.a": {
            "interval": 30.0,
            "runs": 4,
            "commits": 3,
            "errors": 1,
            "seconds": 1.25,
            "last_seconds": 0.25,
            "last_error": None,
        }
    },
}


def _samples(collector) -> dict:
    out = {}
    for family in collector.collect():
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- batch phases ---------------------------------------------------------------------------------------
def test_a_nested_phase_pauses_the_outer_one_and_each_thread_has_its_own():
    now = [100.0]  # a clock the test moves, so a busy machine's late wake-ups do not count
    clock = PhaseClock(now=lambda: now[0])
    with clock.phase("sql"):
        now[0] += 0.05
        with clock.phase("write"):  # a quarantine write inside the expectation checks
            now[0] += 0.1
        now[0] += 0.25
    other = {}
    thread = threading.Thread(target=lambda: other.update(clock.take()))
    thread.start()
    thread.join()
    took = clock.take()
    assert other == {}
    assert took == {"sql": pytest.approx(0.3), "write": pytest.approx(0.1)}
    assert clock.take() == {}  # taken: the next batch starts from zero


# -- freshness ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "hot,lake,target,fresh,missed",
    [
        (1.0, 20.0, 30.0, True, []),
        (1.0, 45.0, 30.0, False, ["lake"]),
        (40.0, 45.0, 30.0, False, ["hot", "lake"]),
        (None, None, 30.0, True, []),  # nothing arrived yet: nothing is late
        (1.0, 45.0, None, None, []),  # no target: no verdict
    ],
)
def test_freshness_verdict(hot, lake, target, fresh, missed):
    verdict = freshness({"hot_delay_s": hot, "lake_delay_s": lake}, target)
    assert verdict == {"freshness_s": target, "fresh": fresh, "freshness_missed": missed}


def _flow(tmp_path, text: str):
    from registry.specs import parse_flow

    path = tmp_path / "f.yaml"
    path.write_text(text)
    return parse_flow(path)


FRESH_FLOW = """flow: f
tiering: {interval: 30s}
freshness: 5m
sources:
  s: {format: rate}
layers:
  ods:
    a: {action: x, inputs: {raw: s}}
    b: {action: x, inputs: {raw: s}, freshness: 1m}
"""


def test_a_table_takes_its_own_freshness_else_the_flows(tmp_path):
    spec = _flow(tmp_path, FRESH_FLOW)
    assert spec.freshness_of("ods.a") == 300.0 and spec.freshness_of("ods.b") == 60.0
    assert _flow(tmp_path, FRESH_FLOW.replace("freshness: 5m\n", "")).freshness_of("ods.a") is None


@pytest.mark.parametrize(
    "text,line,col,path",
    [
        (FRESH_FLOW.replace("freshness: 1m", "freshness: 10s"), 9, 49, "layers.ods.b.freshness"),
        (FRESH_FLOW.replace("freshness: 5m", "freshness: 20s"), 3, 12, "freshness"),
        (FRESH_FLOW.replace("freshness: 1m", "freshness: soon"), 9, 49, "layers.ods.b.freshness"),
    ],
)
def test_a_freshness_target_the_lake_cannot_meet_is_refused_at_its_line(tmp_path, text, line, col, path):
    with pytest.raises(TidehouseError) as info:
        _flow(tmp_path, text)
    errors = info.value.errors if isinstance(info.value, TidehouseErrors) else [info.value]
    assert [(e.location.line, e.location.col, e.location.path) for e in errors] == [(line, col, path)]


# -- the collectors ------------------------------------------------------------------------------------
def test_the_flow_collector_serves_the_snapshot_figures():
    got = _samples(FlowCollector("f", lambda: SNAPSHOT))
    a = (("flow", "f"), ("layer", "ods"), ("table", "ods.a"))
    assert got[("tidehouse_table_rows_in_total", a)] == 12
    assert got[("tidehouse_table_rows_out_total", a)] == 10
    assert got[("tidehouse_table_batch_seconds_total", tuple(sorted(a + (("phase", "sql"),))))] == 0.3
    assert got[("tidehouse_table_lake_delay_seconds", a)] == 45.0
    assert got[("tidehouse_table_quarantined_rows", a)] == 2
    assert got[("tidehouse_table_freshness_target_seconds", a)] == 30.0
    assert got[("tidehouse_table_fresh", a)] == 0
    assert got[("tidehouse_table_active", a)] == 1
    assert got[("tidehouse_tiering_failures_total", (("flow", "f"), ("table", "ods.a")))] == 1
    assert got[("tidehouse_tiering_cycle_seconds_total", (("flow", "f"), ("table", "ods.a")))] == 1.25
    assert got[("tidehouse_flow_status_timestamp_seconds", (("flow", "f"),))] == 160.0
    b = (("flow", "f"), ("layer", "dwd"), ("table", "dwd.b"))
    assert got[("tidehouse_table_failed", b)] == 1 and got[("tidehouse_table_active", b)] == 0
    # a figure status does not have is no sample (not a 0 that would look like a measurement)
    for name in (
        "tidehouse_table_hot_delay_seconds",
        "tidehouse_table_fresh",
        "tidehouse_table_rows_per_second",
        "tidehouse_table_freshness_target_seconds",
    ):
        assert (name, b) not in got
    assert not any(
        name == "tidehouse_table_batch_seconds_total" and ("table", "dwd.b") in labels for name, labels in got
    )


def test_before_the_first_snapshot_the_families_are_there_without_samples():
    families = list(FlowCollector("f", lambda: None).collect())
    assert len(families) == len(FLOW_METRICS) + len(TABLE_METRICS) + len(TIERING_METRICS)
    assert not any(f.samples for f in families)


def test_every_metric_is_documented():
    from pathlib import Path

    from materializer.metrics import metric_names

    text = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    for name, *_ in metric_names():
        assert f"`{name}`" in text, name


# -- the endpoint --------------------------------------------------------------------------------------
def test_the_endpoint_serves_until_stopped_and_a_taken_port_is_an_error_naming_the_setting():
    port = _free_port()
    endpoint = MetricsEndpoint(FlowCollector("f", lambda: SNAPSHOT), "127.0.0.1", port)
    try:
        body = urllib.request.urlopen(endpoint.url, timeout=10).read().decode()
        assert 'tidehouse_table_rows_in_total{flow="f",layer="ods",table="ods.a"} 12.0' in body
        assert "process_cpu_seconds_total" in body  # the process's own figures come along
        with pytest.raises(TidehouseError) as info:
            MetricsEndpoint(FlowCollector("f", lambda: SNAPSHOT), "127.0.0.1", port)
        assert info.value.code is ErrorCode.CONFIG_INVALID and info.value.location.path == "metrics.port"
    finally:
        endpoint.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(endpoint.url, timeout=5)


def test_the_endpoint_is_off_unless_a_port_is_set(tmp_path):
    from runtime.project import Project

    project = Project(load_config(home=tmp_path / "home", project_dir=tmp_path))
    with project.metrics_endpoint(FlowCollector("f", lambda: SNAPSHOT)) as endpoint:
        assert endpoint is None


# -- settings ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "content,path",
    [
        ("metrics:\n  port: 0\n", "metrics.port"),
        ("metrics:\n  port: http\n", "metrics.port"),
        ("metrics:\n  host: ''\n", "metrics.host"),
        ("logging:\n  level: verbose\n", "logging.level"),
        ("logging:\n  format: xml\n", "logging.format"),
    ],
)
def test_bad_metrics_and_logging_settings_are_refused_at_their_line(tmp_path, content, path):
    (tmp_path / PROJECT_FILE).write_text(content)
    with pytest.raises(TidehouseError) as info:
        load_config(home=tmp_path / "home", project_dir=tmp_path)
    errors = info.value.errors if isinstance(info.value, TidehouseErrors) else [info.value]
    assert [(e.code, e.location.line, e.location.path) for e in errors] == [
        (ErrorCode.CONFIG_INVALID, 2, path)
    ]


def test_metrics_and_logging_settings_are_read(tmp_path):
    (tmp_path / PROJECT_FILE).write_text(
        "metrics: {port: 9464, host: 0.0.0.0}\nlogging: {level: INFO, format: json}\n"
    )
    config = load_config(home=tmp_path / "home", project_dir=tmp_path)
    assert (config.get("metrics.port"), config.get("metrics.host")) == (9464, "0.0.0.0")
    assert (config.get("logging.level"), config.get("logging.format")) == ("info", "json")


# -- log formats ---------------------------------------------------------------------------------------
def _record(**extra) -> logging.LogRecord:
    record = logging.LogRecord("materializer.batch", logging.INFO, __file__, 1, "batch %d done", (7,), None)
    record.__dict__.update(extra)
    return record


def test_a_json_log_line_holds_the_record_and_its_fields():
    line = JsonFormatter().format(_record(flow="f", table="dwd.b", batch_id=7, rows_in=3))
    out = json.loads(line)
    assert (
        out["message"] == "batch 7 done" and out["level"] == "info" and out["logger"] == "materializer.batch"
    )
    assert (out["flow"], out["table"], out["batch_id"], out["rows_in"]) == ("f", "dwd.b", 7, 3)
    assert out["ts"].endswith("+00:00")


def test_a_text_log_line_names_flow_table_and_batch():
    assert (
        TextFormatter()
        .format(_record(flow="f", table="dwd.b", batch_id=7))
        .endswith(" INFO materializer.batch [f dwd.b #7]: batch 7 done")
    )
    assert TextFormatter().format(_record()).endswith(" INFO materializer.batch: batch 7 done")


def test_configuring_logging_twice_keeps_one_handler_and_undo_restores(capsys):
    root = logging.getLogger()
    before = root.level
    undo_first = configure_logging("info", "text")
    undo = configure_logging("debug", "json")
    try:
        assert sum(getattr(h, "tidehouse", False) for h in root.handlers) == 1
        assert (
            logging.getLogger("py4j").getEffectiveLevel() == logging.WARNING
        )  # never its call-by-call DEBUG
        logging.getLogger("materializer.batch").debug("hello", extra={"table": "ods.a"})
        assert json.loads(capsys.readouterr().err.strip().splitlines()[-1])["table"] == "ods.a"
    finally:
        undo()
        undo_first()
    assert not any(getattr(h, "tidehouse", False) for h in root.handlers) and root.level == before


def test_a_batch_adds_its_phases_to_the_stats_and_logs_its_flow_table_and_id(caplog):
    from types import SimpleNamespace

    from materializer.strategies import TableStats
    from materializer.telemetry import batch_scope, timed

    ctx = SimpleNamespace(
        flow=SimpleNamespace(flow="f"),
        table=SimpleNamespace(name="dwd.b"),
        stats=TableStats(),
        clock=PhaseClock(),
    )

    @timed("sql")
    def run_sql(ctx):
        time.sleep(0.02)

    caplog.set_level(logging.DEBUG, logger="materializer.batch")
    with batch_scope(ctx, 7):
        run_sql(ctx)
        ctx.stats.rows_in += 5
        ctx.stats.rows_out += 4
    with pytest.raises(ValueError), batch_scope(ctx, 8):
        run_sql(ctx)
        raise ValueError("bad row")
    ok, failed = [r for r in caplog.records if r.name == "materializer.batch"]
    assert (ok.levelname, ok.flow, ok.table, ok.batch_id, ok.rows_in, ok.rows_out) == (
        "DEBUG",
        "f",
        "dwd.b",
        7,
        5,
        4,
    )
    assert ok.sql_s >= 0.02 and ok.read_s == 0.0
    assert (failed.levelname, failed.batch_id) == (
        "ERROR",
        8,
    ) and "ValueError: bad row" in failed.getMessage()
    assert ctx.stats.phase_seconds["sql"] >= 0.04 and ctx.stats.last_batch_id == 8
    assert "wait" not in ctx.stats.phase_seconds  # a table with no checkpoint of hot inputs: not measured


def test_a_batch_waited_from_the_upstream_commit_of_its_oldest_row_to_its_start(tmp_path, monkeypatch):
    """The ``wait`` phase: now minus the oldest upstream commit of the rows the batch reads (per batch,
    summed), and nothing for a batch that reads no hot rows."""
    from types import SimpleNamespace

    import runtime.spark.writer as writer
    from materializer.strategies import TableStats
    from materializer.telemetry import batch_scope

    now = time.time()
    times = {3: (now - 9.0, now - 2.0), 4: (None, None)}
    monkeypatch.setattr(writer, "input_times", lambda store, checkpoint, batch_id: times[batch_id])
    ctx = SimpleNamespace(
        flow=SimpleNamespace(flow="f"),
        table=SimpleNamespace(name="dwd.b", checkpoint=str(tmp_path)),
        store=None,
        stats=TableStats(),
        clock=PhaseClock(),
    )
    with batch_scope(ctx, 3):
        pass
    assert 2.0 <= ctx.stats.phase_seconds["wait"] < 3.0
    with batch_scope(ctx, 4):
        pass
    assert 2.0 <= ctx.stats.phase_seconds["wait"] < 3.0  # batch 4 read no hot rows: nothing added
