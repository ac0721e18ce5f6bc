"""Ctrl-C (SIGINT) of a running ``tidehouse flow trigger`` stops it gracefully, as SIGTERM does: exit 0 with
the final report; a second Ctrl-C leaves at once. PySpark's SparkContext replaced the trigger's SIGINT handler
with its own when Spark started, so Ctrl-C aborted the run (exit 130, ``aborted``, no report)."""

from __future__ import annotations

import random
import signal

import pytest

from tests.materializer._flowkit import make_events, write_batch, write_project
from tests.materializer._killkit import trigger_process, wait_for_first_aggregation

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_ctrl_c_stops_a_running_trigger_gracefully(project_dir, home, seed):
    from runtime.storage import open_store

    write_project(project_dir)
    write_batch(project_dir, "part-0", make_events(random.Random(seed), 40))
    with trigger_process(project_dir, home) as proc:
        store = open_store(str(home / "hot"))
        wait_for_first_aggregation(store)
        proc.send_signal(signal.SIGINT)  # the trigger alone, as a terminal's Ctrl-C reaches the foreground
        assert proc.wait(timeout=120) == 0
    log = (project_dir.parent / "trigger.log").read_text(errors="replace")
    assert "SIGINT: stopping gracefully (Ctrl-C again: at once)" in log, log[-3000:]
    assert "flow testflow: duration 300.0s finished in " in log and "aborted" not in log, log[-3000:]
    assert "\n  ods.clicks: " in log and "\n  dws.user_activity: " in log, log[-3000:]  # the report's lines


def test_a_first_ctrl_c_stops_gracefully_and_a_second_at_once():
    import threading

    from runtime.cli.run import stop_handler

    stop = threading.Event()
    handle = stop_handler(stop)
    handle(signal.SIGTERM, None)
    assert stop.is_set()
    handle(signal.SIGTERM, None)  # SIGTERM again: still the graceful stop
    with pytest.raises(KeyboardInterrupt):
        handle(signal.SIGINT, None)
    first = threading.Event()
    stop_handler(first)(signal.SIGINT, None)  # a first Ctrl-C: graceful
    assert first.is_set()
