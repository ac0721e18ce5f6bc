"""``--until-idle`` waits for a generation's queries side by side (materializer/drain.py), without Spark."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from pyspark.errors import StreamingQueryException

from materializer.drain import drain


class _Query:
    def __init__(self, seconds: float, release: threading.Event, fails: bool = False) -> None:
        self.seconds, self.release, self.fails = seconds, release, fails

    def processAllAvailable(self) -> None:  # Spark's name
        self.release.wait(self.seconds)
        if self.fails:
            raise StreamingQueryException(message="boom")


def test_the_waits_run_side_by_side_and_each_failure_is_returned():
    release = threading.Event()
    queries = {"a": _Query(0.4, release), "b": _Query(0.4, release, fails=True), "c": _Query(0.4, release)}
    began = time.monotonic()
    done = drain(queries, ["a", "b", "c"])
    took = time.monotonic() - began
    assert list(done) == ["a", "b", "c"]
    assert done["a"] is None and done["c"] is None
    assert isinstance(done["b"], StreamingQueryException)
    assert took < 1.0, f"{took:.2f} s: the waits ran one after another (3 x 0.4 s)"
    assert drain({"a": _Query(0.0, release)}, ["a"]) == {"a": None}


def test_an_interrupt_leaves_at_once():
    release = threading.Event()
    queries = {"a": _Query(30, release), "b": _Query(30, release)}
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    began = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            drain(queries, ["a", "b"])
        assert time.monotonic() - began < 5
    finally:
        release.set()  # the callers stop their queries: the waits end
        timer.cancel()
