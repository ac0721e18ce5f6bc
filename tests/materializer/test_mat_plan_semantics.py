"""What a plan promises: which tables differ from their SQL's batch result by design, which strategy Spark can
run, and each table's tiering interval (its own, else the flow's, else the project setting)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.materializer._flowkit import write_project

pytestmark = pytest.mark.spark

SHIPPED = Path(__file__).resolve().parents[2] / "actions"

# four layers with a lookup join (log events x primary-key activity) and two event-time aggregations
SEMANTIC_FLOW = """flow: testflow
description: lookups, watermarks and sessions
trigger: 100ms
sources:
  clicks:
    format: json
    path: data/clicks
    schema: "user_id string, event_type string, item_id string, price double, ts timestamp"
layers:
  ods:
    clicks: {action: t_ingest, inputs: {raw: clicks}}
  dwd:
    clicks: {action: t_clean, inputs: {events: ods.clicks}}
  dws:
    user_activity:
      action: t_count
      inputs: {events: dwd.clicks}
      primary_key: [user_id]
    per_minute:
      action: windowed_count
      inputs: {events: dwd.clicks}
      params: {key: event_type, window: 1 minute, watermark_seconds: 90}
      primary_key: [window_start, event_type]
    sessions:
      action: sessionize
      inputs: {events: dwd.clicks}
      params: {key: user_id, gap: 5 minutes}
      primary_key: [user_id, session_start]
      tiering: {interval: 3s}
  ads:
    enriched:
      action: t_enrich
      inputs: {events: dwd.clicks, activity: dws.user_activity}
      lookups: processing_time
