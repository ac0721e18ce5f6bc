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
    def __init__(
        self, seconds: float, release: threading.Event, fails: bool = False, started: list | None = None
    ) -> None:
        self.seconds, self.release, self.fails, self.started = seconds, release, fails, started

    def processAllAvailable(self) -> None:  # Spark's name
        if self.started is not None:
            self.started.append(self)
        self.release.wait(self.seconds)
        if self.fails:
            raise StreamingQueryException(message="boom")


def test_the_waits_run_side_by_side_and_each_failure_is_returned():
    """The waits are released only once all three are waiting (or after 10 s): waits one after another would
    find one waiting, not three. No bound on the elapsed time, which a busy machine stretches."""
    release, started, waiting_at_release = threading.Event(), [], []

    def release_when_all_wait() -> None:
        deadline = time.monotonic() + 10
        while len(started) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        waiting_at_release.append(len(started))
        release.set()

    queries = {
        "a": _Query(30, release, started=started),
        "b": _Query(30, release, fails=True, started=started),
        "c": _Query(30, release, started=started),
    }
    threading.Thread(target=release_when_all_wait, daemon=True).start()
    done = drain(queries, ["a", "b", "c"])
    assert waiting_at_release == [3], "the waits ran one after another"
    assert list(done) == ["a", "b", "c"]
    assert done["a"] is None and done["c"] is None
    assert isinstance(done["b"], StreamingQueryException)
    assert drain({"a": _Query(0.0, release)}, ["a"]) == {"a": None}


@pytest.fixture
def interruptible():
    """Python's own SIGINT handler, also where the shell started this process with SIGINT ignored (bash does
    that to a simple command it runs with `&`): the test is about what drain does with an interrupt."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_an_interrupt_leaves_at_once(interruptible):
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
