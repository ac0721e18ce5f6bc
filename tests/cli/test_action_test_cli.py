"""`tidehouse test`: exit codes, the diff of a failing case, errors of malformed test files, JSON, CSV."""

from __future__ import annotations

import json
import shutil

import pytest

from tests._support import REPO
from tests.registry._reg_helpers import dedent, marked_line

SHIPPED = REPO / "actions"


def copy_actions(project_dir, *names: str) -> None:
    for name in names:
        shutil.copy(SHIPPED / f"{name}.sql", project_dir / "actions" / f"{name}.sql")


def write(project_dir, name: str, text: str) -> str:
    (project_dir / "actions" / name).write_text(dedent(text))
    return f"actions/{name}"


WINDOWS = """
    inputs:
      events: {schema: "user_id string, ts timestamp"}
    primary_key: [window_start, user_id]
    cases:
      wrong_expectation:
        params: {window: 30 seconds}
        given:
          events:
            - {user_id: u1, ts: "2024-05-01 12:00:00"}
            - {user_id: u1, ts: "2024-05-01 12:00:10"}
        expect:
          - {window_start: "2024-05-01 12:00:00", user_id: u1, events: 3}
      late_row:
        params: {window: 30 seconds, watermark_seconds: 10}
        given:
          events:
            runs:                                  # the watermark a run sets holds from the run after next
              - [{user_id: u1, ts: "2024-05-01 12:01:00"}]
              - [{user_id: u1, ts: "2024-05-01 12:01:01"}]
              - [{user_id: u1, ts: "2024-05-01 12:00:05"}]
        expect:
          - {window_start: "2024-05-01 12:01:00", user_id: u1, events: 2}
          - {window_start: "2024-05-01 12:00:00", user_id: u1, events: 1}
"""

COUNTS = """
    inputs:
      rows: {schema: "k string"}
    primary_key: [k]
    cases:
      counts:
        params: {key: k}
        given: {rows: [{k: a}, {k: a}]}
        expect: [{k: a, events: 2}]
      null_key:
        params: {key: k}
        given: {rows: [{k: a}, {}]}
        expect: [{k: a, events: 1}, {k: null, events: 1}]
"""


@pytest.mark.spark
@pytest.mark.slow
def test_failing_cases_print_their_diff_and_exit_1(spark, run_cli, project_dir):
    copy_actions(project_dir, "windowed_count", "count_by_key")
    write(project_dir, "windowed_count.test.yaml", WINDOWS)
    write(project_dir, "count_by_key.test.yaml", COUNTS)
    code, out, err = run_cli("test")  # every test file under the project's actions/
    assert code == 1, out + err
    lines = out.splitlines()
    marks = {line.split()[1]: line.split()[0] for line in lines if line.startswith("  ") and "s  " in line}
    assert marks == {"counts": "PASS", "null_key": "ERROR", "wrong_expectation": "FAIL", "late_row": "FAIL"}

    # the batch result differs from the expected rows: both sides as aligned tables
    block = out[out.index("FAIL: actions/windowed_count.test.yaml::wrong_expectation") :]
    assert "(actions/windowed_count.test.yaml:5:3: cases.wrong_expectation)" in block.splitlines()[0]
    assert block.splitlines()[1:10] == [
        "  batch result vs expected rows: 1 missing, 1 unexpected",
        "    missing (in expected, not in batch):",
        "      window_start         user_id  events",
        "      -------------------  -------  ------",
        "      2024-05-01 12:00:00  u1       3",
        "    unexpected (in batch, not in expected):",
        "      window_start         user_id  events",
        "      -------------------  -------  ------",
        "      2024-05-01 12:00:00  u1       2",
    ]
    # the stream drops a row later than the watermark: the batch has it, the hot and the lake table do not
    block = out[out.index("FAIL: actions/windowed_count.test.yaml::late_row") :]
    assert "  stream: hot table after run 3/3 vs batch: 1 missing, 0 unexpected" in block
    assert "  stream: lake table after run 3/3 vs batch: 1 missing, 0 unexpected" in block
    assert "      2024-05-01 12:00:00  2024-05-01 12:00:30  u1       1" in block
    assert "    note: the plan names a difference by design: watermark:" in block
    # a NULL key cannot be written to a primary-key table: that case errs, the others ran without it
    block = out[out.index("ERROR: actions/count_by_key.test.yaml::null_key") :]
    # its NULL came in run 2 (count_by_key is agg_log on the driver path: the GROUP BY column is named)
    assert "stream run 2/3:" in block and "GROUP BY column" in block and "[TH306]" in block
    assert lines[-1].startswith("4 cases in 2 files: 1 passed, 2 failed, 1 error in ")
    assert "stream: run 3/3 (--until-idle" in err  # progress goes to stderr


