"""What both incremental strategies share: the hidden state table, the changed keys' images, the sort order,
and writing the output's difference (computed by :func:`materializer.strategies.output_difference`, as for
``recompute``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from materializer.plan import Input
from materializer.rows import held_otherwise, key_tuples, keys_table, several_rows
from materializer.strategies import QueryContext, behind_retention, read_batch
from runtime.core.errors import ErrorCode, TidehouseError
from runtime.core.literals import BUCKET, DELETE, OFFSET, STATE_SUFFIX, UPDATE_AFTER
from runtime.lake.apply import collapse_changelog
from runtime.spark.writer import prepare
from runtime.storage.api import TableMeta

OWNER = "tidehouse.state_of"  # table property: the writer id and output incarnation the state belongs to
REBUILD = ":rebuild"  # the suffix of the writer id of the writes built from the inputs' current rows


def state_name(table: str) -> str:
    return f"{table}{STATE_SUFFIX}"


class StateTable:
    """The hidden one-bucket primary-key table ``<table>__state`` that holds a table's incremental state.

    One bucket, so each write of it is atomic. Its owner property names the query's writer id and the
    output's incarnation: a state left by another plan of the table or by the table's previous life (a
    ``--full-refresh`` drops the output) is dropped and rebuilt, never reused."""

    def __init__(
        self,
        ctx: QueryContext,
        schema: pa.Schema,
        primary_key: Sequence[str],
        aggregations: Mapping[str, str] | None = None,
        part: str = "",
    ) -> None:
        self.ctx = ctx
        # a second state table of the same query names its part: <table>__<part>__state
        self.name = state_name(f"{ctx.table.name}__{part}" if part else ctx.table.name)
        self.schema = schema
        self.primary_key = tuple(primary_key)
        # column -> function of the store's aggregate merge engine (a write adds to the stored row); None:
        # last_row (a write replaces it)
        self.aggregations = dict(aggregations) if aggregations is not None else None
        self.checked = False
        self.also: tuple[str, ...] = ()  # other writer ids of the state (the executor path's join_log tasks)

    def ensure(self) -> bool:
        """Create or check the state table; True when it was (re)created empty."""
        if self.checked:
            return False
        store = self.ctx.store
        owner = f"{self.ctx.table.writer_id}@{store.incarnation(self.ctx.table.name)}"
        fresh = True
        if store.has_table(self.name):
            if store.get_table(self.name).properties.get(OWNER) == owner:
                fresh = False
            else:
                store.drop_table(self.name)
        merge = {"merge_engine": "aggregate", "aggregations": self.aggregations} if self.aggregations else {}
        meta = TableMeta(
            self.name,
            self.schema,
            "primary_key",
            self.primary_key,
            buckets=1,
            properties={OWNER: owner},
            **merge,
        )
        store.create_table(meta, exist_ok=True)
        self.checked = True
        # never written: a state created but not yet filled (a crash between create and first write)
        writers = (self.ctx.table.writer_id, self.ctx.table.writer_id + REBUILD, *self.also)
        return fresh or all(store.last_seq(self.name, w) is None for w in writers)

    def reset(self) -> None:
        """Drop the state (it is rebuilt from the input by the next :meth:`ensure`)."""
        if self.ctx.store.has_table(self.name):
            self.ctx.store.drop_table(self.name)
        self.checked = False

    def write(self, rows: pa.Table, seq: int, writer: str | None = None) -> None:
        if rows.num_rows:
            self.ctx.store.write(self.name, rows, writer=writer or self.ctx.table.writer_id, seq=int(seq))

    def upserts(self, rows: pa.Table) -> pa.Table:
        return keys_table(self.schema, rows, self.primary_key, UPDATE_AFTER)

    def deletes(self, keys: pa.Table) -> pa.Table:
        return keys_table(self.schema, keys, self.primary_key, DELETE)


def changed_images(
    ctx: QueryContext, batch_id: int, inp: Input | None = None
) -> tuple[pa.Table, pa.Table] | None:
    """(the last image of every key of ``inp`` (default: the first input) the batch changed, those keys) — a
    key whose last change is a delete has no image. Each input has its own range in the batch. None when the
    batch holds no change of ``inp``; raises nothing behind retention (callers ask :func:`behind` first)."""
    inp = inp or ctx.table.inputs[0]
    data = read_batch(ctx, inp, batch_id)
    if data is None or data.num_rows == 0:
        return None
    data = data.sort_by([(BUCKET, "ascending"), (OFFSET, "ascending")])
    images, keys = collapse_changelog(data, inp.primary_key)
    user = [c for c in data.column_names if not c.startswith("__")]
    return images.select(user), keys


def behind(ctx: QueryContext, batch_id: int) -> bool:
    """Whether the batch starts below the hot log of any input (its changelog there is gone)."""
    return any(behind_retention(ctx, inp, batch_id) for inp in ctx.table.inputs)


def order_indices(
    rows: pa.Table, order: Sequence[tuple[str, bool, bool]], tiebreak: Sequence[str]
) -> pa.Array:
    """Indices that sort ``rows`` by ``order`` (column, descending, nulls first), then ``tiebreak`` ascending:
    a total order when ``tiebreak`` is the primary key. Null placement is per column, as in Spark."""
    helper, keys = {}, []
    for i, (column, descending, nulls_first) in enumerate(order):
        values = rows.column(column)
        helper[f"n{i}"] = pc.is_null(values)
        keys.append((f"n{i}", "descending" if nulls_first else "ascending"))
        helper[f"v{i}"] = values
        keys.append((f"v{i}", "descending" if descending else "ascending"))
    for i, column in enumerate(tiebreak):
        helper[f"t{i}"] = rows.column(column)
        keys.append((f"t{i}", "ascending"))
    return pc.sort_indices(pa.table(helper), sort_keys=keys)


def write_output(
    ctx: QueryContext, rows: pa.Table | None, batch_id: int, origin: float | None, writer: str | None = None
) -> int:
    if rows is None or rows.num_rows == 0:
        return 0
    with ctx.clock.phase("write"):
        ctx.store.write(
            ctx.table.name, rows, writer=writer or ctx.table.writer_id, seq=int(batch_id), origin_ts=origin
        )
    return rows.num_rows


def rebuild_seq(ctx: QueryContext, state: StateTable) -> tuple[str, int]:
    """The writer id and ``seq`` of a micro-batch's writes built from its inputs' *current* rows (a new
    state, a top-N refill), output, quarantine and state alike.

    Those rows may be ahead of the batch, so a replay of it builds other writes than the attempt the crash
    stopped; under the batch's ``(writer, seq)`` the replay's output write would be skipped as committed
    while its state write went through, and the changes in between would never reach the output. Under
    ``<writer>:rebuild`` and a ``seq`` no attempt used, every attempt's writes apply: each one's output is a
    difference against the output as the last attempt left it. A later replay of the batch finds the state
    written (:meth:`StateTable.ensure`) and applies its images under the batch's own ``(writer, seq)``."""
    writer = ctx.table.writer_id + REBUILD
    uses = [(ctx.table.name, writer), (state.name, writer)]
    if ctx.table.quarantine:
        uses.append((ctx.table.quarantine, f"{writer}:qe"))
    return writer, ctx.store.next_seq(uses)


