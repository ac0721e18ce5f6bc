"""The join_changelog state logic without Spark, against brute force over random changes of both sides:
updates, deletes, rows that change join key, NULL join keys, composite keys, replays and rebuilds. The join
itself is evaluated by a brute-force nested loop over whatever rows it is given — over the touched partitions
for the incremental side, over every current row for the oracle — so what is checked is that the partitions
hold exactly the rows that decide the output of the changed keys."""

from __future__ import annotations

import pickle
import random

import pyarrow as pa
import pytest

import materializer.incremental.join as join_mod
from materializer.incremental.join import Partitioner, difference, partition_of, state_entries
from materializer.incremental.joinfacts import EquiJoin

LEFT = pa.schema([("id", pa.int64()), ("k", pa.string()), ("k2", pa.int64()), ("v", pa.int64())])
RIGHT = pa.schema([("rid", pa.int64()), ("k", pa.string()), ("j", pa.int64()), ("w", pa.int64())])


def brute(kind: str, keys, left: list[dict], right: list[dict]) -> dict[tuple, tuple]:
    """The join's output rows by output key (left id, right id), as SQL defines them (NULL never equals)."""

    def match(a, b):
        return all(a[x] is not None and a[x] == b[y] for x, y in keys)

    out, used = {}, set()
    for a in left:
        hits = [b for b in right if match(a, b)]
        for b in hits:
            out[(a["id"], b["rid"])] = (a["v"], b["w"])
            used.add(b["rid"])
        if not hits and kind in ("left", "full"):
            out[(a["id"], None)] = (a["v"], None)
    if kind in ("right", "full"):
        for b in right:
            if b["rid"] not in used:
                out[(None, b["rid"])] = (None, b["w"])
    return out


def _rows(out: dict) -> tuple[list[tuple], list[dict]]:
    keys = list(out)
    return keys, [{"key": k, "vals": v} for k, v in out.items()]


