"""A query's stream of a hot table: the ``tidehouse`` source with this project's options."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

IDLE_WAIT_S = 1.0  # a query with nothing new waits this long for rows inside its trigger (idlewait)


@dataclass(frozen=True)
class Waiting:
    """A stream that waits for rows inside its trigger (:mod:`runtime.spark.idlewait`): the query's trigger
    interval (the stream polls the store as often) and its awake file."""

    trigger_s: float
    awake: Path

    def options(self) -> dict[str, str]:
        """The source options (``tidehouse`` and ``tidehouse_files``); none when the trigger is as long as
        the wait."""
        if self.trigger_s >= IDLE_WAIT_S:
            return {}
        return {
            "idleWaitMs": str(round(IDLE_WAIT_S * 1000)),
            "pollMs": str(max(10, round(self.trigger_s * 1000))),
            "awakeFile": str(self.awake),
        }


def hot_stream(
    session,
    config,
    table: str,
    columns: list[str] | None = None,
    *,
    max_rows: int | None = None,
    waiting: Waiting | None = None,
):
    """A stream of table ``table`` of the project of ``config`` (its tasks read the lake below the hot
    log's first offsets); ``max_rows`` caps the rows of one micro-batch (admission control). ``waiting``:
    for the only source of a query that keeps no Spark state, whose trigger is shorter than
    :data:`IDLE_WAIT_S`."""
    reader = (
        session.readStream.format("tidehouse")
        .option("home", str(config.home))
        .option("project", str(config.project_dir))
        .option("table", table)
    )
    if columns:
        reader = reader.option("columns", ",".join(columns))
    if max_rows:
        reader = reader.option("maxRowsPerTrigger", str(max_rows))
    for key, value in (waiting.options() if waiting is not None else {}).items():
        reader = reader.option(key, value)
    return reader.load()
