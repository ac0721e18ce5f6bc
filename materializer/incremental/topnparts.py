"""The ``topn`` strategy with a PARTITION BY: a top N per partition over one primary-key table
(docs/architecture.md, "Incremental maintenance").

The output rows of partition ``p`` depend only on the input rows whose PARTITION BY values are ``p``. The
state is a key-value table (``key string, value binary``): ``p<partition>`` → the input rows of that
partition (pickled ``{input key: row}``), ``h<input key>`` → the row's partition (its *home*, so a row whose
PARTITION BY values change leaves its old partition). Per micro-batch the changed keys' last images replace
their rows (applying an image twice changes nothing); the touched partitions are ranked before and after,
the output rows that differ are written, then the state.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable

import pyarrow as pa

from materializer.analyze import struct_of
from materializer.incremental.common import (
    StateTable,
    behind,
    changed_images,
    key_tuples,
    kv_state_rows,
    order_indices,
    partition_writes,
    rebuild_seq,
    write_output,
)
from materializer.incremental.facts import TopN
from materializer.incremental.join import SCHEMA, decode
from materializer.incremental.topn import Buffer, ranked
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

PID = "__partition"  # a helper column: each row's partition, to sort and rank by
HINT = (
    "make the primary key the columns that identify one output row (with a PARTITION BY: its columns and "
    "the rank, or an input key)"
)


def partition_of(row: dict, columns: tuple[str, ...]) -> str:
    """A partition's name: its PARTITION BY values as Spark groups them (NULLs together, -0.0 with 0.0, NaN
    with NaN: ``repr(nan)`` is ``'nan'``)."""
    return "p" + repr(tuple(row[c] + 0.0 if isinstance(row[c], float) else row[c] for c in columns))


class Ranker:
    """The SQL's result over the rows of whole partitions: ranked in the driver when the SQL only ranks and
    renames (``TopN.output``) and the table has no expectations, else by Spark over those rows."""

    def __init__(self, ctx: QueryContext, facts: TopN) -> None:
        self.ctx = ctx
        self.facts = facts
        self.input = ctx.table.inputs[0]
        self.in_schema = spark_to_arrow(struct_of(self.input.ddl))
        self.out_schema = spark_to_arrow(struct_of(ctx.table.ddl))
        self.buffer = Buffer(facts, tuple(self.input.primary_key))
        self.in_driver = facts.output is not None and not ctx.table.expect

    def result(self, session, rows: list[dict]) -> pa.Table:
        """The SQL's result over ``rows``, before expectations."""
        data = pa.Table.from_pylist(rows, schema=self.in_schema)
        if not self.in_driver:
            local_df(session, data, self.input.ddl, self.ctx.handoff).createOrReplaceTempView(self.input.name)
            return run_sql(self.ctx, session)
        with self.ctx.clock.phase("sql"):
            parts = [partition_of(r, self.facts.partition) for r in rows]
            ids = {p: i for i, p in enumerate(sorted(set(parts)))}
            data = data.append_column(PID, pa.array([ids[p] for p in parts], pa.int64()))
            data = data.take(
                order_indices(data, [(PID, False, False), *self.buffer.order], self.buffer.primary_key)
            )
            return ranked(data, self.facts, self.out_schema, data.column(PID).to_pylist())


def partitioned_topn_batch(ctx: QueryContext) -> Callable:
    table = ctx.table
    facts: TopN = table.incremental
    inp = table.inputs[0]
    key = tuple(inp.primary_key)
    state = StateTable(ctx, SCHEMA, ("key",))
    ranker = Ranker(ctx, facts)

    def load(names: list[str]) -> dict[str, bytes]:
        if not names:
            return {}
        found = ctx.store.lookup(state.name, pa.table({"key": pa.array(sorted(names), pa.string())}))
        return dict(zip(found.column("key").to_pylist(), found.column("value").to_pylist()))

    def run(batch_df, batch_id: int) -> None:
        started = time.time()
        session = _begin(ctx, batch_df)
        if behind(ctx, batch_id):  # the changelog is gone: rebuild from the input's state
            state.reset()
        origin = origin_from_checkpoint(ctx.store, table.checkpoint, batch_id)
        if state.ensure():  # a new state: every partition; the output made equal to the whole result
            with ctx.clock.phase("read"):
                rows = conform_to(ctx.store.scan(inp.ref), inp.ddl).to_pylist()
            partitions: dict[str, dict] = {}
            for row in rows:
                partitions.setdefault(partition_of(row, facts.partition), {})[repr(_key(row, key))] = row
            writer, seq = rebuild_seq(ctx, state)  # the input's current rows: a replay differs
            result, _ = apply_expectations(
                ctx, session, ranker.result(session, rows), seq, writer=writer, whole_result=True
            )
            writes = output_difference(ctx, result, unique=True)
            written = write_output(ctx, writes, seq, origin, writer=writer)
            ups = {name: pickle.dumps(part) for name, part in partitions.items()}
            ups.update({"h" + k: name.encode() for name, part in partitions.items() for k in part})
            state.write(kv_state_rows(state, ups, []), seq, writer=writer)
            _finish(ctx, started, len(rows), written, origin)
            return
        change = changed_images(ctx, batch_id)
        if change is None:
            return
        images, keys = change
        changed = [repr(k) for k in key_tuples(keys, key)]
        new_home = {
            repr(_key(r, key)): (partition_of(r, facts.partition), r)
            for r in conform_to(images, inp.ddl).to_pylist()
        }
        with ctx.clock.phase("read"):
            homes = {k[1:]: v.decode() for k, v in load(["h" + k for k in changed]).items()}
            touched = set(homes.values()) | {p for p, _ in new_home.values()}
            found = load(list(touched))
            stored = decode(found.keys(), found.values())
        before = {name: stored.get(name, {}) for name in touched}
        after = {name: dict(rows) for name, rows in before.items()}
        for k in changed:
            if k in homes:
                after[homes[k]].pop(k, None)
            if k in new_home:
                name, row = new_home[k]
                after[name][k] = row
        old = ranker.result(session, [r for rows in before.values() for r in rows.values()])
        new = ranker.result(session, [r for rows in after.values() for r in rows.values()])
        written = write_output(
            ctx,
            partition_writes(
                ctx, session, old, new, batch_id, where="partitions", dup_hint=HINT, entering_hint=HINT
            ),
            batch_id,
            origin,
        )
        ups = {name: pickle.dumps(rows) for name, rows in after.items() if rows}
        downs = [name for name, rows in after.items() if not rows]
        for k in changed:
            if k in new_home:
                ups["h" + k] = new_home[k][0].encode()
            else:
                downs.append("h" + k)
        state.write(kv_state_rows(state, ups, downs), batch_id)
        _finish(ctx, started, len(changed), written, origin)

    return run


def _key(row: dict, key: tuple[str, ...]) -> tuple:
    return tuple(row[c] for c in key)
