"""The metrics endpoint of a running flow serves exactly what `flow status` shows, and flags missed
freshness."""

from __future__ import annotations

import json
import random
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.materializer._flowkit import FLOW, make_events, write_batch, write_project

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# the test flow with a freshness target on every table (1h: met), dwd.clicks 2s; tiering comes from the
# project setting (1h: one cycle at the start, then none), so the lake delay of dwd.clicks grows past 2s
METRICS_FLOW = FLOW.replace("tiering: {interval: 1s}\n", "freshness: 1h\n").replace(
    "clicks: {action: t_clean, inputs: {events: ods.clicks}, params: {min_price: 1.0}}",
    "clicks: {action: t_clean, inputs: {events: ods.clicks}, params: {min_price: 1.0}, freshness: 2s}",
)
TABLES = ("ods.clicks", "dwd.clicks", "dws.user_activity", "ads.low_users", "ads.top_users")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    """Every tidehouse_ sample of the endpoint: (sample name, labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url, timeout=10).read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("tidehouse_"):
                samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


class Checker:
    """Compares samples to status figures and remembers which samples it checked."""

    def __init__(self, samples: dict) -> None:
        self.samples = samples
        self.checked: set = set()

    def value(self, name: str, **labels) -> float | None:
        key = (name, frozenset(labels.items()))
        self.checked.add(key)
        return self.samples.get(key)

    def equal(self, name: str, expected, tolerance: float = 1e-6, **labels) -> None:
        got = self.value(name, **labels)
        if expected is None:
            assert got is None, f"{name}{labels}: {got}, status has none"
        else:
            assert got is not None, f"{name}{labels} missing (status: {expected})"
            assert got == pytest.approx(float(expected), abs=tolerance), f"{name}{labels}"


def test_the_metrics_of_a_running_flow_are_the_figures_of_flow_status(spark, project_dir, seed, run_cli):
    from runtime.project import Project

    port = free_port()
    (project_dir / "tidehouse.yaml").write_text(f"metrics:\n  port: {port}\ntiering:\n  interval: 1h\n")
    path = write_project(project_dir, flow=METRICS_FLOW)
    lines = make_events(random.Random(seed), 80)
    write_batch(project_dir, "part-0", lines)
    url = f"http://127.0.0.1:{port}/metrics"

    project = Project.open()
    stop = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            project.trigger(path, spark=spark, stop_event=stop)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        # the flow caught up: every layer holds rows, nothing moves between two looks, dwd.clicks' lake is
        # late
        previous, deadline = None, time.monotonic() + 240
        while time.monotonic() < deadline and not failure:
            time.sleep(1.0)
            try:
                status = project.status("testflow")
            except Exception:  # noqa: BLE001, S112 - not registered yet
                continue
            rows = {r["table"]: (r["hot_rows"], r["batches"]) for r in status["tables"]}
            dwd = next(r for r in status["tables"] if r["table"] == "dwd.clicks")
            settled = (
                status["running"]
                and all(
                    r["hot_rows"]
                    for r in status["tables"]  # low_users may be empty
                    if r["table"] != "ads.low_users"
                )
                and (dwd.get("lake_delay_s") or 0) > 2.5
            )
            if settled and rows == previous:
                break
            previous = rows if settled else None
        assert not failure, failure
        assert previous is not None, "the flow did not catch up"
        settled = time.time()

        for _ in range(60):  # a snapshot taken since, the same on both sides (it is refreshed every 2 s)
            samples = scrape(url)
            status = project.status("testflow")
            taken = time.time()
            again = scrape(url)
            stamp = ("tidehouse_flow_status_timestamp_seconds", frozenset({"flow": "testflow"}.items()))
            if (
                samples.get(stamp) == again.get(stamp) == pytest.approx(status["updated_at"], abs=1e-3)
                and status["updated_at"] > settled
            ):
                break
            time.sleep(0.5)
        else:
            pytest.fail("no scrape saw a snapshot taken after the flow settled, the one flow status read")

        check = Checker(samples)
        flow = {"flow": "testflow"}
        check.equal("tidehouse_flow_running", 1, **flow)
        check.equal("tidehouse_flow_status_timestamp_seconds", status["updated_at"], 1e-3, **flow)
        assert check.value("tidehouse_flow_started_timestamp_seconds", **flow) <= status["updated_at"]
        lag = taken - status["updated_at"] + 0.5  # live lake delays in status vs the snapshot's
        by_table = {r["table"]: r for r in status["tables"]}
        assert set(by_table) == set(TABLES)
        for table, r in by_table.items():
            labels = {"flow": "testflow", "table": table, "layer": r["layer"]}
            check.equal("tidehouse_table_rows_in_total", r["rows_in"], **labels)
            check.equal("tidehouse_table_rows_out_total", r["rows_written"], **labels)
            check.equal("tidehouse_table_batches_total", r["batches"], **labels)
            check.equal("tidehouse_table_spark_batches_total", r["spark_batches"], **labels)
            for phase, seconds in r["batch_seconds"].items():
                check.equal("tidehouse_table_batch_seconds_total", seconds, **labels, phase=phase)
            check.equal("tidehouse_table_hot_delay_seconds", r["hot_delay_s"], 1e-3, **labels)
            check.equal("tidehouse_table_lake_delay_seconds", r["lake_delay_s"], lag, **labels)
            check.equal("tidehouse_table_lake_pending_rows", r["lake_pending_rows"], **labels)
            check.equal("tidehouse_table_hot_rows", r["hot_rows"], **labels)
            check.equal("tidehouse_table_rows_per_second", r["rows_per_s"], **labels)
            check.equal("tidehouse_table_quarantined_rows", r["quarantined"], **labels)
            check.equal("tidehouse_table_expectation_dropped_total", r["dropped"], **labels)
            check.equal("tidehouse_table_late_dropped_total", r["late_dropped"], **labels)
            for reader, batches in r["source_batches"].items():
                check.equal("tidehouse_table_source_batches_total", batches, **labels, reader=reader)
            check.equal("tidehouse_table_active", int(r["state"] == "active"), **labels)
            check.equal("tidehouse_table_failed", int(bool(r["error"])), **labels)
            check.equal("tidehouse_table_freshness_target_seconds", r["freshness_s"], **labels)
            check.equal("tidehouse_table_fresh", int(r["fresh"]), **labels)
        for table, t in status["tiering"].items():
            labels = {"flow": "testflow", "table": table}
            check.equal("tidehouse_tiering_cycles_total", t["runs"], **labels)
            check.equal("tidehouse_tiering_commits_total", t["commits"], **labels)
            check.equal("tidehouse_tiering_failures_total", t["errors"], **labels)
            check.equal("tidehouse_tiering_cycle_seconds_total", t["seconds"], **labels)
            check.equal("tidehouse_tiering_last_cycle_seconds", t["last_seconds"], **labels)
            check.equal("tidehouse_tiering_interval_seconds", t["interval"], **labels)
        assert set(status["tiering"]) == set(TABLES) | {"ods.clicks__quarantine"}
        unchecked = set(samples) - check.checked
        assert not unchecked, f"exported but not compared with flow status: {sorted(unchecked)}"

        # the figures themselves: what the batches did, where their time went, freshness
        ods, dwd = by_table["ods.clicks"], by_table["dwd.clicks"]
        assert (
            ods["quarantined"] == 2 and ods["rows_in"] == len(lines) and ods["rows_written"] == len(lines) - 2
        )
        assert dwd["rows_in"] == ods["rows_written"] and dwd["batches"] >= 1
        assert dwd["spark_batches"] >= dwd["batches"]
        phases = dwd["batch_seconds"]
        assert all(phases[p] > 0 for p in ("plan", "read", "sql", "write", "commit", "total")), phases
        assert phases["total"] >= phases["read"] + phases["sql"] + phases["write"], phases
        # a hot input's batches waited (from the commit of their oldest row to the batch function) and a file
        # source's are not measured. Not "wait >= plan": plan sums every micro-batch Spark planned
        # (spark_batches), wait only those that read hot rows, and the latestOffset that finds the rows can
        # begin before they are committed (measured here: wait 0.1148 s against plan 0.116 s)
        assert phases["wait"] > 0 and phases["plan"] > 0 and ods["batch_seconds"]["wait"] == 0, (phases, ods)
        assert status["tiering"]["dwd.clicks"]["runs"] == 1 and status["tiering"]["dwd.clicks"]["errors"] == 0
        assert dwd["freshness_s"] == 2.0 and dwd["fresh"] is False and "lake" in dwd["freshness_missed"]
        assert ods["freshness_s"] == 3600.0 and ods["fresh"] is True
        code, out, err = run_cli("flow", "status", "testflow")
        assert code == 0, err
        row = next(line for line in out.splitlines() if line.startswith("dwd.clicks "))
        assert row.rstrip().endswith("2.0s MISSED")
        missed = next(
            line for line in out.splitlines() if line.startswith("dwd.clicks: misses its freshness")
        )
        assert (
            missed.startswith("dwd.clicks: misses its freshness target of 2.0s (") and "lake delay " in missed
        )
        code, out, err = run_cli("flow", "status", "testflow", "--json")
        assert code == 0, err
        assert {r["table"]: r["fresh"] for r in json.loads(out)["tables"]}["dwd.clicks"] is False
    finally:
        stop.set()
        thread.join(timeout=120)
        project.close()
    assert not thread.is_alive() and not failure, failure
    with pytest.raises(urllib.error.URLError):  # stopped with the flow
        urllib.request.urlopen(url, timeout=5)


def test_a_freshness_target_is_in_the_plan_but_not_in_the_fingerprint(spark, project_dir):
    """Setting or changing a target must never make a table 'changed' (TH405, a rebuild)."""
    from runtime.project import Project

    plain = write_project(project_dir)
    project = Project.open()
    try:
        before = {
            t.name: (t.fingerprint, t.checkpoint, t.freshness)
            for t in project.plan(plain, spark=spark).tables
        }
        fresh = write_project(
            project_dir,
            flow=METRICS_FLOW.replace("freshness: 1h\n", "tiering: {interval: 1s}\nfreshness: 1h\n"),
        )
        plan = project.plan(fresh, spark=spark)
    finally:
        project.close()
    after = {t.name: (t.fingerprint, t.checkpoint, t.freshness) for t in plan.tables}
    assert {n: v[:2] for n, v in after.items()} == {n: v[:2] for n, v in before.items()}
    assert {n: v[2] for n, v in before.items()} == dict.fromkeys(TABLES)
    assert after["dwd.clicks"][2] == 2.0 and after["ods.clicks"][2] == 3600.0
    assert "freshness 2s" in plan.to_text() and json.loads(plan.to_json())["tables"][1]["freshness"] == 2.0