"""


def _project(project_dir, flow: str = SEMANTIC_FLOW, settings: str | None = None):
    from runtime.project import Project

    path = write_project(project_dir, flow=flow)
    for name in ("windowed_count.sql", "sessionize.sql"):
        shutil.copy(SHIPPED / name, project_dir / "actions" / name)
    if settings is not None:
        (project_dir / "tidehouse.yaml").write_text(settings)
    return path, Project.open()


def test_plan_names_the_tables_that_differ_from_batch(spark, project_dir, run_cli):

    path, project = _project(project_dir)
    try:
        plan = project.plan(path, spark=spark)
    finally:
        project.close()
    kinds = {t.name: [e.kind for e in t.exceptions] for t in plan.tables}
    assert kinds == {
        "ods.clicks": [],
        "dwd.clicks": [],
        "dws.user_activity": [],
        "dws.per_minute": ["watermark"],
        "dws.sessions": [],
        "ads.enriched": ["lookup"],
    }
    assert "dws.user_activity" in plan.table("ads.enriched").exceptions[0].detail
    assert "ts - 90s" in plan.table("dws.per_minute").exceptions[0].detail

    code, out, _ = run_cli("flow", "plan", str(path), "--format", "json")
    assert code == 0
    tables = {t["name"]: t for t in json.loads(out)["tables"]}
    assert [e["kind"] for e in tables["ads.enriched"]["exceptions"]] == ["lookup"]
    assert [e["kind"] for e in tables["dws.per_minute"]["exceptions"]] == ["watermark"]
    assert tables["dws.user_activity"]["exceptions"] == []

    code, out, _ = run_cli("flow", "plan", str(path))
    assert code == 0
    blocks: dict[str, str] = {}
    table = None
    for line in out.splitlines():  # "  <table>: ..." then its "    ..." lines
        if line.startswith("  ") and not line.startswith("   "):
            table = line.split(":", 1)[0].strip()
        if table:
            blocks[table] = blocks.get(table, "") + line + "\n"
    assert "batch exception lookup: processing-time lookups of dws.user_activity" in blocks["ads.enriched"]
    assert "batch exception watermark: rows later than the watermark (ts - 90s)" in blocks["dws.per_minute"]
    assert "batch exception" not in blocks["dws.user_activity"] + blocks["dws.sessions"]

    code, out, _ = run_cli("flow", "plan", str(path), "--format", "mermaid")
    assert code == 0
    assert 'ads_enriched["ads.enriched<br/>log · append<br/>≠ batch: lookup"]' in out
    assert 'dws_per_minute["dws.per_minute<br/>primary_key · aggregate<br/>≠ batch: watermark"]' in out
    assert 'dws_user_activity["dws.user_activity<br/>primary_key · agg_log"]' in out  # driver path


def test_processing_time_lookups_are_asked_for_by_the_flow(spark, project_dir, run_cli):
    """A log table that reads a primary-key table is refused (exit 2, the table's file and line) unless it
    says `lookups: processing_time`; the setting where it cannot apply is refused at its own line."""
    without = SEMANTIC_FLOW.replace("      lookups: processing_time\n", "")
    path, project = _project(project_dir, flow=without)
    project.close()
    code, _, err = run_cli("flow", "plan", str(path))
    assert code == 2 and "Traceback" not in err
    line = without.splitlines().index("    enriched:") + 2  # the table's mapping (its first key, action:)
    assert f"testflow.yaml:{line}:" in err and "ads.enriched" in err
    assert "lookups: processing_time" in err and "primary_key" in err
    misplaced = SEMANTIC_FLOW.replace(
        "      params: {key: user_id, gap: 5 minutes}\n",
        "      params: {key: user_id, gap: 5 minutes}\n      lookups: processing_time\n",
    )
    path.write_text(misplaced)
    code, _, err = run_cli("flow", "plan", str(path))
    line = misplaced.splitlines().index("      params: {key: user_id, gap: 5 minutes}") + 2
    assert code == 2 and f"testflow.yaml:{line}:" in err, err
    assert "dws.sessions" in err and "reads no primary-key table" in err


def test_batch_exceptions_do_not_change_fingerprints(spark, project_dir):
    """The exceptions follow from the SQL and the strategy, which the fingerprint covers; adding them to the
    plan must not change a fingerprint (a changed fingerprint makes a running deployment rebuild)."""

    # on the executor path, as these were pinned before a GROUP BY over a log table became agg_log on the
    # driver path (dws.user_activity's strategy, and so its readers' fingerprints, differ between the paths)
    path, project = _project(project_dir, settings="materializer:\n  data_path: executors\n")
    try:
        plan = project.plan(path, spark=spark)
    finally:
        project.close()
    assert plan.table("dws.user_activity").strategy == "aggregate"
    # the fingerprints this flow had before plans carried exceptions
    assert plan.table("ads.enriched").fingerprint[:12] == "a933d9c95ca6"
    assert plan.table("dws.per_minute").fingerprint[:12] == "29958d890be1"


def test_session_windows_are_planned_as_recomputed_tables(spark, project_dir):
    """Spark refuses session windows in a streaming aggregation in update mode: the plan never starts one."""

    path, project = _project(project_dir)
    try:
        plan = project.plan(path, spark=spark)
    finally:
        project.close()
    sessions = plan.table("dws.sessions")
    assert sessions.strategy == "recompute"
    assert "session window" in sessions.reason
    assert plan.table("dws.per_minute").strategy == "aggregate"  # a tumbling window streams


def test_tiering_interval_is_the_tables_else_the_flows_else_the_project_setting(spark, project_dir):
    from materializer.runner import FlowRunner

    path, project = _project(project_dir, settings="tiering:\n  interval: 7s\n")
    try:
        assert project.config.get("tiering.interval") == 7.0
        plan = project.plan(path, spark=spark)
        intervals = {t.name: t.tiering_interval for t in plan.tables}
        assert intervals == {
            "ods.clicks": 7.0,
            "dwd.clicks": 7.0,
            "dws.user_activity": 7.0,
            "dws.per_minute": 7.0,
            "dws.sessions": 3.0,
            "ads.enriched": 7.0,
        }
        # `tier run/schedule --flow` agree with the plan
        project.registry.register_flow(path)
        FlowRunner(project, plan, spark=spark).create_tables()
        tiers = project.tier_tables("testflow")
        assert {name: tiers[name] for name in intervals} == intervals
        assert tiers["ods.clicks__quarantine"] == 7.0
    finally:
        project.close()

    flow = SEMANTIC_FLOW.replace("trigger: 100ms\n", "trigger: 100ms\ntiering: {interval: 12s}\n")
    path.write_text(flow)
    from runtime.project import Project

    project = Project.open()
    try:
        plan = project.plan(path, spark=spark)
        assert plan.table("dws.user_activity").tiering_interval == 12.0  # the flow's beats the setting
        assert plan.table("dws.sessions").tiering_interval == 3.0  # the table's own beats both
    finally:
        project.close()
