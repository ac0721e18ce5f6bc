"""How a table is kept equal to the batch result of its SQL: the strategy decision.

The decision is a pure function of facts about the analysed SQL (:class:`SqlShape`, read from Spark's
analysed logical plan by :mod:`materializer.analyze`) and of the kinds of the table's inputs and output, so
it is unit-tested without Spark.

Strategies (the correctness oracle for each is "the batch result of the SQL over the complete input"):

``append``
    Stateless SQL (projection, filter, explode, lookup joins) over exactly one append-only input (a source or
    a log table). Each micro-batch runs the SQL in batch mode over the new rows and appends (log output) or
    upserts (primary-key output) the result. Primary-key inputs are read as *lookups*: their current state
    at the micro-batch (processing-time semantics, like Flink's lookup join) — only when the table says
    ``lookups: processing_time``; without it a log table may not read primary-key tables, and a primary-key
    table is ``join_log`` or ``recompute`` (batch semantics).
``aggregate``
    A top-level aggregation over one append-only input into a primary-key table: a Spark streaming
    aggregation (output mode ``update``) whose changed groups are upserted per micro-batch. Only when Spark
    accepts the SQL as such (``SqlShape.streaming_refusal`` is Spark's own check, run at plan time): session
    windows, for one, cannot be updated in place, so they are recomputed.
``agg_log``
    On the driver data path, the same SQL when it is a GROUP BY of plain input columns with ``count``,
    ``sum``, ``avg``, ``min``, ``max``, ``count(DISTINCT)`` of plain input columns and a HAVING of comparisons
    (:mod:`materializer.incremental.logfacts` says which types): each micro-batch is pre-aggregated with
    Arrow in the driver and added to per-group partials in the hot store, without a Spark job. On the
    executor path it stays ``aggregate`` (the state in Spark's state store, the rows in the executors).
``changelog``
    Stateless SQL over one primary-key table's changelog into a primary-key table: before-images are
    evaluated to delete the rows they produced, after-images to upsert — so an update that no longer passes
    a filter deletes the downstream row.
``join_log``
    An equi-join (as ``join_changelog`` recognizes it) of one log table and one primary-key table into a
    primary-key table, with batch semantics: kept as ``join_changelog`` keeps a join of two primary-key
    tables, the log's rows being images keyed by their place in the log — so a change of the primary-key
    table revises the joined rows already written (no ``lookup`` difference).
``topn`` / ``agg_changelog`` / ``join_changelog``
    A top-N (global or per PARTITION BY), or a GROUP BY (or a global aggregate) with retractable aggregates
    and a typed HAVING, over one primary-key table, or an equi-join of two primary-key tables: kept
    incrementally with state in the hot store (docs/architecture.md, "Incremental maintenance";
    :mod:`materializer.incremental`). Recognized from plan facts only; anything else is recomputed.
``recompute``
    Anything else into a primary-key table (top-N, other joins of primary-key tables, aggregations over a
    changelog, HAVING filters, window functions): each micro-batch that brings changes re-evaluates the SQL
    over the current state of every input and writes the difference. Always correct; costs O(input) per
    micro-batch — fine for serving tables.

Anything that fits none of these is refused with ``SHAPE_UNSUPPORTED`` saying why and what to write instead.

Where a strategy keeps a table different from the batch result *by design*, :func:`batch_exceptions` names
the difference (``lookup``, ``watermark``) and the plan carries it, so ``tidehouse flow plan`` shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from materializer.incremental.facts import GroupAggregate, TopN
from materializer.incremental.joinfacts import EquiJoin
from materializer.incremental.keyfacts import AggregateKeys, RowKeys
from materializer.plan import BatchException
from runtime.core.durations import format_duration
from runtime.core.errors import ErrorCode, Location, TidehouseError

Strategy = Literal[
    "append",
    "aggregate",
    "agg_log",
    "changelog",
    "topn",
    "agg_changelog",
    "join_changelog",
    "join_log",
    "recompute",
]
InputKind = Literal["source", "log", "primary_key"]

APPEND_ONLY: frozenset[str] = frozenset({"source", "log"})
# logical plan nodes that need state across rows of different micro-batches
STATEFUL_NODES = frozenset(
    {
        "Aggregate",
        "Window",
        "Distinct",
        "GlobalLimit",
        "LocalLimit",
        "Tail",
        "Offset",
        "Deduplicate",
        "DeduplicateWithinWatermark",
        "Intersect",
        "Except",
        "WindowGroupLimit",
        "Sort",
    }
)
PASS_THROUGH = frozenset({"Project", "SubqueryAlias", "View", "EventTimeWatermark"})


@dataclass(frozen=True)
class SqlShape:
    """Facts about an analysed query that decide its strategy."""

    nodes: frozenset[str]  # names of every logical plan node
    top: str  # first node below the top Project/SubqueryAlias chain, e.g. "Aggregate", "Filter"
    deterministic: bool = True
    nondeterministic_hint: str = ""  # e.g. "rand()"
    distinct_aggregate: bool = False
    has_limit: bool = False
    identity: bool = False  # the SQL returns its one input unchanged (same columns, order and types)
    session_window: bool = False  # groups by session_window(...)
    # (event-time column, delay in seconds) of WATERMARK clauses
    watermarks: tuple[tuple[str, float], ...] = ()
    # why Spark refuses the SQL as a streaming aggregation in update mode ("": it accepts it, or it was not
    # asked because the SQL is no aggregation candidate)
    streaming_refusal: str = ""
    # shapes kept incrementally over a primary-key input (materializer/incremental/facts.py), else None
    topn: TopN | None = None
    group_aggregate: GroupAggregate | None = None
    # group_aggregate when it reads one log table whose column types, and the table's primary key and
    # expectations, let ``agg_log`` keep it (materializer/incremental/logfacts.py), else None
    log_aggregate: GroupAggregate | None = None
    join: EquiJoin | None = None
    join_refusal: str = ""  # why a join near the top is not kept incrementally ("": no such join)
    # why a GROUP BY's HAVING or literal columns are not kept incrementally ("": they are, or there are none)
    having_refusal: str = ""
    # which output columns identify the groups of the Aggregate at the top, if there is one there
    aggregate_keys: AggregateKeys | None = None
    # which output columns are input columns, for a row-wise query over one input (else None)
    row_keys: RowKeys | None = None
    # why the primary key cannot follow a primary-key input's changelog row by row ("": it can, or unknown)
    row_key_refusal: str = ""

    @property
    def stateful(self) -> frozenset[str]:
        return self.nodes & STATEFUL_NODES

    @property
    def sort_only(self) -> bool:
        """ORDER BY without LIMIT (the only stateful node is a Sort)."""
        return self.stateful == {"Sort"}


@dataclass(frozen=True)
class Decision:
    strategy: Strategy
    reason: str


def _refuse(table: str, why: str, fix: str, location: Location | None) -> TidehouseError:
    return TidehouseError(
        ErrorCode.SHAPE_UNSUPPORTED, f"table {table} cannot be maintained: {why}", location=location, hint=fix
    )


def decide(
    table: str,
    shape: SqlShape,
    inputs: Sequence[tuple[str, InputKind]],
    *,
    primary_key: Sequence[str] = (),
    merge_engine: str = "last_row",
    location: Location | None = None,
    data_path: str = "driver",
    lookups_at: str | None = None,
    lookups_location: Location | None = None,
) -> Decision:
    """Pick the strategy for ``table`` or raise ``TidehouseError(SHAPE_UNSUPPORTED)``. ``data_path``
    (:func:`materializer.plan.data_path_of`): where micro-batches will move their rows. ``lookups_at``:
    the table's ``lookups`` setting — ``"processing_time"`` when the flow asks for processing-time lookups of
    its primary-key inputs (at ``lookups_location``); ``None`` keeps batch semantics."""
    if not shape.deterministic:
        raise _refuse(
            table,
            f"its SQL calls a non-deterministic function{shape.nondeterministic_hint}, so a "
            "replayed micro-batch or a re-run would give different rows than the batch result",
            "compute such values upstream in the source data, or derive them deterministically "
            "(e.g. xxhash64 of columns)",
            location,
        )
    appends = sorted(name for name, kind in inputs if kind in APPEND_ONLY)
    lookups = sorted(name for name, kind in inputs if kind == "primary_key")
    if not inputs:
        raise _refuse(
            table, "its SQL reads no input", "name the inputs the SQL reads in the action header", location
        )
    stateful = shape.stateful
    is_pk = bool(primary_key)
    sources = sorted(name for name, kind in inputs if kind == "source")
    if sources and (stateful - {"Sort"} or len(inputs) > 1):
        raise _refuse(
            table,
            f"it reads source {sources[0]} with SQL that is not a plain projection/filter of "
            "one source (sources are read as a stream of raw records, with malformed ones "
            "quarantined)",
            "ingest the source into an ODS log table first, and aggregate or join in a later table",
            location,
        )

    if lookups_at is not None:
        decision = _processing_time(table, shape, appends, lookups, lookups_location or location)
        if not is_pk:
            _decide_log(table, shape, appends, [], location)  # the refusals of any log table
        return decision
    if not is_pk:
        return _decide_log(table, shape, appends, lookups, location)

    if merge_engine != "last_row" and (stateful - {"Sort"} or len(appends) != 1):
        raise _refuse(
            table,
            f"merge engine '{merge_engine}' combines the rows a stateless query writes, but "
            "this SQL is not stateless over one append-only input",
            "use merge_engine: last_row (the default), or move the aggregation into the merge "
            "engine and keep the SQL a plain projection",
            location,
        )

    if merge_engine != "last_row" and lookups:
        raise _refuse(
            table,
            f"merge engine '{merge_engine}' combines the rows a stateless query writes, but this one "
            f"reads primary-key tables ({', '.join(lookups)}) whose later changes would have to revise "
            "rows already merged",
            "set 'lookups: processing_time' to join each row with them as they are when its micro-batch "
            "runs, or use merge_engine: last_row (the join is then kept with batch semantics)",
            location,
        )
    if (
        merge_engine == "last_row"  # the join's rows replace the output's; another engine would merge them
        and len(appends) == 1
        and len(lookups) == 1
        and shape.join is not None
        and {shape.join.left, shape.join.right} == {appends[0], lookups[0]}
    ):
        return Decision(
            "join_log",
            f"{shape.join.describe()}, with batch semantics: per join key, the rows of {appends[0]} and of "
            f"{lookups[0]} kept in the hot store; the SQL run over the touched join keys' rows before and "
            f"after each micro-batch, so a change of {lookups[0]} revises the joined rows already written; "
            "O(rows of the touched join keys) per micro-batch",
        )
    if not (stateful - {"Sort"}) and len(appends) == 1 and not lookups:
        return Decision("append", f"stateless over {appends[0]}; upserts each micro-batch's rows")
    if data_path == "driver" and shape.log_aggregate is not None and len(appends) == 1 and not lookups:
        return Decision(
            "agg_log",
            f"{shape.log_aggregate.describe()} over {appends[0]}: each micro-batch's rows pre-aggregated "
            "with Arrow in the driver and added to per-group partials kept in the hot store; no Spark job "
            "per micro-batch (driver data path)",
        )
    if (
        shape.top == "Aggregate"
        and not _key_refusal(shape, primary_key, whole=True)
        and len(appends) == 1
        and not lookups
        and stateful == {"Aggregate"}
        and not shape.distinct_aggregate
        and "Join" not in shape.nodes
        and not shape.session_window
        and not shape.streaming_refusal
    ):
        return Decision(
            "aggregate",
            f"streaming aggregation over {appends[0]} (output mode update), "
            "changed groups upserted per micro-batch",
        )
    if (
        not (stateful - {"Sort"})
        and len(lookups) == 1
        and not appends
        and "Join" not in shape.nodes
        and not shape.row_key_refusal
    ):
        return Decision(
            "changelog", f"follows the changelog of {lookups[0]}: before-images delete, after-images upsert"
        )
    if len(lookups) == 1 and not appends and shape.topn is not None:
        return Decision(
            "topn",
            f"{shape.topn.describe()} over the changelog of {lookups[0]}: a buffer of the best rows kept in "
            "the hot store, the SQL run over it; O(change) per micro-batch",
        )
    if (
        len(lookups) == 1
        and not appends
        and shape.group_aggregate is not None
        and not _key_refusal(shape, primary_key, whole=False)
    ):
        return Decision(
            "agg_changelog",
            f"{shape.group_aggregate.describe()} over the changelog of {lookups[0]}: per-group accumulators "
            "kept in the hot store, updated with each changed key's image; O(change) per micro-batch",
        )
    if (
        len(lookups) == 2
        and not appends
        and shape.join is not None
        and {shape.join.left, shape.join.right} == set(lookups)
    ):
        return Decision(
            "join_changelog",
            f"{shape.join.describe()}, following both changelogs: per join key, the rows of each side kept "
            "in the hot store; the SQL run over the changed keys' rows before and after; O(change) per "
            "micro-batch",
        )
    why = []
    if shape.session_window:
        why.append(
            "session window (Spark cannot update a session in place: no streaming aggregation in update mode)"
        )
    elif shape.streaming_refusal:
        why.append(f"Spark refuses it as a streaming aggregation in update mode ({shape.streaming_refusal})")
    if shape.distinct_aggregate:
        why.append("DISTINCT aggregate")
    if "Aggregate" in stateful and shape.top != "Aggregate":
        why.append("filter or join over an aggregation")
    for node, label in (
        ("Window", "window function"),
        ("GlobalLimit", "LIMIT / top-N"),
        ("Distinct", "DISTINCT"),
        ("Join", f"join ({shape.join_refusal})" if shape.join_refusal else "join"),
    ):
        if node in shape.nodes:
            why.append(label)
    key_refusal = _key_refusal(shape, primary_key, whole=not lookups) if "Aggregate" in stateful else ""
    why += [r for r in (shape.having_refusal, shape.row_key_refusal, key_refusal) if r]
    if lookups and "Aggregate" in stateful:
        why.append("aggregation over a primary-key table")
    if len(appends) + len(lookups) > 1:
        why.append(f"{len(inputs)} inputs")
    detail = ", ".join(dict.fromkeys(why)) or "not incrementally maintainable"
    tail = ""
    if not (stateful - {"Sort"}) and len(appends) == 1 and lookups:
        tail = (
            f" (`lookups: processing_time` would make it append, reading {', '.join(lookups)} as of each "
            "micro-batch)"
        )
    return Decision(
        "recompute",
        f"{detail}: re-evaluated over the current state of its inputs when they "
        f"change, difference written (O(input) per micro-batch){tail}",
    )


def _processing_time(
    table: str, shape: SqlShape, appends: list[str], lookups: list[str], location: Location | None
) -> Decision:
    """``lookups: processing_time``: stateless SQL over one append-only input whose primary-key inputs are
    read as of each micro-batch (``append``, with the ``lookup`` batch exception); refused where it cannot
    apply."""
    if not lookups:
        raise _refuse(
            table,
            "'lookups: processing_time' is set but it reads no primary-key table to look up",
            "remove the 'lookups' setting",
            location,
        )
    if len(appends) != 1 or shape.stateful - {"Sort"}:
        what = (
            f"{len(appends)} append-only inputs"
            if len(appends) != 1
            else f"SQL that is not stateless ({', '.join(sorted(shape.stateful))})"
        )
        raise _refuse(
            table,
            f"'lookups: processing_time' applies to stateless SQL over one append-only input (a source or a "
            f"log table) that looks up primary-key tables; this table has {what}",
            "remove the 'lookups' setting (the table then keeps batch semantics)",
            location,
        )
    return Decision(
        "append",
        f"stateless over {appends[0]}; {', '.join(lookups)} read as lookups (as of each micro-batch, "
        "`lookups: processing_time`)",
    )


def _decide_log(
    table: str, shape: SqlShape, appends: list[str], lookups: list[str], location: Location | None
) -> Decision:
    stateful = shape.stateful
    if not appends:
        raise _refuse(
            table,
            f"it is a log table (append-only) but reads only primary-key tables "
            f"({', '.join(lookups)}), whose rows change and disappear",
            "declare a primary_key for this table",
            location,
        )
    if len(appends) > 1:
        raise _refuse(
            table,
            f"it reads several append-only inputs ({', '.join(appends)}); joining or "
            "merging two streams into a log table is not supported",
            "make all but one input a primary-key table (read as a lookup with 'lookups: "
            "processing_time'), or declare a primary_key for this table",
            location,
        )
    if shape.sort_only:
        raise _refuse(
            table,
            "ORDER BY without LIMIT has no meaning for a log table (rows arrive in micro-"
            "batches and are never re-sorted)",
            "drop the ORDER BY; sort when you query the table",
            location,
        )
    if {"Aggregate", "Distinct"} & stateful:
        raise _refuse(
            table,
            "it aggregates into a log table, which is append-only and cannot correct a "
            "group's earlier result",
            "declare primary_key: [<the GROUP BY columns>]",
            location,
        )
    if {"GlobalLimit", "LocalLimit", "Tail", "Offset"} & stateful:
        raise _refuse(
            table,
            "LIMIT into a log table would keep the first rows that ever arrived, not the batch result",
            "declare a primary_key so the table holds the current top rows",
            location,
        )
    if stateful:
        raise _refuse(
            table,
            f"{', '.join(sorted(stateful))} needs rows from several micro-batches at once",
            "declare a primary_key for this table (it is then recomputed as inputs change)",
            location,
        )
    if lookups:
        raise _refuse(
            table,
            f"it is a log table (append-only) that reads primary-key tables ({', '.join(lookups)}): a row "
            "once appended cannot be revised when they change, so it cannot hold the batch result",
            "declare a primary_key for this table (a join of the log with one primary-key table on equal "
            "columns is then kept with batch semantics, anything else recomputed), or set "
            "'lookups: processing_time' to join each row with them as they are when its micro-batch runs "
            "(a lookup join)",
            location,
        )
    return Decision("append", f"stateless over {appends[0]}; appends each micro-batch's rows")


def batch_exceptions(
    strategy: str, shape: SqlShape, inputs: Sequence[tuple[str, InputKind]]
) -> tuple[BatchException, ...]:
    """How a table kept by ``strategy`` can differ from its SQL's batch result, by design (``inputs`` are
    ``(table or source, kind)``).

    ``lookup``: an ``append`` table reads its primary-key inputs at processing time; a row keeps the values
    they had when it was processed. ``watermark``: an ``aggregate`` table's streaming aggregation drops rows
    later than its watermark. ``recompute`` and ``changelog`` tables are batch-exact; a ``WATERMARK`` clause
    means nothing to them (the SQL runs in batch).
    """
    out = []
    lookups = sorted(name for name, kind in inputs if kind == "primary_key")
    if strategy == "append" and lookups:
        out.append(
            BatchException(
                "lookup",
                f"processing-time lookups of {', '.join(lookups)}: each row keeps the values they had when "
                "it was processed; a later change to them does not update it (a batch run joins the "
                "latest values)",
            )
        )
    if strategy == "aggregate" and shape.watermarks:
        marks = ", ".join(f"{column} - {format_duration(delay)}" for column, delay in shape.watermarks)
        out.append(
            BatchException(
                "watermark",
                f"rows later than the watermark ({marks}) are dropped, and counted as late_dropped in "
                "`tidehouse flow status`; a batch run counts them",
            )
        )
    return tuple(out)


def _key_refusal(shape: SqlShape, primary_key: Sequence[str], *, whole: bool) -> str:
    """Why the primary key does not name one row per group of the top Aggregate ("": it does, or the SQL has
    no Aggregate at its top: the strategies that need one check for it)."""
    keys = shape.aggregate_keys
    return keys.refusal(tuple(primary_key), whole=whole) if keys is not None else ""
