"""The micro-batch function of a ``join_changelog`` or ``join_log`` table (the partitions: :mod:`.join`; the
inputs' changes: :mod:`.joinsides`).

Per micro-batch: the last images of the changed keys of both inputs (each has its own range in the batch; a
log input's new rows are images that never change);
the partitions (join key values) they leave or enter, both sides, loaded from the state; the action's SQL run
over those partitions' rows before and after the images (small local relations); the output rows that differ
written (deletes of the output keys the partitions no longer produce, upserts of new or changed rows), then
the state. Behind retention, or with a new state, everything is rebuilt from both inputs' current state.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pyarrow as pa

from materializer.analyze import struct_of
from materializer.incremental.common import (
    StateTable,
    behind,
    kv_state_rows,
    partition_writes,
    rebuild_seq,
    write_output,
)
from materializer.incremental.join import (
    SCHEMA,
    SIDES,
    Partitioner,
    Step,
    decode,
    state_entries,
)
from materializer.incremental.joinfacts import EquiJoin
from materializer.incremental.joinsides import LogSide, side_of
from materializer.strategies import (
    QueryContext,
    _begin,
    _finish,
    apply_expectations,
    local_df,
    output_difference,
    run_sql,
)
from runtime.spark.types import spark_to_arrow
from runtime.spark.writer import origin_from_checkpoint

# which sides an empty relation makes the result empty: inner needs both, an outer join its preserved side(s)
NEEDS = {"inner": ("any", SIDES), "left": ("any", ("l",)), "right": ("any", ("r",)), "full": ("all", SIDES)}


class Join:
    """A partitioned join's inputs, state and steps, shared by the micro-batch functions of both data paths
    (the executor path's ``join_log``: :mod:`.joinlog`)."""

    def __init__(self, ctx: QueryContext) -> None:
        self.ctx = ctx
        table = ctx.table
        self.facts: EquiJoin = table.incremental
        by_name = {i.name: i for i in table.inputs}
        self.inputs = {"l": by_name[self.facts.left], "r": by_name[self.facts.right]}
        self.sides = {s: side_of(ctx, inp) for s, inp in self.inputs.items()}
        self.schemas = {s: spark_to_arrow(struct_of(inp.ddl)) for s, inp in self.inputs.items()}
        self.fixed = frozenset(s for s, side in self.sides.items() if isinstance(side, LogSide))
        self.parts = Partitioner(self.facts, {s: side.key for s, side in self.sides.items()}, self.fixed)
        self.state = StateTable(ctx, SCHEMA, ("key",))

    def load(self, keys: list[str]) -> dict[str, object]:
        if not keys:
            return {}
        found = self.ctx.store.lookup(self.state.name, pa.table({"key": pa.array(keys, pa.string())}))
        return decode(found.column("key").to_pylist(), found.column("value").to_pylist())

    def evaluate(self, session, step: Step, which: str) -> pa.Table | None:
        """The SQL over the step's partitions (None: empty without running it)."""
        rows = {s: step.rows(which, s) for s in SIDES}
        mode, sides = NEEDS[self.facts.kind]
        empty = [not rows[s] for s in sides]
        if (mode == "any" and any(empty)) or (mode == "all" and all(empty)):
            return None
        for s, inp in self.inputs.items():
            data = pa.Table.from_pylist(rows[s], schema=self.schemas[s])
            local_df(session, data, inp.ddl, self.ctx.handoff).createOrReplaceTempView(inp.name)
        return run_sql(self.ctx, session)

    def start(self, batch_df, batch_id: int, started: float) -> tuple[object, float | None] | None:
        """Begin a micro-batch: (its session, its origin time), or None when the batch rebuilt the output and
        the state from both inputs' current rows (a new state, or a changelog behind retention)."""
        ctx = self.ctx
        session = _begin(ctx, batch_df)
        if behind(ctx, batch_id):  # a changelog is gone: rebuild from both inputs' state
            self.state.reset()
        origin = origin_from_checkpoint(ctx.store, ctx.table.checkpoint, batch_id)
        if self.state.ensure():
            self.rebuild(session, batch_id, origin, started)
            return None
        return session, origin

    def rebuild(self, session, batch_id: int, origin: float | None, started: float) -> None:
        """Output and state from both inputs' current rows (a new state, or a changelog behind retention)."""
        ctx = self.ctx
        with ctx.clock.phase("read"):
            current = {s: side.current(batch_id) for s, side in self.sides.items()}
        ups, _ = self.parts.rebuild(current)
        for s, inp in self.inputs.items():
            local_df(session, current[s], inp.ddl, ctx.handoff).createOrReplaceTempView(inp.name)
        writer, seq = rebuild_seq(ctx, self.state)  # the inputs' current rows: a replay differs
        result = run_sql(ctx, session)
        result, _ = apply_expectations(ctx, session, result, seq, writer=writer, whole_result=True)
        writes = output_difference(ctx, result, unique=True)
        written = write_output(ctx, writes, seq, origin, writer=writer)
        self.state.write(kv_state_rows(self.state, ups, []), seq, writer=writer)
        _finish(ctx, started, sum(t.num_rows for t in current.values()), written, origin)

    def apply(
        self,
        session,
        changes: dict,
        batch_id: int,
        origin: float | None,
        *,
        also: dict[str, bytes] | None = None,
    ) -> tuple[int, pa.Table | None]:
        """Write the output rows and then the state that ``changes`` (per side) make, with the entries
        ``also`` in the same state write: (output rows written, the step's result: None when empty)."""
        ctx = self.ctx
        with ctx.clock.phase("read"):
            step = self.parts.step(changes, self.load)
        before, after = self.evaluate(session, step, "before"), self.evaluate(session, step, "after")
        writes = partition_writes(
            ctx,
            session,
            before,
            after,
            batch_id,
            where=WHERE,
            dup_hint=DUP_HINT,
            entering_hint=ENTERING_HINT,
        )
        written = write_output(ctx, writes, batch_id, origin)
        ups, downs = state_entries(step)
        self.state.write(kv_state_rows(self.state, {**ups, **(also or {})}, downs), batch_id)
        return written, after


WHERE = "join key values"
DUP_HINT = "make the primary key the columns that identify one output row"
ENTERING_HINT = (
    "make the primary key the columns that identify one output row (e.g. include a key of each joined input)"
)


def join_batch(ctx: QueryContext) -> Callable:
    join = Join(ctx)

    def run(batch_df, batch_id: int) -> None:
        started = time.time()
        begun = join.start(batch_df, batch_id, started)
        if begun is None:
            return
        session, origin = begun
        changes = {}
        for s, side in join.sides.items():
            change = side.change(batch_id)
            if change is not None:
                changes[s] = join.parts.change(s, *change)
        if not changes:
            return
        written, _ = join.apply(session, changes, batch_id, origin)
        _finish(ctx, started, sum(len(c.keys) for c in changes.values()), written, origin)

    return run
