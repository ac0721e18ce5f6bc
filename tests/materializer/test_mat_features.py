"""Lookups, expectations and --full-refresh, end to end (one flow, one Spark run each)."""

from __future__ import annotations

import random

import pytest

from tests.materializer._flowkit import canon, make_events, write_batch, write_project

pytestmark = pytest.mark.spark

FLOW = """flow: features
trigger: 100ms
tiering: {interval: 1s}
sources:
  clicks:
    format: json
    path: data/clicks
    schema: "user_id string, event_type string, item_id string, price double, ts timestamp"
layers:
  ods:
    clicks: {action: t_ingest, inputs: {raw: clicks}}
  dwd:
    clicks:
      action: t_clean
      inputs: {events: ods.clicks}
      expect:
        - {name: cheap, condition: "price < 15", on_violation: quarantine}
        - {name: not_u0, condition: "user_id <> 'u0'", on_violation: drop}
  dws:
    user_activity: {action: t_count, inputs: {events: dwd.clicks}, primary_key: [user_id]}
    enriched:
      action: t_enrich
      inputs: {events: dwd.clicks, activity: dws.user_activity}
      lookups: processing_time
"""


def test_lookup_expectations_and_full_refresh(spark, project_dir, data_path, seed):
    import json

    from runtime.project import Project

    rng = random.Random(seed)
    write_project(project_dir, flow=FLOW)
    lines = make_events(rng, 60, bad=0)
    write_batch(project_dir, "part-0", lines)
    rows = [json.loads(line) for line in lines]
    clean = [r for r in rows if r["event_type"].lower() in ("click", "view", "buy") and r["price"] >= 0.0]
    kept = [r for r in clean if r["price"] < 15 and r["user_id"] != "u0"]
    quarantined = [r for r in clean if not r["price"] < 15]
    counts: dict[str, int] = {}
    for r in kept:
        counts[r["user_id"]] = counts.get(r["user_id"], 0) + 1

    project = Project.open()
    try:
        report = project.trigger(project_dir / "flows" / "testflow.yaml", until_idle=True, spark=spark)
        store = project.store
        assert store.scan("dwd.clicks").num_rows == len(kept)
        assert report.tables["dwd.clicks"]["expectations"]["cheap"] == len(quarantined)
        assert report.tables["dwd.clicks"]["dropped"] == len(
            [r for r in clean if r["price"] < 15 and r["user_id"] == "u0"]
        )
        q = store.scan("dwd.clicks__quarantine")
        assert q.num_rows == len(quarantined)
        assert set(q.column("reason").to_pylist()) <= {"expectation cheap failed: price < 15"}
        # the lookup saw the complete aggregation (the backfill starts it after its upstream caught up)
        expected = {(c, r["item_id"], r["user_id"]) for r in kept for c in [counts[r["user_id"]]]}
        assert {
            (r["user_events"], r["item_id"], r["user_id"]) for r in store.scan("dws.enriched").to_pylist()
        } == expected
        before = canon(store.scan("dws.user_activity"))
        # full refresh of dwd.clicks rebuilds it and everything downstream, once
        project.trigger("features", until_idle=True, spark=spark, full_refresh=["dwd.clicks"])
        assert store.scan("dwd.clicks").num_rows == len(kept)
        assert canon(store.scan("dws.user_activity")) == before
        assert store.scan("dwd.clicks__quarantine").num_rows == len(quarantined)
        assert store.scan("ods.clicks").num_rows == len(rows)  # upstream untouched
        assert project.lake.load("dws.enriched").scan().to_arrow().num_rows == len(kept)
    finally:
        project.close()
