"""A transient failure stays recoverable in every mode: a query restarted after a reconcile resumes."""

from __future__ import annotations

import random

import pytest
from conftest import canon, make_events, oracle, write_batch, write_project

pytestmark = pytest.mark.spark


def test_a_query_restarted_after_a_transient_failure_resumes_after_a_reconcile(spark, project_dir, seed,
                                                                                monkeypatch):
    """``--until-idle`` reconciles recomputed tables between drains; a query that then fails for a transient
    reason (a Python worker that could not connect back, common on a loaded machine) is restarted from its
    checkpoint, and the run still ends exact."""
    from materializer import runner as runner_mod
    from materializer import trigger
    from runtime.project import Project

    rng = random.Random(seed)
    path = write_project(project_dir)
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
        trigger(project, path, until_idle=True, spark=spark)
        assert restarted == ["dwd.clicks"]
        expected = oracle(lines)
        for table in ("ods.clicks", "dwd.clicks", "dws.user_activity", "ads.top_users"):
            assert canon(project.store.scan(table)) == expected[table], table
    finally:
        project.close()
