"""The ``join_changelog`` strategy's state: the rows of two primary-key inputs, partitioned by join key
(docs/architecture.md, "Incremental maintenance").

With an equi-join, the output rows that join key value ``k`` produces depend only on the input rows of either
side whose join key is ``k`` (filters and projections above and below the join are row-wise; an outer join's
unmatched row depends on the other side's rows with its key, all in the partition). A row whose join key has
a NULL never matches: it is a partition of its own (``n<side><input key>``), its output depends on it alone.

The state is a key-value table (``key string, value binary``, pickled values): ``p<side><partition>`` → the
rows of that side in the partition (``{input key: row}``), ``h<side><input key>`` → the row's partition (its
*home*, so a row whose join key changes leaves its old partition). Per micro-batch each changed key's last
image replaces its row: applying an image twice changes nothing. A side whose rows never change (a log
input's rows of ``join_log``: *fixed*) has no homes: a row enters its partition once, and a replay adds it
there again under the same key. A fixed side's rows that a *delta* partition gains (:class:`Step`) go to a
chunk of their own, ``c<side><partition>:<tag>`` (the tag: the least key of its rows, the same in a replay),
listed by ``x<side><partition>``, so such a micro-batch neither reads nor rewrites the rows already there; a
partition evaluated whole folds its chunks into its ``p`` entry, as does one with :data:`MAX_CHUNKS` chunks.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pyarrow as pa

from materializer.incremental.common import key_tuples
from materializer.incremental.joinfacts import EquiJoin

SCHEMA = pa.schema([("key", pa.string()), ("value", pa.binary())])
SIDES = ("l", "r")
MAX_CHUNKS = 32  # a partition with this many chunks of new fixed rows is evaluated whole, and compacted


def _norm(value):
    """A join key value as Spark compares it: -0.0 equals 0.0 (and NaN equals NaN: repr(nan) is 'nan')."""
    return value + 0.0 if isinstance(value, float) else value


def partition_of(values: tuple, side: str, pk: str) -> str:
    if any(v is None for v in values):
        return f"n{side}{pk}"
    return "k" + repr(tuple(_norm(v) for v in values))


@dataclass
class Change:
    """One side's changes in a micro-batch: the new rows (``{input key: (partition, row)}``) and every
    changed input key (those without a new row were deleted)."""

    rows: dict[str, tuple[str, dict]]
    keys: list[str]


# the sides whose unmatched rows an outer join keeps (NULL-padded)
PRESERVED = {"inner": (), "left": ("l",), "right": ("r",), "full": ("l", "r")}


@dataclass
class Step:
    """The partitions a micro-batch touches, before and after its changes, and the changed rows' homes.

    ``delta``: the partitions whose result only *gains* rows — a fixed side's new rows joined with the other
    side's unchanged rows, in a join that keeps no unmatched row of that other side (inner, or outer on the
    fixed side only). Their output rows are the SQL over those new rows alone: the rows already there stay
    (each came from one fixed row, which never changes), so they are neither evaluated nor diffed."""

    before: dict[tuple[str, str], dict[str, dict]]  # (side, partition) -> {input key: row}
    after: dict[tuple[str, str], dict[str, dict]]
    homes: dict[tuple[str, str], str | None] = field(default_factory=dict)  # (side, key) -> partition
    delta: frozenset[str] = frozenset()
    # of a delta partition: the fixed side's new rows (its rows already there are not loaded)
    new: dict[tuple[str, str], dict[str, dict]] = field(default_factory=dict)
    chunks: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # a fixed side's chunk tags

    def rows(self, which: str, side: str) -> list[dict]:
        """The rows the SQL runs over: the touched partitions' rows before or after the changes, but of a
        delta partition nothing before, and after only the fixed side's new rows (the other side's whole)."""
        parts = self.before if which == "before" else self.after
        out = [
            r
            for (s, p), rows in parts.items()
            if s == side and (which == "after" or p not in self.delta)
            for r in rows.values()
        ]
        if which == "after":
            out += [r for (s, _), rows in self.new.items() if s == side for r in rows.values()]
        return out


class Partitioner:
    def __init__(
        self, facts: EquiJoin, primary_keys: dict[str, tuple[str, ...]], fixed: frozenset[str] = frozenset()
    ) -> None:
        self.facts = facts
        self.primary_keys = primary_keys
        self.fixed = fixed  # sides whose rows never change or leave (no homes kept)
        self.join_keys = {"l": [a for a, _ in facts.keys], "r": [b for _, b in facts.keys]}

    def members(self, side: str, rows: pa.Table) -> dict[str, tuple[str, dict]]:
        """``{input key: (partition, row)}`` of input rows of one side."""
        pks = [repr(k) for k in key_tuples(rows, self.primary_keys[side])]
        joins = key_tuples(rows, self.join_keys[side])
        return {pk: (partition_of(j, side, pk), row) for pk, j, row in zip(pks, joins, rows.to_pylist())}

    def change(self, side: str, images: pa.Table, keys: pa.Table) -> Change:
        return Change(
            self.members(side, images), [repr(k) for k in key_tuples(keys, self.primary_keys[side])]
        )

    def step(
        self,
        changes: dict[str, Change],
        load: Callable[[list[str]], dict[str, object]],
    ) -> Step:
        """Load the homes of the changed keys and the partitions they leave or enter (both sides), and apply
        the changes. ``load`` looks state keys up (missing ones absent)."""
        homes = load([f"h{s}{k}" for s, c in changes.items() if s not in self.fixed for k in c.keys])
        touched, by = set(), {}
        for s, c in changes.items():
            by[s] = {homes[f"h{s}{k}"] for k in c.keys if f"h{s}{k}" in homes} | {
                p for p, _ in c.rows.values()
            }
            touched |= by[s]
        indexes = load([f"x{s}{p}" for p in sorted(touched) for s in sorted(self.fixed)])
        chunks = {(s, p): indexes[f"x{s}{p}"] for p in touched for s in self.fixed if f"x{s}{p}" in indexes}
        delta = frozenset(
            p for p in self._delta(by) if all(len(chunks.get((s, p), ())) < MAX_CHUNKS for s in self.fixed)
        )
        whole = [(s, p) for p in sorted(touched) for s in SIDES if not (p in delta and s in self.fixed)]
        found = load(
            [f"p{s}{p}" for s, p in whole]
            + [f"c{s}{p}:{t}" for s, p in whole for t in chunks.get((s, p), ())]
        )
        before = {}
        for s, p in whole:
            rows = before[(s, p)] = dict(found.get(f"p{s}{p}", {}))
            for t in chunks.get((s, p), ()):
                rows.update(found[f"c{s}{p}:{t}"])  # listed, so written in the same state write
        after = {sp: dict(rows) for sp, rows in before.items()}
        step = Step(before, after, delta=delta, chunks=chunks)
        for s, c in changes.items():
            for k in c.keys:
                old = homes.get(f"h{s}{k}")
                if old is not None:
                    after[(s, old)].pop(k, None)
                new = c.rows.get(k)
                if new is not None and new[0] in delta and s in self.fixed:
                    step.new.setdefault((s, new[0]), {})[k] = new[1]
                elif new is not None:
                    after[(s, new[0])][k] = new[1]
                if s not in self.fixed:
                    step.homes[(s, k)] = new[0] if new is not None else None
        return step

    def _delta(self, by: dict[str, set[str]]) -> frozenset[str]:
        """The partitions only a fixed side touched, when the join keeps no unmatched row of another side."""
        if not self.fixed or set(PRESERVED[self.facts.kind]) - self.fixed:
            return frozenset()
        others = set().union(*(parts for s, parts in by.items() if s not in self.fixed))
        return frozenset(p for s in self.fixed for p in by.get(s, ()) if p not in others)

    def rebuild(self, rows: dict[str, pa.Table]) -> tuple[dict[str, bytes], Step]:
        """Every state entry of the inputs' current rows, and a step from nothing to them."""
        after: dict[tuple[str, str], dict[str, dict]] = {}
        homes = {}
        for s in SIDES:
            for k, (p, row) in self.members(s, rows[s]).items():
                after.setdefault((s, p), {})[k] = row
                if s not in self.fixed:
                    homes[(s, k)] = p
        step = Step({sp: {} for sp in after}, after, homes)
        ups, _ = state_entries(step)
        return ups, step


