"""Waiting for rows inside ``latestOffset``: a hot-source query with nothing new does not end its trigger.

Spark's processing-time trigger asks every source for its latest offset at each interval. A query whose
upstream has nothing new pays a whole trigger for that answer: the driver JVM's planning of the empty batch,
the call into the source's Python runner and back, ten times a second at the flows' 100 ms triggers, for as
long as the flow runs (docs/architecture.md, "Waiting for rows"). So a stream source given ``idleWaitMs``
that finds no new rows polls the store every ``pollMs`` (a read of the hot log's end offsets) until rows
arrive, the wait is over, or its **awake file** exists, and only then answers: new rows are seen as soon as
a poll sees them (as often as the trigger polled), and Spark's trigger machinery runs once per wait instead
of once per interval. Measured on an idle four-query flow: a fifth less driver CPU.

The awake file is how the driver's ``processAllAvailable`` (a ``--until-idle`` drain) and a query's stop
stay prompt: the driver creates it before either, and a source that sees it does not wait (a drain needs one
trigger that finds nothing new; a stop waits for the trigger under way). The file lives on the driver's
disk, where the source's Python runner runs (classic Spark); over Spark Connect the runners run on the
server, so the materializer does not ask for waiting there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

POLL_MS = 100  # how often a waiting source polls when the option ``pollMs`` does not say


def wait_for_rows(
    arrived: Callable[[], bool], *, wait_s: float, poll_s: float, awake: str | None = None
) -> bool:
    """Poll ``arrived`` every ``poll_s`` for at most ``wait_s``; stop early when ``awake`` names a file that
    exists. True when rows arrived."""
    deadline = time.monotonic() + wait_s
    awake_file = Path(awake) if awake else None
    while True:
        if awake_file is not None and awake_file.exists():
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(poll_s, left))
        if arrived():
            return True
