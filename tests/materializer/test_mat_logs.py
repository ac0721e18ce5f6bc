"""Logs: a batch's JSON log line names its flow, table and batch; Spark's log goes to a file under the
home."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from tests._support import REPO
from tests.materializer._flowkit import make_events, write_batch

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_a_json_log_line_of_each_batch_carries_flow_table_and_batch_id(
    spark, project_dir, test_flow, data_path, seed, run_cli
):
    """On both data paths: an ODS batch counts every record that came in, the quarantined ones too."""
    path = f"materializer:\n  data_path: {data_path}\n"
    (project_dir / "tidehouse.yaml").write_text(path + "logging:\n  level: debug\n  format: json\n")
    lines = make_events(random.Random(seed), 40)
    write_batch(project_dir, "part-0", lines)
    code, _, err = run_cli("flow", "trigger", "flows/testflow.yaml", "--until-idle")
    assert code == 0, err
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert records and all({"ts", "level", "logger", "message"} <= set(r) for r in records)
    batches = [r for r in records if r["logger"] == "materializer.batch"]
    assert {r["table"] for r in batches} >= {"ods.clicks", "dwd.clicks", "dws.user_activity"}
    for r in batches:
        assert r["flow"] == "testflow" and r["level"] == "debug" and isinstance(r["batch_id"], int)
        assert f"batch {r['batch_id']} of {r['table']}" in r["message"]
        assert {"rows_in", "rows_out", "quarantined", "seconds", "read_s", "sql_s", "write_s"} <= set(r)
    ods = [r for r in batches if r["table"] == "ods.clicks"]
    assert sum(r["rows_in"] for r in ods) == len(lines) and sum(r["quarantined"] for r in ods) == 2

    # text, the default: the same record in a plain line, its flow, table and batch in brackets
    (project_dir / "tidehouse.yaml").write_text(path + "logging:\n  level: debug\n")
    write_batch(project_dir, "part-1", make_events(random.Random(seed + 1), 10, bad=0))
    code, _, err = run_cli("flow", "trigger", "testflow", "--until-idle")
    assert code == 0, err
    text = [line for line in err.splitlines() if " materializer.batch [testflow ods.clicks #" in line]
    assert text and " DEBUG " in text[0] and "10 rows in" in text[0]


def test_spark_warnings_go_to_a_file_under_the_home_not_to_the_terminal(tmp_path):
    """A fresh process (the JVM's log configuration is fixed when it starts): a WARN line of Spark's lands in
    <home>/logs/spark.log, and nothing of Spark's log reaches stderr."""
    home = tmp_path / "home"
    script = (
        "from runtime.project import Project\n"
        "spark = Project.open().spark()\n"
        "spark.sparkContext._jvm.org.apache.log4j.LogManager.getLogger('tidehouse.test')"
        ".warn('a warning for the log file')\n"
        "assert spark.range(3).count() == 3\n"
    )
    env = {**os.environ, "TIDEHOUSE_HOME": str(home), "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    log = (home / "logs" / "spark.log").read_text()
    assert " WARN test: a warning for the log file" in log
    assert "a warning for the log file" not in done.stderr
    assert not [line for line in done.stderr.splitlines() if " WARN " in line or " ERROR " in line], (
        done.stderr
    )


PARQUET_FLOW = """flow: pq
sources:
  rows: {format: parquet, path: data/pq, schema: "id int, note string"}
layers:
  ods:
    rows: {action: t_ingest, inputs: {raw: rows}}
"""


def test_a_failed_batch_says_why_in_sparks_words_once(spark, project_dir, test_flow, data_path, run_cli):
    """A Parquet file whose column type is not the source schema's: the batch's log line and the run's error
    named only Py4J's call (`Py4JJavaError: An error occurred while calling o188.getResult.`), and py4j
    logged the whole traceback with the Java stack again (206 lines on stderr in all)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (project_dir / "data" / "pq").mkdir(parents=True)
    pq.write_table(
        pa.table({"id": pa.array([1, 2], pa.int64()), "note": ["a", "b"]}), project_dir / "data/pq/a.parquet"
    )
    (project_dir / "flows" / "pq.yaml").write_text(PARQUET_FLOW)
    code, _, err = run_cli("flow", "trigger", "flows/pq.yaml", "--until-idle")
    assert code == 1, err
    lines = err.strip().splitlines()
    why = "[FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH] Encountered error while reading file "
    assert lines[-1].startswith(f"error: the query of table ods.rows failed: {why}"), err
    assert "a.parquet" in lines[-1] and lines[-1].endswith("[TH402]"), err
    assert "Traceback" not in err and "py4j" not in err and "\tat " not in err, err[:3000]
    if data_path == "driver":  # the batch function met it (on the executor path, Spark's tasks do)
        assert len(lines) == 2 and "batch 0 of ods.rows failed after " in lines[0] and why in lines[0], err
