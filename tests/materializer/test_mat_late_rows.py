"""Late rows: what a watermarked streaming aggregation drops is counted and shown, never silent."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pytest

from tests.materializer._flowkit import write_project

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SHIPPED = Path(__file__).resolve().parents[2] / "actions"
T0 = dt.datetime(2024, 5, 1, 12, 0, 0)

LATE_FLOW = """flow: lateflow
description: a watermarked window over the landed events
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
  dws:
    per_minute:
      action: windowed_count
      inputs: {events: ods.clicks}
      params: {key: user_id, window: 1 minute, watermark_seconds: 60}
      primary_key: [window_start, user_id]
"""


def _event(user: str, seconds: int) -> dict:
    ts = (T0 + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"user_id": user, "event_type": "view", "item_id": "i1", "price": 1.0, "ts": ts}


def _deliver(project_dir: Path, name: str, rows: list[dict]) -> None:
    tmp = project_dir / "data" / f".{name}.tmp"
    tmp.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    tmp.rename(project_dir / "data" / "clicks" / f"{name}.json")


def _windows(rows: list[dict]) -> set[tuple]:
    return {(r["user_id"], r["ts"][:16]) for r in rows}  # (key, minute) groups


def test_rows_later_than_the_watermark_are_counted_in_status(spark, project_dir, run_cli):
    from runtime.project import Project

    path = write_project(project_dir, flow=LATE_FLOW)
    shutil.copy(SHIPPED / "windowed_count.sql", project_dir / "actions" / "windowed_count.sql")
    on_time_1 = [_event(f"u{i % 3}", s) for i, s in enumerate(range(0, 600, 20))]  # 12:00-12:10
    on_time_2 = [_event(f"u{i % 3}", s) for i, s in enumerate(range(600, 1200, 20))]  # 12:10-12:20
    # far behind the watermark (>= 12:09 once the second run's batch is done), each in a window and key
    # of its own, so Spark's count (rows at its state operator, a micro-batch's late rows of one group
    # combined first) is the number of rows
    late = [_event("late_a", 70), _event("late_b", 130), _event("late_c", 190)]
    on_time_3 = [_event("u0", 1210), _event("u1", 1230)]
    assert len(_windows(late)) == len(late)

    project = Project.open()
    try:
        _deliver(project_dir, "part-0", on_time_1)
        report = project.trigger(path, until_idle=True, spark=spark)
        assert report.tables["dws.per_minute"]["late_dropped"] == 0
        _deliver(project_dir, "part-1", on_time_2)
        report = project.trigger("lateflow", until_idle=True, spark=spark)
        assert report.tables["dws.per_minute"]["late_dropped"] == 0
    finally:
        project.close()

    _deliver(project_dir, "part-2", late + on_time_3)
    code, out, err = run_cli("flow", "trigger", "lateflow", "--until-idle")
    assert code == 0, err
    assert "dws.per_minute: " in out and ", 3 late rows dropped by the watermark" in out
    assert "ods.clicks: 5 rows written in 1 batch\n" in out  # the ODS table lands every row

    code, out, err = run_cli("flow", "status", "lateflow", "--json")
    assert code == 0, err
    figures = {row["table"]: row for row in json.loads(out)["tables"]}
    assert figures["dws.per_minute"]["late_dropped"] == 3
    assert figures["ods.clicks"]["late_dropped"] == 0

    code, out, err = run_cli("flow", "status", "lateflow")
    assert code == 0, err
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("table "))
    column = header.index("late dropped")
    row = next(line for line in lines if line.startswith("dws.per_minute "))
    assert row[column:].split()[0] == "3"
    offsets = header.index("hot offsets")  # one figure per bucket, as a list when there are several
    for table, figure in figures.items():
        row = next(line for line in lines if line.startswith(f"{table} "))
        ends = figure["hot_end_offsets"]
        shown = str(ends[0]) if len(ends) == 1 else "[" + ",".join(map(str, ends)) + "]"
        assert row[offsets:].split()[0] == shown, (table, ends)

    # the stream dropped them; a batch run counts them: the table lacks exactly their windows
    project = Project.open()
    try:
        kept = {
            (r["user_id"], r["window_start"].strftime("%Y-%m-%dT%H:%M"))
            for r in project.store.scan("dws.per_minute").to_pylist()
        }
        everything = _windows(on_time_1 + on_time_2 + late + on_time_3)
        assert kept == everything - _windows(late)
        assert sum(project.store.end_offsets("ods.clicks")) == len(on_time_1 + on_time_2 + late + on_time_3)
    finally:
        project.close()


def test_a_classic_session_reads_each_progress_event_as_json_not_field_by_field(spark, monkeypatch):
    """pyspark's own conversion of a progress event makes hundreds of Py4J calls (~29 % of a core of the
    driver's Python in a 4-layer flow); the listener reads the JSON instead, and still counts every
    micro-batch with Spark's phase seconds."""
    import time

    from pyspark.sql.streaming import listener as pyspark_listener

    from materializer.progress import ProgressListener

    def refuse(*args, **kwargs):
        raise AssertionError("pyspark converted a progress event field by field")

    monkeypatch.setattr(pyspark_listener.QueryProgressEvent, "fromJObject", classmethod(refuse))
    progress = ProgressListener()
    session = spark.newSession()
    progress.watch(session)
    stream = session.readStream.format("rate").option("rowsPerSecond", 50).load()
    query = (
        stream.writeStream.queryName("progress_json")
        .foreachBatch(lambda df, batch_id: None)
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 60
        while progress.batches("progress_json") < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        query.stop()
        progress.close()
    assert progress.batches("progress_json") >= 3
    assert progress.seconds("progress_json")["total"] > 0