@pytest.mark.spark
def test_batch_only_with_csv_fixtures_one_case_and_json(spark, run_cli, project_dir):
    copy_actions(project_dir, "top_n")
    (project_dir / "actions" / "users.csv").write_text("user_id,events\nu1,3\nu2,5\nu3,\n")
    (project_dir / "actions" / "top.csv").write_text("rank,user_id,events\n1,u2,5\n2,u1,3\n")
    path = write(
        project_dir,
        "top_n.test.yaml",
        """
        inputs:
          rows: {schema: "user_id string, events bigint", primary_key: [user_id]}
        primary_key: [rank]
        cases:
          from_csv:
            params: {tiebreak: user_id, n: 2}
            given: {rows: {csv: users.csv}}
            expect: {csv: top.csv}
          other:
            params: {tiebreak: user_id, n: 1}
            given: {rows: []}
            expect: [{rank: 1}]
        """,
    )
    code, out, err = run_cli("test", "--batch-only", "--format", "json", f"{path}::from_csv")
    assert code == 0, out + err
    data = json.loads(out)
    assert (data["ok"], data["passed"], data["stream"]) == (True, 1, None)
    (case,) = data["cases"]
    assert (case["id"], case["status"], case["rows"], case["strategy"]) == (
        f"{path}::from_csv",
        "pass",
        2,
        None,
    )
    assert err == ""  # no progress lines with --format json

    code, out, _ = run_cli("test", "--batch-only", path)
    assert code == 1 and "FAIL   other" in out and "0 missing, 0 unexpected" not in out
    assert "    missing (in expected, not in batch):" in out


@pytest.mark.spark
def test_what_the_action_cannot_run_exits_2_at_its_place(spark, run_cli, project_dir):
    copy_actions(project_dir, "count_by_key", "top_n")
    text = """
        inputs:
          rows: {schema: "k string"}
        primary_key: [k]
        cases:
          no_such_column:
            params: {key: kk}
            given: {rows: [{k: a}]}
            expect: [{k: a}]
          wrong_output_column:
            params: {key: k}
            given: {rows: [{k: a}]}
            expect:
              - {k: a, count: 1} #<
    """
    write(project_dir, "count_by_key.test.yaml", text)
    code, _, err = run_cli("test", "--batch-only")
    assert code == 2
    lines = err.splitlines()
    # the SQL does not analyse: Spark's error at the action file's line, naming the case
    assert any(
        line.startswith("actions/count_by_key.sql:") and "kk" in line and "[TH223]" in line for line in lines
    ), err
    # the expected rows name a column the output lacks
    line = marked_line(dedent(text))
    assert any(
        line_.startswith(f"actions/count_by_key.test.yaml:{line}:") and "no column 'count'" in line_
        for line_ in lines
    ), err


def test_a_malformed_test_file_exits_2_at_its_line_without_spark(run_cli, project_dir):
    copy_actions(project_dir, "top_n")
    text = """
        inputs:
          rows: {schema: "id string, events bigint"}
        cases:
          one:
            params: {n: ten} #<
            given: {rows: []}
            expect: []
    """
    path = write(project_dir, "top_n.test.yaml", text)
    code, out, err = run_cli("test", path)
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {path}:{marked_line(dedent(text))}:")
    assert "cases.one.params.n: parameter n: expected an integer (int), got string 'ten' [TH235]" in err

    code, _, err = run_cli("test", "nowhere/")
    assert code == 2 and "nowhere/: no such file or folder" in err
    # the action's own file was read as a test file: "invalid YAML: mapping values are not allowed here"
    code, _, err = run_cli("test", "actions/top_n.sql")
    assert (code, err) == (
        2,
        "error: actions/top_n.sql: an action file, not a test file (its tests are in "
        "actions/top_n.test.yaml) [TH213]\n",
    )
    (project_dir / "actions" / "top_n.test.yaml").unlink()
    code, _, err = run_cli("test")
    assert code == 2 and "the folder holds no action tests" in err


@pytest.mark.spark
def test_an_error_of_the_actions_sql_is_told_once(tmp_path):
    """PySpark logs an error with a query context (`[DIVIDE_BY_ZERO]`) as a JSON line of its own on stderr
    before the command reports it: a real process, whose stderr is PySpark's."""
    import os
    import subprocess
    import sys

    (tmp_path / "actions").mkdir()
    (tmp_path / "tidehouse.yaml").write_text("")
    write(
        tmp_path,
        "div.sql",
        "/*---\nname: div\ndescription: a ratio\ninputs: [rows]\n---*/\nSELECT a / b AS r FROM rows\n",
    )
    write(
        tmp_path,
        "div.test.yaml",
        """
        inputs:
          rows: {schema: "a int, b int"}
        cases:
          zero:
            given:
              rows: [{a: 1, b: 0}]
            expect: [{r: 1.0}]
        """,
    )
    done = subprocess.run(
        [sys.executable, "-c", "from runtime.cli import run; run()", "test", "--batch-only"],
        cwd=tmp_path,
        env={**os.environ, "TIDEHOUSE_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "  ArithmeticException: [DIVIDE_BY_ZERO] Division by zero." in done.stdout, done.stdout
    assert "DIVIDE_BY_ZERO" not in done.stderr and "QueryContextLogger" not in done.stderr, done.stderr