class Kv:
    """The state table, as a dict of pickled values."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def load(self, keys):
        return {k: pickle.loads(self.data[k]) for k in keys if k in self.data}

    def apply(self, ups: dict, downs: list) -> None:
        for k in downs:
            self.data.pop(k, None)
        self.data.update(ups)


def _logical(kv: Kv) -> dict[str, object]:
    """The state's entries with each partition's chunks (``c<side><partition>:<tag>``, listed by
    ``x<side><partition>``) folded into its ``p`` entry; a chunk no index lists fails."""
    out = {k: pickle.loads(v) for k, v in kv.data.items() if k[0] in "hp"}
    listed = set()
    for k, v in kv.data.items():
        if k[0] == "x":
            for tag in pickle.loads(v):
                out.setdefault("p" + k[1:], {}).update(pickle.loads(kv.data[f"c{k[1:]}:{tag}"]))
                listed.add(f"c{k[1:]}:{tag}")
    assert listed == {k for k in kv.data if k[0] == "c"}
    return out


def _random_row(rng, side: str, i: int) -> dict:
    k = rng.choice([None, "a", "b", "c", "d", "e"]) if rng.random() < 0.15 else rng.choice("abcde")
    if side == "l":
        return {"id": i, "k": k, "k2": rng.choice([1, 2]), "v": rng.randrange(100)}
    return {"rid": i, "k": k, "j": rng.choice([1, 2]), "w": rng.randrange(100)}


@pytest.mark.parametrize("kind", ["inner", "left", "right", "full"])
@pytest.mark.parametrize("composite", [False, True])
@pytest.mark.parametrize("fixed_left", [False, True])
def test_partitions_follow_random_changes_of_both_sides(seed, kind, composite, fixed_left, monkeypatch):
    """``fixed_left``: the left side only gains rows that never change (join_log's log), no homes; new rows of
    a delta partition go to chunks, folded in after at most 3 (``MAX_CHUNKS``)."""
    monkeypatch.setattr(join_mod, "MAX_CHUNKS", 3)
    rng = random.Random(seed)
    keys = (("k", "k"), ("k2", "j")) if composite else (("k", "k"),)
    facts = EquiJoin(kind, "a", "b", keys)
    fixed = frozenset({"l"} if fixed_left else ())
    parts = Partitioner(facts, {"l": ("id",), "r": ("rid",)}, fixed)
    state = {"l": {}, "r": {}}  # the inputs' current rows by id
    kv, output = Kv(), {}
    moves = deletes = deltas = 0
    chunked = folded = 0
    for step_no in range(120):
        changes = {}
        for side, schema, pk in (("l", LEFT, "id"), ("r", RIGHT, "rid")):
            if rng.random() < 0.3:
                continue  # a batch may change one side only
            changed = set()
            for _ in range(rng.randrange(1, 6)):
                if side in fixed:  # a new row, never changed after
                    i = len(state[side])
                    state[side][i] = _random_row(rng, side, i)
                    changed.add(i)
                    continue
                i = rng.randrange(25)
                changed.add(i)
                if i in state[side] and rng.random() < 0.3:
                    del state[side][i]
                    deletes += 1
                else:
                    row = _random_row(rng, side, i)
                    moves += i in state[side] and state[side][i]["k"] != row["k"]
                    state[side][i] = row
            images = pa.Table.from_pylist(
                [state[side][i] for i in sorted(changed) if i in state[side]], schema
            )
            changes[side] = parts.change(side, images, pa.table({pk: sorted(changed)}))
        if not changes:
            continue
        for attempt in range(2 if rng.random() < 0.2 else 1):  # a replay after the state was written
            step = parts.step(changes, kv.load)
            deltas += len(step.delta)
            before = brute(kind, keys, step.rows("before", "l"), step.rows("before", "r"))
            after = brute(kind, keys, step.rows("after", "l"), step.rows("after", "r"))
            gone, changed_rows = difference(*_rows(before), *_rows(after))
            written = dict(output)
            for k, g in zip(before, gone):
                if g:
                    del output[k]
            for (k, v), c in zip(after.items(), changed_rows):
                if c:
                    assert k not in output or k in before or output[k] == v, "an entering key is taken"
                    output[k] = v
            if attempt:  # a replay writes nothing new (a delta partition's rows again, equal)
                assert output == written, "a replay changes nothing"
            ups, downs = state_entries(step)
            chunked += any(k[0] == "c" for k in ups)
            folded += any(k[0] == "c" for k in downs)
            kv.apply(ups, downs)
        expected = brute(kind, keys, list(state["l"].values()), list(state["r"].values()))
        assert output == expected, (kind, composite, seed, step_no)
        if rng.random() < 0.05:  # behind retention: the state rebuilt from both inputs
            ups, step = parts.rebuild(
                {
                    "l": pa.Table.from_pylist(list(state["l"].values()), LEFT),
                    "r": pa.Table.from_pylist(list(state["r"].values()), RIGHT),
                }
            )
            rebuilt = Kv()
            rebuilt.apply(ups, [])
            assert _logical(rebuilt) == _logical(kv)  # chunks folded in: the same rows per partition
    assert moves and deletes  # rows changed join key, rows were deleted
    assert not fixed_left or not [k for k in kv.data if k.startswith("hl")]  # no homes of fixed rows
    # a log joined so that no unmatched dimension row shows (inner; left, the log being left) only gains rows
    # where the dimension did not change: those partitions are not re-evaluated
    assert (deltas > 0) == (fixed_left and kind in ("inner", "left")), deltas
    assert (chunked > 0 and folded > 0) == (deltas > 0), (chunked, folded)


def test_state_holds_only_live_rows():
    """A row deleted or moved leaves its partition; an empty partition's entry is deleted."""
    facts = EquiJoin("inner", "a", "b", (("k", "k"),))
    parts = Partitioner(facts, {"l": ("id",), "r": ("rid",)})
    kv = Kv()
    rows = pa.Table.from_pylist([{"id": 1, "k": "a", "k2": 1, "v": 5}], LEFT)
    kv.apply(*state_entries(parts.step({"l": parts.change("l", rows, pa.table({"id": [1]}))}, kv.load)))
    assert set(kv.data) == {"hl(1,)", "plk('a',)"}
    moved = pa.Table.from_pylist([{"id": 1, "k": "b", "k2": 1, "v": 5}], LEFT)
    kv.apply(*state_entries(parts.step({"l": parts.change("l", moved, pa.table({"id": [1]}))}, kv.load)))
    assert set(kv.data) == {"hl(1,)", "plk('b',)"}
    gone = LEFT.empty_table()
    kv.apply(*state_entries(parts.step({"l": parts.change("l", gone, pa.table({"id": [1]}))}, kv.load)))
    assert kv.data == {}


def test_null_keys_are_partitions_of_their_own_and_floats_compare_as_spark():
    assert partition_of((None,), "l", "(1,)") != partition_of((None,), "l", "(2,)")
    assert partition_of((None, "x"), "l", "(1,)") != partition_of((None, "x"), "r", "(1,)")
    assert partition_of((-0.0,), "l", "(1,)") == partition_of((0.0,), "r", "(7,)")
    assert partition_of((float("nan"),), "l", "(1,)") == partition_of((float("nan"),), "r", "(7,)")
    assert partition_of(("a", 1), "l", "(1,)") == partition_of(("a", 1), "r", "(2,)")


def _explain(body: str) -> str:
    return (
        "== Parsed Logical Plan ==\nx\n\n== Analyzed Logical Plan ==\nid: bigint\n"
        + body
        + "\n\n== Optimized"
    )


SIDES = """   :- SubqueryAlias a
   :  +- View (`a`, [id#8L, k#9, v#10])
   :     +- LogicalRDD [id#8L, k#9, v#10], false
   +- SubqueryAlias b
      +- View (`b`, [id#11L, k#12, w#13, k2#14])
         +- LogicalRDD [id#11L, k#12, w#13, k2#14], false"""

PLANS = [
    # (analysed plan, the join recognized, or the words of why not)
    (
        "Project [id#8L, id#11L AS bid#19L, (v#10 + w#13) AS s#20]\n+- Filter (v#10 > 1)\n"
        "   +- Join Inner, ((k#9 = k#12) AND (k2#14 = v#10))\n"
        + "\n".join("   " + line for line in SIDES.splitlines()),
        EquiJoin("inner", "a", "b", (("k", "k"), ("v", "k2"))),
    ),
    (
        "Project [id#8L, id#11L AS bid#22L]\n+- Join FullOuter, (k#9 = k#12)\n" + SIDES,
        EquiJoin("full", "a", "b", (("k", "k"),)),
    ),
    ("Project [id#8L]\n+- Join RightOuter, ((k#9 = k#12) AND (w#13 > 3))\n" + SIDES, "w#13 > 3"),
    (  # a filter below the join, on b's side: recorded (join_log in tasks needs an unfiltered log side)
        "Project [id#8L]\n+- Join RightOuter, (k#9 = k#12)\n"
        + SIDES.replace(
            "      +- View (`b`, [id#11L, k#12, w#13, k2#14])\n         +- LogicalRDD",
            "      +- Filter (w#13 > 3)\n         +- View (`b`, [id#11L, k#12, w#13, k2#14])\n"
            "            +- LogicalRDD",
        ),
        EquiJoin("right", "a", "b", (("k", "k"),), ("r",)),
    ),
    ("Project [id#8L]\n+- Join Inner, (upper(k#9) = k#12)\n" + SIDES, "not an equality"),
    ("Project [id#8L]\n+- Join Inner, (k#9 <=> k#12)\n" + SIDES, "not an equality"),
    ("Project [id#8L]\n+- Join LeftAnti, (k#9 = k#12)\n" + SIDES, "LeftAnti join"),
    ("Project [id#8L]\n+- Join Cross\n" + SIDES, "Cross join"),
    (
        "Aggregate [k#9], [k#9, count(1) AS n#30L]\n+- Join Inner, (k#9 = k#12)\n" + SIDES,
        "Aggregate above the join",
    ),
    (
        "Project [id#8L]\n+- Join Inner, (k#9 = k#12)\n"
        + SIDES.replace("SubqueryAlias b", "SubqueryAlias a"),
        "",  # both sides name their own view: b is not a
    ),
]


@pytest.mark.parametrize("body,expected", PLANS)
def test_the_recognizer_reads_equi_joins_of_two_inputs(body, expected):
    from materializer.plantext import shape_of

    shape = shape_of(_explain(body))
    if isinstance(expected, EquiJoin):
        assert (shape.join, shape.join_refusal) == (expected, "")
    elif expected:
        assert shape.join is None and expected in shape.join_refusal
    else:
        assert shape.join is not None


def test_self_join_and_computed_side_keys_stay_recompute():
    from materializer.plantext import shape_of

    self_join = SIDES.replace(
        "View (`b`, [id#11L, k#12, w#13, k2#14])", "View (`a`, [id#11L, k#12, w#13, k2#14])"
    )
    shape = shape_of(_explain("Project [id#8L]\n+- Join Inner, (k#9 = k#12)\n" + self_join))
    assert shape.join is None and shape.join_refusal == "a self-join"
    computed = SIDES.replace(
        "   :- SubqueryAlias a\n   :  +- View",
        "   :- Project [id#8L, upper(k#9) AS kk#40]\n   :  +- View",
    )
    shape = shape_of(_explain("Project [id#8L]\n+- Join Inner, (kk#40 = k#12)\n" + computed))
    assert shape.join is None and "does not compare an input column of each side" in shape.join_refusal
    renamed = computed.replace("upper(k#9) AS kk#40", "k#9 AS kk#40")
    shape = shape_of(_explain("Project [id#8L]\n+- Join Inner, (kk#40 = k#12)\n" + renamed))
    assert shape.join == EquiJoin("inner", "a", "b", (("k", "k"),))


JOIN = EquiJoin("left", "orders", "customers", (("customer_id", "id"),))


@pytest.mark.parametrize(
    "inputs,expected",
    [
        ([("orders", "primary_key"), ("customers", "primary_key")], "join_changelog"),
        # a log joined with a primary-key table into a primary-key table: batch semantics (join_log)
        ([("orders", "log"), ("customers", "primary_key")], "join_log"),
        ([("orders", "primary_key"), ("other", "primary_key")], "recompute"),  # not the join's inputs
    ],
)
def test_decide_keeps_equi_joins_of_two_primary_key_tables(inputs, expected):
    from materializer.shape import SqlShape, decide

    shape = SqlShape(frozenset({"Project", "Join", "SubqueryAlias", "View"}), "Join", join=JOIN)
    decision = decide("ads.x", shape, inputs, primary_key=("order_id",))
    assert decision.strategy == expected
    if expected == "join_changelog":
        assert decision.reason.startswith(
            "left join of orders and customers ON orders.customer_id = customers.id"
        )


def test_a_log_joined_into_a_log_table_needs_processing_time_lookups_asked_for():
    from materializer.shape import SqlShape, batch_exceptions, decide
    from runtime.core.errors import TidehouseError

    shape = SqlShape(frozenset({"Project", "Join", "SubqueryAlias", "View"}), "Join", join=JOIN)
    inputs = [("orders", "log"), ("customers", "primary_key")]
    with pytest.raises(TidehouseError, match="cannot be revised"):  # an append-only output
        decide("ads.x", shape, inputs)
    asked = decide("ads.x", shape, inputs, lookups_at="processing_time")
    assert asked.strategy == "append"
    assert [e.kind for e in batch_exceptions("append", shape, inputs)] == ["lookup"]
    assert batch_exceptions("join_log", shape, inputs) == ()
    # a merge engine combines the rows a stateless query writes: a lookup join there only when asked for
    with pytest.raises(TidehouseError, match="merge engine 'partial_update'"):
        decide("ads.x", shape, inputs, primary_key=("order_id",), merge_engine="partial_update")
    merged = decide(
        "ads.x",
        shape,
        inputs,
        primary_key=("order_id",),
        merge_engine="partial_update",
        lookups_at="processing_time",
    )
    assert merged.strategy == "append"


def test_a_refused_join_says_why_in_the_recompute_reason():
    from materializer.shape import SqlShape, decide

    shape = SqlShape(frozenset({"Project", "Join"}), "Join", join_refusal="a self-join")
    decision = decide("ads.x", shape, [("a", "primary_key"), ("b", "primary_key")], primary_key=("id",))
    assert decision.strategy == "recompute" and "join (a self-join)" in decision.reason
