"""The tiering service's metrics (``tier schedule`` with metrics.port): live cycles, commits, failures,
seconds."""

from __future__ import annotations

import socket
import urllib.request

from materializer.metrics import MetricsEndpoint, TieringCollector
from runtime.lake.scheduler import TieringService
from runtime.storage.api import TableMeta
from tests.lake._lakekit import CLICKS, clicks
from tests.lake.memstore import MemoryTableStore


def _scrape(url: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {
        (s.name, s.labels.get("table")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith("tidehouse_")
    }


def test_a_tiering_service_serves_its_figures_per_table(lake):
    store = MemoryTableStore()
    store.create_table(TableMeta("ods.a", CLICKS))
    store.write("ods.a", clicks(5, 0), writer="w", seq=1)
    service = TieringService((store, lake), {"ods.a": 30.0, "ods.missing": 10.0})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with MetricsEndpoint(TieringCollector(service, "f"), "127.0.0.1", port) as endpoint:
        before = _scrape(endpoint.url)
        assert before[("tidehouse_tiering_cycles_total", "ods.a")] == 0  # nothing ran yet
        assert ("tidehouse_tiering_last_cycle_seconds", "ods.a") not in before
        service.run_all_now()
        store.write("ods.a", clicks(3, 5), writer="w", seq=2)
        service.run_table("ods.a")
        got = _scrape(endpoint.url)
    summary = service.summary()
    assert got[("tidehouse_tiering_cycles_total", "ods.a")] == 2
    assert got[("tidehouse_tiering_commits_total", "ods.a")] == 2
    assert got[("tidehouse_tiering_failures_total", "ods.a")] == 0
    assert got[("tidehouse_tiering_failures_total", "ods.missing")] == 1  # a failed cycle is counted
    assert got[("tidehouse_tiering_cycle_seconds_total", "ods.a")] == summary["ods.a"]["seconds"] > 0
    assert got[("tidehouse_tiering_last_cycle_seconds", "ods.a")] == summary["ods.a"]["last_seconds"] > 0
    assert got[("tidehouse_tiering_interval_seconds", "ods.missing")] == 10.0


def test_tier_schedule_serves_metrics_while_it_runs_and_stops_with_it(project_dir, run_cli):
    import contextlib
    import threading
    import time
    import urllib.error

    from runtime.project import Project

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (project_dir / "tidehouse.yaml").write_text(f"metrics:\n  port: {port}\n")
    project = Project.open()
    project.store.create_table(TableMeta("ods.a", CLICKS))
    project.store.write("ods.a", clicks(4, 0), writer="w", seq=1)
    project.close()
    url, seen = f"http://127.0.0.1:{port}/metrics", {}

    def watch() -> None:  # scrape until the service has committed its first cycle
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not seen.get(("tidehouse_tiering_commits_total", "ods.a")):
            with contextlib.suppress(urllib.error.URLError):
                seen.update(_scrape(url))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    code, _, err = run_cli("tier", "schedule", "--duration", "4")  # signal handlers: the main thread's
    watcher.join(timeout=60)
    assert code == 0, err
    assert (
        seen[("tidehouse_tiering_commits_total", "ods.a")] == 1
        and seen[("tidehouse_tiering_interval_seconds", "ods.a")] == 30.0
    )
    try:
        urllib.request.urlopen(url, timeout=5)
        raise AssertionError("the endpoint outlived tier schedule")
    except urllib.error.URLError:
        pass
