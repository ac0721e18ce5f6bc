"""Ctrl-C of a ``tidehouse flow trigger`` that is a Spark Connect client (``spark.remote``): no SparkContext
starts in the client, so its graceful SIGINT handler is never replaced; the first Ctrl-C stops the run with
the final report (exit 0), as on a classic master (tests/materializer/test_mat_ctrl_c.py). The flow's
queries on the server stop with it (a file written after the stop is not read), and the next run resumes
from the stopped one's checkpoints to the batch oracle."""

from __future__ import annotations

import random
import signal
import time

import pytest

from tests._support import scale
from tests.cluster._clusterkit import assert_oracle, cli, set_spark
from tests.materializer._flowkit import make_events, write_batch, write_project
from tests.materializer._killkit import trigger_process, wait_for_first_aggregation

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.cluster]


@pytest.mark.skipif(scale(True, False), reason="TIDEHOUSE_SCALE=full: Ctrl-C over Spark Connect (~1 min)")
def test_ctrl_c_stops_a_trigger_over_connect_gracefully(connect_server, project_dir, home, seed):
    from runtime.storage import open_store

    set_spark(project_dir, {"remote": connect_server.url})
    write_project(project_dir)
    rng = random.Random(seed)
    lines = make_events(rng, 40)
    write_batch(project_dir, "part-0", lines)
    with trigger_process(project_dir, home) as proc:
        store = open_store(str(home / "hot"))
        wait_for_first_aggregation(store)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0
    log = (project_dir.parent / "trigger.log").read_text(errors="replace")
    assert "SIGINT: stopping gracefully (Ctrl-C again: at once)" in log, log[-3000:]
    assert "flow testflow: duration 300.0s finished in " in log and "aborted" not in log, log[-3000:]
    assert "\n  ods.clicks: " in log and "\n  dws.user_activity: " in log, log[-3000:]

    stopped_at = store.end_offsets("ods.clicks")
    more = make_events(rng, 30)
    write_batch(project_dir, "part-1", more)
    time.sleep(5)  # a query left running on the server reads a new file within its 100 ms trigger
    assert store.end_offsets("ods.clicks") == stopped_at, "a query kept running on the Connect server"
    done = cli(project_dir, home, "flow", "trigger", "flows/testflow.yaml", "--until-idle")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    from runtime.project import Project

    project = Project.open()
    try:
        assert_oracle(project, lines + more, "after the run that followed the Ctrl-C")
    finally:
        project.close()