def check_one_row_per_key(ctx: QueryContext, keys: list[tuple], hint: str) -> None:
    """Fail the batch (``TH243``) when the SQL's result over the touched partitions holds a primary key
    twice."""
    message = several_rows(ctx.table.name, ctx.table.action, keys)
    if message is not None:
        raise TidehouseError(ErrorCode.PRIMARY_KEY_INVALID, message, hint=hint)


def check_entering(ctx: QueryContext, after: pa.Table, entering: list[bool], where: str, hint: str) -> None:
    """An output key the touched partitions did not produce before but the output holds with other values
    comes from a partition this batch did not touch: the SQL yields it in two partitions (``where``). A
    replayed batch's own earlier write holds the same values."""
    if not any(entering):
        return
    table = ctx.table
    rows = prepare(ctx.store, table.name, after.filter(pa.array(entering)))
    message = held_otherwise(ctx.store, table.name, table.action, table.primary_key, rows, where)
    if message is not None:
        raise TidehouseError(ErrorCode.PRIMARY_KEY_INVALID, message, hint=hint)


def kv_state_rows(state: StateTable, ups: dict[str, bytes], downs: list[str]) -> pa.Table:
    """The write of a key-value state (``key string, value binary``): deletes of ``downs``, upserts of
    ``ups``."""
    parts = []
    if downs:
        parts.append(state.deletes(pa.table({"key": pa.array(downs, pa.string())})))
    if ups:
        parts.append(
            state.upserts(pa.table({"key": list(ups), "value": pa.array(list(ups.values()), pa.binary())}))
        )
    return pa.concat_tables(parts) if parts else state.upserts(state.schema.empty_table())


def partition_writes(
    ctx: QueryContext,
    session,
    before: pa.Table | None,
    after: pa.Table | None,
    batch_id: int,
    *,
    where: str,
    dup_hint: str,
    entering_hint: str,
) -> pa.Table | None:
    """The output writes that replace ``before`` (the touched partitions' result as the output holds it)
    with ``after``: deletes of the keys only ``before`` has (and of new violators of an expectation),
    upserts of the rows ``after`` has new or changed. A key twice in ``after``, or one another partition
    holds (``where``: what the partitions are), fails the batch."""
    from materializer.incremental.join import difference
    from materializer.strategies import apply_expectations

    key = ctx.table.primary_key
    old_keys = key_tuples(before, key) if before is not None else []
    new_keys = key_tuples(after, key) if after is not None else []
    check_one_row_per_key(ctx, new_keys, dup_hint)
    gone, changed = difference(
        old_keys,
        before.to_pylist() if before is not None else [],
        new_keys,
        after.to_pylist() if after is not None else [],
    )
    entering = [c and k not in set(old_keys) for k, c in zip(new_keys, changed)]
    check_entering(ctx, after, entering, where, entering_hint)
    meta = ctx.store.get_table(ctx.table.name)
    parts = []
    if any(gone):
        parts.append(keys_table(meta.schema, before.filter(pa.array(gone, pa.bool_())), key, DELETE))
    if any(changed):
        kept, violators = apply_expectations(ctx, session, after.filter(pa.array(changed)), batch_id)
        if violators.num_rows:
            parts.append(keys_table(meta.schema, violators, key, DELETE))
        if kept.num_rows:
            parts.append(keys_table(meta.schema, kept, key, UPDATE_AFTER))
    return pa.concat_tables(parts) if parts else None
