"""The ``topn`` strategy: a global top-N over one primary-key table, kept with a buffer of its best rows
(docs/architecture.md, "Incremental maintenance"; a top-N per PARTITION BY: :mod:`.topnparts`).

The buffer — at most ``capacity`` rows of the input, keyed by the input's primary key, in the hidden state
table — is always a *prefix* of the input in the order (ORDER BY columns, then the primary key). Per
micro-batch the changed keys leave it, their new rows enter when they sort up to its last row as it was (every
key it does not hold and the batch did not change sorts after that row), and the action's SQL runs over the
buffer whenever the buffer decides the top N; otherwise (too many of the best rows left without better ones
coming in, or the input is small) it is refilled from the input's state. The output is diffed with
the result (ranks that shift are updates) and written before the buffer's own change.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from materializer.analyze import struct_of
from materializer.incremental.common import (
    StateTable,
    behind,
    changed_images,
    key_tuples,
    order_indices,
    rebuild_seq,
    write_output,
)
from materializer.incremental.facts import TopN
from materializer.strategies import (
    QueryContext,
    _begin,
    _finish,
    apply_expectations,
    conform_to,
    local_df,
    output_difference,
    run_sql,
)
from runtime.spark.types import spark_to_arrow
from runtime.spark.writer import origin_from_checkpoint

SPARE = 16  # the buffer holds N + max(N, SPARE) rows: that many of the best rows may leave between refills


def capacity(facts: TopN) -> int:
    return facts.limit + max(facts.limit, SPARE)


def decided(rows: pa.Table, facts: TopN) -> int | None:
    """The length of the shortest prefix of sorted ``rows`` that decides the top N (every row that can rank
    <= N, and one row that cannot), or None when ``rows`` does not decide it (all of them may rank)."""
    if rows.num_rows <= facts.limit:
        return None
    values = key_tuples(rows, [k.column for k in facts.order])
    groups, group = [0], 0
    for i in range(1, len(values)):
        group += values[i] != values[i - 1]
        groups.append(group)
    for i in range(facts.limit, len(values)):
        if facts.function == "dense_rank" and groups[i] >= facts.limit:
            return i + 1
        if facts.function != "dense_rank" and groups[i] != groups[facts.limit - 1]:
            return i + 1
    return None


class Buffer:
    """The best rows of the input, sorted."""

    def __init__(self, facts: TopN, primary_key: tuple[str, ...]) -> None:
        self.facts = facts
        self.primary_key = primary_key
        self.order = [(k.column, k.descending, k.nulls_first) for k in facts.order]

    def sort(self, rows: pa.Table) -> pa.Table:
        return rows.take(order_indices(rows, self.order, self.primary_key))

    def cut(self, rows: pa.Table) -> pa.Table:
        """A sorted prefix of at most ``capacity`` rows, longer only when ties need it."""
        size = capacity(self.facts)
        if rows.num_rows <= size:
            return rows
        return rows.slice(0, max(size, decided(rows, self.facts) or rows.num_rows))

    def apply(self, buffer: pa.Table, images: pa.Table, keys: pa.Table) -> pa.Table | None:
        """The buffer after the changed keys' new ``images``, or None when it must be refilled.

        Every key outside the buffer that the batch did not change sorts after the buffer's last row as it
        was (the buffer is a prefix of the input's total order), so the rows of the unchanged buffer rows and
        the new images that sort up to that old last row are a prefix of the new order — also when every
        buffered key changed (a top-N of growing totals), without reading the input's state."""
        if buffer.num_rows == 0:
            return None
        changed = set(key_tuples(keys, self.primary_key))
        kept_mask = [k not in changed for k in key_tuples(buffer, self.primary_key)]
        rest = buffer.filter(pa.array(kept_mask, pa.bool_()))
        bound = buffer.slice(buffer.num_rows - 1)  # the old last row: the end of what the buffer knows
        both = pa.concat_tables([rest, images.select(rest.column_names).cast(rest.schema), bound])
        order = order_indices(both, self.order, self.primary_key)  # stable: ``bound`` after an equal row
        known = pc.index(order, pa.scalar(both.num_rows - 1, order.type)).as_py()
        if known == 0:
            return None
        merged = self.cut(both.take(order.slice(0, known)))
        return merged if decided(merged, self.facts) is not None else None

    def refill(self, state: pa.Table) -> pa.Table:
        return self.cut(self.sort(state))


def topn_batch(ctx: QueryContext) -> Callable:
    """The micro-batch function of a ``topn`` table (both data paths: it moves O(change) rows)."""
    table = ctx.table
    facts: TopN = table.incremental
    inp = table.inputs[0]
    schema = spark_to_arrow(struct_of(inp.ddl))
    state = StateTable(ctx, schema, inp.primary_key)
    buffer_of = Buffer(facts, tuple(inp.primary_key))
    out_schema = spark_to_arrow(struct_of(table.ddl))

    def run(batch_df, batch_id: int) -> None:
        started = time.time()
        session = _begin(ctx, batch_df)
        fresh = state.ensure()
        if behind(ctx, batch_id):
            change, rows_in = None, 0
        else:
            change = changed_images(ctx, batch_id)
            if change is None and not fresh:
                return
            rows_in = change[1].num_rows if change is not None else 0
        with ctx.clock.phase("read"):
            old = buffer_of.sort(conform_to(ctx.store.scan(state.name), inp.ddl))
        new, writer, seq = None, None, batch_id
        if change is not None and not fresh:
            new = buffer_of.apply(old, conform_to(change[0], inp.ddl), change[1])
        if new is None:  # refill: the input's state, once (its current rows: a replay differs)
            writer, seq = rebuild_seq(ctx, state)
            with ctx.clock.phase("read"):
                new = buffer_of.refill(conform_to(ctx.store.scan(inp.ref), inp.ddl))
        if facts.output is not None and not table.expect:  # the SQL only ranks and renames: Arrow does it
            with ctx.clock.phase("sql"):
                result = ranked(new, facts, out_schema)
        else:
            local_df(session, new, inp.ddl, ctx.handoff).createOrReplaceTempView(inp.name)
            result, _ = apply_expectations(
                ctx, session, run_sql(ctx, session), seq, writer=writer, whole_result=True
            )
        origin = origin_from_checkpoint(ctx.store, table.checkpoint, batch_id)
        written = write_output(ctx, output_difference(ctx, result, unique=True), seq, origin, writer=writer)
        state.write(_buffer_change(state, old, new, buffer_of.primary_key), seq, writer=writer)
        _finish(ctx, started, rows_in, written, origin)

    return run


def _same(a: tuple, b: tuple) -> bool:
    """Equal ORDER BY values, as Spark ranks ties (NaN equals NaN)."""
    return a == b or all(x == y or (x != x and y != y) for x, y in zip(a, b))


def ranked(rows: pa.Table, facts: TopN, schema: pa.Schema, parts: list | None = None) -> pa.Table:
    """The SQL's result over sorted ``rows`` when it only ranks and renames (``facts.output``): the rows whose
    ``row_number``/``rank``/``dense_rank`` over the ORDER BY values is at most N. ``parts``: each row's
    partition (rows sorted by partition first), where ranks start again at 1."""
    values = key_tuples(rows, [k.column for k in facts.order])
    ranks: list[int] = []
    start = 0
    for i, v in enumerate(values):
        if i == 0 or (parts is not None and parts[i] != parts[i - 1]):
            start = i
            ranks.append(1)
            continue
        tie = _same(v, values[i - 1])
        if facts.function == "row_number":
            ranks.append(i - start + 1)
        elif facts.function == "rank":
            ranks.append(ranks[-1] if tie else i - start + 1)
        else:  # dense_rank
            ranks.append(ranks[-1] + (not tie))
    keep = [r <= facts.limit for r in ranks]
    rank = pa.array([r for r in ranks if r <= facts.limit], pa.int64())
    top = rows.filter(pa.array(keep, pa.bool_())) if rows.num_rows else rows
    columns = [rank if src is None else top.column(src) for _, src in facts.output]
    return pa.Table.from_arrays([c.cast(f.type) for c, f in zip(columns, schema)], schema=schema)


def _buffer_change(state: StateTable, old: pa.Table, new: pa.Table, key: tuple[str, ...]) -> pa.Table:
    """Deletes of the keys that left the buffer, upserts of its rows (equal rows emit no change)."""
    now = set(key_tuples(new, key))
    gone = [k not in now for k in key_tuples(old, key)]
    parts = []
    if any(gone):
        parts.append(state.deletes(old.filter(pa.array(gone, pa.bool_()))))
    if new.num_rows:
        parts.append(state.upserts(new))
    return pa.concat_tables(parts) if parts else state.upserts(new)