def state_entries(step: Step) -> tuple[dict[str, bytes], list[str]]:
    """(state entries to upsert, state keys to delete) after ``step``."""
    ups, downs = {}, []
    for (s, k), home in step.homes.items():
        if home is None:
            downs.append(f"h{s}{k}")
        else:
            ups[f"h{s}{k}"] = pickle.dumps(home)
    for (s, p), rows in step.new.items():  # a delta partition's new fixed rows: one chunk more
        tag = min(rows)
        index = step.chunks.get((s, p), [])
        ups[f"c{s}{p}:{tag}"] = pickle.dumps(rows)
        if tag not in index:  # else a replay
            ups[f"x{s}{p}"] = pickle.dumps([*index, tag])
    for (s, p), rows in step.after.items():
        if rows == step.before.get((s, p)):
            continue  # unchanged (a replay, or the other side's partition)
        if rows:
            ups[f"p{s}{p}"] = pickle.dumps(rows)
        elif step.before.get((s, p)):
            downs.append(f"p{s}{p}")
        if (s, p) in step.chunks:  # folded into the partition's entry
            downs += [f"c{s}{p}:{t}" for t in step.chunks[(s, p)]] + [f"x{s}{p}"]
    return ups, downs


def difference(
    old_keys: list[tuple], old_rows: list[dict], new_keys: list[tuple], new_rows: list[dict]
) -> tuple[list[bool], list[bool]]:
    """Which output rows of the touched partitions' result before (``old``) are gone after (their key is not
    produced any more), and which rows after (``new``) are new or changed."""
    old = dict(zip(old_keys, old_rows))
    now = set(new_keys)
    return [k not in now for k in old_keys], [old.get(k) != row for k, row in zip(new_keys, new_rows)]


def decode(keys: Iterable[str], values: Iterable[bytes]) -> dict[str, object]:
    return dict(zip(keys, map(pickle.loads, values)))
