"""A transient failure stays recoverable in every mode: a query restarted after a reconcile resumes."""

from __future__ import annotations

import random

import pytest

from tests.materializer._flowkit import ACTIONS, canon, make_events, oracle, write_batch, write_project

pytestmark = pytest.mark.spark


def test_a_query_restarted_after_a_transient_failure_resumes_after_a_reconcile(
    spark, project_dir, seed, monkeypatch
):
    """``--until-idle`` reconciles recomputed tables between drains; a query that then fails for a transient
    reason (a Python worker that could not connect back, common on a loaded machine) is restarted from its
    checkpoint, and the run still ends exact."""
    from materializer import runner as runner_mod
    from runtime.project import Project

    rng = random.Random(seed)
    # a top-N with a second condition is no shape the incremental strategies keep: recomputed, so reconciled
    top = ACTIONS["t_top.sql"].replace("WHERE rank <= :n", "WHERE rank <= :n AND events >= 1")
    path = write_project(project_dir, actions={**ACTIONS, "t_top.sql": top})
    lines = make_events(rng, 40)
    write_batch(project_dir, "part-0", lines)
    reconcile = runner_mod.FlowRunner.reconcile
    restarted: list[str] = []

    def reconcile_then_fail(self, t):
        written = reconcile(self, t)
        if not restarted:  # the first reconcile: stop a query, then restart it as after a transient failure
            self.queries["dwd.clicks"].stop()
            failure = RuntimeError("Python worker failed to connect back in time")
            assert self._restart_if_transient("dwd.clicks", failure)
            restarted.append("dwd.clicks")
        return written

    monkeypatch.setattr(runner_mod.FlowRunner, "reconcile", reconcile_then_fail)
    monkeypatch.setattr(runner_mod.time, "sleep", lambda _s: None)  # the restart's back-off
    project = Project.open()
    try:
        project.trigger(path, until_idle=True, spark=spark)
        assert restarted == ["dwd.clicks"]
        expected = oracle(lines)
        for table in ("ods.clicks", "dwd.clicks", "dws.user_activity", "ads.top_users"):
            assert canon(project.store.scan(table)) == expected[table], table
    finally:
        project.close()


class _Plan:
    flow = "f"
    tables = ()

    def table(self, name):
        return name


class _Config:
    storage_root = "/nonexistent"
    run_dir = "/nonexistent/run"

    def get(self, name):
        return 1000


class _Project:
    store = None
    lake = None
    config = _Config()


@pytest.mark.parametrize(
    "spark_text, batch_error, failure, restarted",
    [
        ("Python worker failed to connect back", None, None, True),  # in a source's Python worker
        (
            "FOREACH_BATCH_USER_FUNCTION_ERROR",
            "PythonException: Python worker exited unexpectedly",
            None,
            True,
        ),
        ("FOREACH_BATCH_USER_FUNCTION_ERROR", "ZeroDivisionError: division by zero", None, False),
        (
            "Python worker failed to connect back",
            "TH308 ...",
            "raised on purpose",
            False,
        ),  # our own error: never
    ],
)
def test_only_transient_failures_restart_a_query(monkeypatch, spark_text, batch_error, failure, restarted):
    """A transient failure met inside a batch function (its toArrow() ran Spark tasks) restarts the query as
    well as one met by Spark itself; a TidehouseError a batch raised on purpose never does."""
    from materializer import runner as runner_mod
    from runtime.core.errors import ErrorCode, TidehouseError

    started = []
    monkeypatch.setattr(runner_mod.time, "sleep", lambda _s: None)
    monkeypatch.setattr(runner_mod.FlowRunner, "start_query", lambda self, t: started.append(t))
    runner = runner_mod.FlowRunner(_Project(), _Plan(), spark=object())
    runner.stats["dwd.t"] = runner_mod.TableStats(
        error=batch_error, failure=TidehouseError(ErrorCode.STORAGE_RANGE, failure) if failure else None
    )
    assert runner._restart_if_transient("dwd.t", RuntimeError(spark_text)) is restarted
    assert started == (["dwd.t"] if restarted else [])
    if restarted:
        assert runner.stats["dwd.t"].error is None  # the status no longer shows the healed failure


def test_a_query_whose_start_meets_a_transient_failure_is_started_again(
    spark, project_dir, seed, monkeypatch
):
    """Starting a query can meet the same transient failure (over Spark Connect a start launches the
    server-side Python process of its batch function): it is started again after a back-off, and the run
    ends exact; any other failure to start is an error naming the table."""
    from pyspark.errors import PySparkException
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from materializer import runner as runner_mod
    from runtime.project import Project

    rng = random.Random(seed)
    path = write_project(project_dir)
    lines = make_events(rng, 30)
    write_batch(project_dir, "part-0", lines)
    start = DataStreamWriter.start
    refused: list[int] = []

    def start_once_refused(self, *args, **kwargs):
        if len(refused) < 2:  # the first query's first two starts
            refused.append(1)
            raise PySparkException(
                message="[STREAMING_PYTHON_RUNNER_INITIALIZATION_FAILURE] Python worker "
                "failed to connect back."
            )
        return start(self, *args, **kwargs)

    monkeypatch.setattr(DataStreamWriter, "start", start_once_refused)
    monkeypatch.setattr(runner_mod.time, "sleep", lambda _s: None)  # the back-off
    project = Project.open()
    try:
        project.trigger(path, until_idle=True, spark=spark)
        assert len(refused) == 2
        expected = oracle(lines)
        for table in ("ods.clicks", "dwd.clicks", "dws.user_activity", "ads.top_users"):
            assert canon(project.store.scan(table)) == expected[table], table
    finally:
        project.close()
