"""The wrapper around every micro-batch function: its error kept for the status and the final message, and
the one retry a race with retention needs.

A query that follows a primary-key table's changelog first asks whether its micro-batch starts below the
input's hot log (:func:`materializer.strategies.behind_retention`): if so it resyncs from the input's state
(docs/architecture.md, "History"). Retention runs meanwhile (tiering in this process or another), so it may
trim the range between that answer and the read, which then raises
:class:`~runtime.lake.history.ChangelogTrimmed` — on the driver path in this function, on the executor path
inside a Spark task, whose error names the class. The batch wrote nothing of its own yet (reads come first;
writes are idempotent under the batch's ``(writer, seq)`` anyway), so it runs once more, now behind
retention: it resyncs. A second such error is the batch's failure.
"""

from __future__ import annotations

import logging

from materializer.strategies import QueryContext
from materializer.telemetry import BatchInterrupted, batch_scope
from runtime.core.errors import TidehouseError
from runtime.lake.history import ChangelogTrimmed
from runtime.spark.reasons import error_line

log = logging.getLogger(__name__)


def guarded(fn, ctx: QueryContext):
    """Remember a batch function's error for the status and the final message, then let Spark fail."""

    def run(batch_df, batch_id):
        try:
            with batch_scope(ctx, batch_id):  # phase seconds into the stats; a log line naming the batch
                try:
                    _once_more_if_trimmed(fn, ctx, batch_df, batch_id)
                finally:
                    if ctx.handoff is not None:  # the batch's views are done with the files
                        ctx.handoff.release()
        except TidehouseError as exc:
            ctx.stats.error = exc.render()
            ctx.stats.failure = exc
            raise
        except BatchInterrupted:  # by its query's stop: not an error of the table
            raise
        except Exception as exc:
            ctx.stats.error = error_line(exc)
            raise

    return run


def trimmed_during_read(exc: BaseException) -> bool:
    """Whether ``exc`` is a changelog read that retention trimmed: raised here, or in a Spark task."""
    return isinstance(exc, ChangelogTrimmed) or (
        not isinstance(exc, TidehouseError) and ChangelogTrimmed.__name__ in str(exc)
    )


def _once_more_if_trimmed(fn, ctx: QueryContext, batch_df, batch_id: int) -> None:
    try:
        fn(batch_df, batch_id)
    except BatchInterrupted:
        raise
    except Exception as exc:
        if not trimmed_during_read(exc):
            raise
        log.info(
            "%s: retention trimmed an input's changelog while batch %d read it; the batch runs again, "
            "behind retention (a resync)",
            ctx.table.name,
            batch_id,
            extra={"table": ctx.table.name},
        )
        if ctx.handoff is not None:
            ctx.handoff.release()
        fn(batch_df, batch_id)
