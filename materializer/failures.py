"""What a failed query means: a transient failure of the machine (restart the query), or the error to raise
for its table: the TidehouseError its batch raised, one a Python worker raised in Spark, or Spark's own."""

from __future__ import annotations

import re

from materializer.strategies import TableStats
from runtime.core.errors import ErrorCode, TidehouseError
from runtime.spark.reasons import error_line

# failures that say nothing about the flow, only about the machine: the query is restarted
TRANSIENT = (
    "Python worker failed to connect back",
    "Python worker exited unexpectedly",
    "CANNOT_OPEN_SOCKET",
)
_RAISED = re.compile(r"TidehouseError: (?:[\w.]+: )?(.+?) \[(TH\d{3})\]")


def query_failure(name: str, stats: TableStats, exc) -> TidehouseError:
    """The error to raise for table ``name``'s failed query: the TidehouseError its batch raised (its code and
    location kept, the table named), else one raised in Spark, else QUERY_FAILED with Spark's first line."""
    if stats.failure is not None:
        cause = stats.failure
        return TidehouseError(
            cause.code,
            f"the query of table {name} failed: {cause.message}",
            location=cause.location,
            hint=cause.hint,
            params=cause.params,
        )
    raised = raised_in_spark(str(exc))  # e.g. by the tidehouse source in a Python worker
    if raised is not None:
        code, message = raised
        return TidehouseError(code, f"the query of table {name} failed: {message}")
    detail = stats.error or error_line(exc)
    return TidehouseError(ErrorCode.QUERY_FAILED, f"the query of table {name} failed: {detail}")


def stopped_elsewhere(name: str) -> TidehouseError:
    """The error for table ``name``'s query found stopped without an error while the run needs it: only the
    run stops its queries (at its end), so something else did — never a run that ends as if the table were
    up to date."""
    return TidehouseError(
        ErrorCode.QUERY_FAILED,
        f"the query of table {name} stopped without an error while the run needed it: "
        "something outside this run stopped it",
        hint="Spark stops a running query when another query with the same id (its checkpoint's) starts on "
        "the same Spark application (spark.sql.streaming.stopActiveRunOnRestart): is a checkpoint of this "
        "flow copied from another table, or is another program running it?",
    )


def raised_in_spark(text: str) -> tuple[ErrorCode, str] | None:
    """(code, message) of a TidehouseError a Python worker raised, as Spark's error text carries it."""
    matches = _RAISED.findall(text)
    if not matches:
        return None
    message, code = matches[-1]
    try:
        return ErrorCode(code), message
    except ValueError:
        return None
