"""A query stopped while its batch function waits on a Spark job: the stop, not a failure. Spark tells the two
apart by a regex over the batch function's whole Python traceback (StreamExecution.PROXY_ERROR) that recurses
once per character, so the interrupted call's Py4J error (8 KB of Java stack) overflowed the stream thread's
stack: every stop that met a running batch (Ctrl-C, the end of --duration, the demo's switch to its drain)
printed ~1,000 lines of a StackOverflowError and logged the batch as failed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from materializer.telemetry import BatchInterrupted, stop_made

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# Spark 4.3's StreamExecution.PROXY_ERROR, in Python's regex syntax
PROXY_ERROR = (
    r"py4j.protocol.Py4JJavaError: An error occurred while calling((.|\r\n|\r|\n)*)"
    r"(java.lang.InterruptedException|java.io.InterruptedIOException|java.nio.channels.ClosedByInterruptException)"
)


def test_a_stop_during_a_batch_stops_the_query_without_a_stack_overflow():
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    script = Path(__file__).with_name("_stop_mid_batch.py")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, str(script)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=root,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "StackOverflowError" not in proc.stderr, proc.stderr[:3000]
    lines = proc.stdout.splitlines()
    assert "EXCEPTION None" in lines and "ERROR None" in lines, proc.stdout  # a stop: no error for the table
    [logged] = [line for line in lines if line.startswith("LOG ") and "of dwd.t" in line]
    assert logged.startswith("LOG INFO batch 0 of dwd.t interrupted after "), logged


class _Py4JError(Exception):
    """Stands for py4j's Py4JJavaError, whose text comes from the JVM."""


def test_only_a_stop_made_py4j_error_is_shortened(monkeypatch):
    import py4j.protocol

    stack = "".join(f"\n\tat org.apache.spark.Frame{i}.run(Frame.scala:{i})" for i in range(300))

    class Fake(py4j.protocol.Py4JJavaError):
        def __init__(self, text):
            Exception.__init__(self, text)
            self.text = text

        def __str__(self):
            return self.text

    interrupted = Fake(
        "An error occurred while calling o44.collectToPython.\n: java.lang.InterruptedException" + stack
    )
    short = stop_made(interrupted)
    assert isinstance(short, BatchInterrupted) and len(str(short)) < 200
    assert str(short) == (
        "py4j.protocol.Py4JJavaError: An error occurred while calling o44.collectToPython.\n"
        ": java.lang.InterruptedException"
    )
    import re

    assert re.search(PROXY_ERROR, f"{type(short).__module__}.BatchInterrupted: {short}")  # Spark reads a stop
    cancelled = Fake(
        "An error occurred while calling o9.getResult.\n: org.apache.spark.SparkException: Job 3 cancelled "
        "part of cancelled job group 1aa59263" + stack
    )
    assert str(stop_made(cancelled)).endswith("Job 3 cancelled part of cancelled job group 1aa59263")
    nested = Fake(
        "An error occurred while calling o9.getResult.\n: org.apache.spark.SparkException: lost"
        + stack[:200]
        + "\nCaused by: java.lang.InterruptedException"
        + stack
    )
    assert str(stop_made(nested)).endswith(
        ": org.apache.spark.SparkException: lost\nCaused by: java.lang.InterruptedException"
    )
    # any other error keeps its whole text (a Python worker's TidehouseError is read out of it)
    assert (
        stop_made(
            Fake("An error occurred while calling o9.getResult.\n: java.lang.IllegalStateException" + stack)
        )
        is None
    )
    assert stop_made(RuntimeError("java.lang.InterruptedException")) is None
