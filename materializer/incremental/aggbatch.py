"""The micro-batch function of an ``agg_changelog`` table (the accumulators: :mod:`.aggregate`)."""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable

import pyarrow as pa

from materializer.analyze import struct_of
from materializer.incremental.aggregate import SCHEMA, Aggregator, Group
from materializer.incremental.common import (
    StateTable,
    behind,
    changed_images,
    key_tuples,
    kv_state_rows,
    rebuild_seq,
    write_output,
)
from materializer.incremental.facts import GroupAggregate
from materializer.rows import keys_table
from materializer.strategies import QueryContext, _begin, _finish, output_difference
from runtime.core.literals import DELETE, UPDATE_AFTER
from runtime.spark.types import spark_to_arrow
from runtime.spark.writer import origin_from_checkpoint


def _load(ctx: QueryContext, state: StateTable, keys: list[str]) -> dict[str, object]:
    if not keys:
        return {}
    found = ctx.store.lookup(state.name, pa.table({"key": pa.array(keys, pa.string())}))
    return dict(zip(found.column("key").to_pylist(), map(pickle.loads, found.column("value").to_pylist())))


def aggregate_batch(ctx: QueryContext) -> Callable:
    table = ctx.table
    facts: GroupAggregate = table.incremental
    inp = table.inputs[0]
    state = StateTable(ctx, SCHEMA, ("key",))
    agg = Aggregator(facts, tuple(inp.primary_key))
    out_schema = spark_to_arrow(struct_of(table.ddl))
    types = {src: out_schema.field(out).type for out, src in facts.output}
    counts_distinct = any(a.function == "count_distinct" for a in facts.aggregations)

    def run(batch_df, batch_id: int) -> None:
        started = time.time()
        _begin(ctx, batch_df)
        if behind(ctx, batch_id):  # the changelog is gone: rebuild from the input's state
            state.reset()
        fresh = state.ensure()
        if fresh:
            with ctx.clock.phase("read"):
                images = ctx.store.scan(inp.ref)
            keys = images.select(list(inp.primary_key))
        else:
            change = changed_images(ctx, batch_id)
            if change is None:
                return
            images, keys = change
        new = agg.contribution(images)
        changed = [repr(k) for k in key_tuples(keys, inp.primary_key)]
        with ctx.clock.phase("read"):
            old = (
                {} if fresh else {k[1:]: v for k, v in _load(ctx, state, [f"c{k}" for k in changed]).items()}
            )
            touched = {g for g, _ in old.values()} | {g for g, _ in new.values()}
            if not facts.group:  # a global aggregate: its one row, written from the first batch on
                touched.add(())
            groups = {} if fresh else _load(ctx, state, [f"g{g!r}" for g in touched])
            groups = {g: groups.get(f"g{g!r}") or Group(facts.aggregations) for g in touched}
            dkeys = _distinct_keys(facts, [*old.values(), *new.values()]) if counts_distinct else []
            distinct = {} if fresh else _load(ctx, state, dkeys)
        per_group = {g: {} for g in touched}
        for dk, n in distinct.items():
            g, i, v = pickle.loads(bytes.fromhex(dk[1:]))
            per_group[g][(i, v)] = n
        before = {g: agg.output(g, groups[g], types) for g in touched}
        for k in changed:
            if k in old:
                agg.add(groups[old[k][0]], k, old[k][1], -1, per_group[old[k][0]])
            if k in new:
                agg.add(groups[new[k][0]], k, new[k][1], +1, per_group[new[k][0]])
        _refill(ctx, state, agg, groups, new, set(changed))
        after = {g: agg.output(g, groups[g], types) for g in touched}
        origin = origin_from_checkpoint(ctx.store, table.checkpoint, batch_id)
        meta = ctx.store.get_table(table.name)
        writer, seq = None, batch_id
        if fresh:  # built from the input's current rows: a replay differs
            writer, seq = rebuild_seq(ctx, state)
            result = pa.Table.from_pylist([r for r in after.values() if r is not None], schema=out_schema)
            writes = output_difference(ctx, result)
        else:
            writes = _changes(meta, table.primary_key, before, after, out_schema)
        written = write_output(ctx, writes, seq, origin, writer=writer)
        state.write(_state_rows(state, old, new, changed, groups, per_group), seq, writer=writer)
        _finish(ctx, started, len(changed), written, origin)

    return run


def _distinct_keys(facts: GroupAggregate, contributions) -> list[str]:
    out = set()
    for g, values in contributions:
        for i, a in enumerate(facts.aggregations):
            if a.function == "count_distinct" and values.get(a.column) is not None:
                out.add("d" + pickle.dumps((g, i, values[a.column])).hex())
    return sorted(out)


def _refill(ctx, state: StateTable, agg: Aggregator, groups: dict, new: dict, changed: set[str]) -> None:
    """min/max whose best pairs ran out while the group still has values: rebuilt from the group's
    contributions (a scan of the state: rare — K best values of one group were retracted)."""
    need = {
        g
        for g, grp in groups.items()
        for a, acc in zip(agg.facts.aggregations, grp.accs)
        if a.function in ("min", "max") and acc.count > 0 and not acc.best and not acc.complete
    }
    if not need:
        return
    stored = ctx.store.scan(state.name)
    rows = {}
    for key, value in zip(stored.column("key").to_pylist(), stored.column("value").to_pylist()):
        if key.startswith("c") and key[1:] not in changed:
            rows[key[1:]] = pickle.loads(value)
    rows.update(new)
    for g in need:
        grp = groups[g]
        for i, a in enumerate(agg.facts.aggregations):
            acc = grp.accs[i]
            if a.function in ("min", "max") and acc.count > 0 and not acc.best:
                acc.complete = True
                for k, (kg, values) in rows.items():
                    if kg == g and values.get(a.column) is not None:
                        agg._best(acc, a.function, values[a.column], k, +1)


def _changes(meta, key, before: dict, after: dict, schema: pa.Schema) -> pa.Table | None:
    gone = [
        b
        for g, b in before.items()
        if b is not None and (after[g] is None or _pk(b, key) != _pk(after[g], key))
    ]
    up = [a for g, a in after.items() if a is not None and a != before[g]]
    parts = []
    if gone:
        parts.append(keys_table(meta.schema, pa.Table.from_pylist(gone, schema=schema), key, DELETE))
    if up:
        parts.append(keys_table(meta.schema, pa.Table.from_pylist(up, schema=schema), key, UPDATE_AFTER))
    return pa.concat_tables(parts) if parts else None


def _pk(row: dict, key) -> tuple:
    return tuple(row[k] for k in key)


def _state_rows(state: StateTable, old, new, changed, groups, per_group) -> pa.Table:
    ups, downs = {}, []
    for k in changed:
        if k in new:
            ups[f"c{k}"] = pickle.dumps(new[k])
        elif k in old:
            downs.append(f"c{k}")
    for g, grp in groups.items():
        if grp.rows > 0:
            ups[f"g{g!r}"] = pickle.dumps(grp)
        else:
            downs.append(f"g{g!r}")
        for (i, v), n in per_group[g].items():
            dk = "d" + pickle.dumps((g, i, v)).hex()
            if n > 0:
                ups[dk] = pickle.dumps(n)
            else:
                downs.append(dk)
    return kv_state_rows(state, ups, downs)
