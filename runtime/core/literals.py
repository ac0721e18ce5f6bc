"""The words every layer shares, defined once: layers, table kinds, merge engines, aggregation functions,
system columns and row kinds (BRIEF §3.2).

The spec models (``registry.specs``), the hot store (``runtime.storage``), the lake, the materializer and the
scaffold import them from here; a value that one of them accepts and another refuses is written down below,
not discovered.
"""

from __future__ import annotations

from typing import Literal, get_args

# -- layers ---------------------------------------------------------------------------------------------
Layer = Literal["ods", "dwd", "dws", "ads"]
LAYERS: tuple[str, ...] = get_args(Layer)  # in data-flow order: a table reads its own or an earlier layer

# -- tables ---------------------------------------------------------------------------------------------
TableKind = Literal["log", "primary_key"]
TABLE_KINDS: tuple[str, ...] = get_args(TableKind)
LOG, PRIMARY_KEY = TABLE_KINDS

MergeEngine = Literal["last_row", "first_row", "aggregate", "partial_update"]
MERGE_ENGINES: tuple[str, ...] = get_args(MergeEngine)
DEFAULT_MERGE_ENGINE: MergeEngine = "last_row"

# What a flow may name under `aggregations:` (merge_engine aggregate).
Aggregation = Literal["sum", "min", "max", "count", "last_non_null"]
AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)
# What every non-key column the flow does not name gets: the incoming value. It is not a word of the flow
# language (leaving the column out says it), but the hot store's TableMeta accepts it by name, as the
# explicit spelling of that default.
IMPLICIT_AGGREGATION = "last"
StoredAggregation = Literal["sum", "min", "max", "count", "last_non_null", "last"]  # Aggregation + "last"
STORED_AGGREGATIONS: tuple[str, ...] = (*AGGREGATIONS, IMPLICIT_AGGREGATION)

# A table's incremental state (materializer/incremental): a hidden hot table ``<table>__state``, private to
# the table's query — never tiered, listed, queried or selected; its changelog is trimmed by retention
# without a lake copy (the state is rebuilt from the table's inputs when lost).
STATE_SUFFIX = "__state"


def is_internal_table(name: str) -> bool:
    """Whether hot table ``name`` is a query's private state (see :data:`STATE_SUFFIX`)."""
    return name.endswith(STATE_SUFFIX)


# -- system columns -------------------------------------------------------------------------------------
SYSTEM_PREFIX = "__"  # user columns (and names in specs) may not start with it
OFFSET = "__offset"  # int64: the row's offset in its bucket's log
BUCKET = "__bucket"  # int32: the row's bucket
TS = "__ts"  # timestamp[us, UTC]: commit time of the batch that holds the row
CHANGE = "__change"  # string: the row kind; primary-key tables only
SYSTEM_COLUMNS: tuple[str, ...] = (OFFSET, BUCKET, TS, CHANGE)


def is_system_column(name: str) -> bool:
    """Whether ``name`` is reserved for system columns (it starts with ``__``)."""
    return name.startswith(SYSTEM_PREFIX)


# -- row kinds of a changelog ---------------------------------------------------------------------------
INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = "+I", "-U", "+U", "-D"
ROW_KINDS: tuple[str, ...] = (INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE)
