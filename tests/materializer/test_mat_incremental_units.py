"""The incremental strategies' state logic without Spark, against brute force over random changes with
retractions: the top-N buffer (apply / refill, rank and row_number, ties) and the group accumulators
(count, sum, avg, min/max whose extreme is deleted, count DISTINCT, HAVING)."""

from __future__ import annotations

import random
from collections import Counter
from fractions import Fraction

import pyarrow as pa

from materializer.incremental.aggregate import Aggregator, Group
from materializer.incremental.facts import Aggregation, Comparison, GroupAggregate, OrderKey, TopN
from materializer.incremental.topn import Buffer, decided

SCHEMA = pa.schema([("id", pa.int64()), ("score", pa.int64()), ("grp", pa.string()), ("x", pa.float64())])


def _changes(rng: random.Random, state: dict, n: int, keys: int) -> tuple[list[dict], list[int]]:
    """n random upserts/deletes applied to ``state``; returns (images, changed keys)."""
    changed = set()
    for _ in range(n):
        k = rng.randrange(keys)
        changed.add(k)
        if k in state and rng.random() < 0.35:
            del state[k]
        else:
            state[k] = {
                "id": k,
                "score": rng.choice([None, *range(12)]) if rng.random() < 0.1 else rng.randrange(12),
                "grp": rng.choice("abc"),
                "x": rng.choice([None, round(rng.uniform(-5, 5), 2)]),
            }
    return [state[k] for k in sorted(changed) if k in state], sorted(changed)


def _topn(rows: list[dict], facts: TopN) -> Counter:
    """Brute force: rank / row_number over score DESC NULLS LAST, then id, rank <= N (as multisets)."""
    ordered = sorted(rows, key=lambda r: (r["score"] is None, -(r["score"] or 0), r["id"]))
    out = Counter()
    for i, r in enumerate(ordered):
        rank = i + 1
        if facts.function == "rank":
            rank = 1 + sum(1 for o in ordered if o["score"] != r["score"] and _better(o, r))
        if rank <= facts.limit:
            out[(rank, r["id"])] += 1
    return out


def _better(a: dict, b: dict) -> bool:
    if a["score"] is None:
        return False
    return b["score"] is None or a["score"] > b["score"]


def test_topn_buffer_follows_random_changes(seed):
    rng = random.Random(seed)
    for function in ("row_number", "rank"):
        order = (OrderKey("score", True, False),) + (
            (OrderKey("id", False, True),) if function == "row_number" else ()
        )
        facts = TopN(function, 3, order)
        buf = Buffer(facts, ("id",))
        state: dict = {}
        buffer = SCHEMA.empty_table()
        refills = applies = 0
        for _ in range(150):
            images, changed = _changes(rng, state, rng.randrange(1, 8), 60)
            new = buf.apply(buffer, pa.Table.from_pylist(images, schema=SCHEMA), pa.table({"id": changed}))
            if new is None:
                refills += 1
                new = buf.refill(pa.Table.from_pylist(list(state.values()), schema=SCHEMA))
            else:
                applies += 1
            buffer = new
            got = _topn(buffer.to_pylist(), facts)
            assert got == _topn(list(state.values()), facts), (function, seed)
        assert applies > refills > 0  # both paths ran


def test_topn_buffer_keeps_up_with_growing_totals_without_a_refill(seed):
    """Every batch raises the scores of many keys, the buffered ones among them (a top-N of totals that only
    grow, as spend per user): the buffer is every row up to its old last row, never a scan of the state."""
    rng = random.Random(seed)
    facts = TopN("row_number", 3, (OrderKey("score", True, False), OrderKey("id", False, True)))
    buf = Buffer(facts, ("id",))
    state = {k: {"id": k, "score": rng.randrange(50), "grp": "a", "x": None} for k in range(200)}
    buffer = buf.refill(pa.Table.from_pylist(list(state.values()), schema=SCHEMA))
    for step in range(40):
        best = [r["id"] for r in buffer.to_pylist()]
        changed = sorted(set(best) | set(rng.sample(range(200), 60)))
        for k in changed:
            state[k]["score"] += rng.randrange(1, 30)
        images = pa.Table.from_pylist([state[k] for k in changed], schema=SCHEMA)
        new = buf.apply(buffer, images, pa.table({"id": changed}))
        assert new is not None, (step, seed)  # decided from the old last row on: no refill
        buffer = new
        assert _topn(buffer.to_pylist(), facts) == _topn(list(state.values()), facts), (step, seed)


def test_decided_needs_a_row_past_the_ties():
    facts = TopN("rank", 2, (OrderKey("score", True, False),))
    rows = pa.table({"score": [9, 5, 5, 5]})
    assert decided(rows, facts) is None  # every row may rank <= 2
    assert decided(pa.table({"score": [9, 5, 5, 4]}), facts) == 4


def _aggregate(rows: list[dict]) -> dict:
    out = {}
    for g in sorted({r["grp"] for r in rows}):
        mine = [r for r in rows if r["grp"] == g]
        xs = [r["x"] for r in mine if r["x"] is not None]
        scores = [r["score"] for r in mine if r["score"] is not None]
        row = {
            "grp": g,
            "n": len(mine),
            "sx": round(float(sum(map(Fraction, xs))), 9) if xs else None,
            "ax": round(float(sum(map(Fraction, xs)) / len(xs)), 9) if xs else None,
            "lo": min(scores) if scores else None,
            "hi": max(xs) if xs else None,
            "kinds": len(set(scores)),
        }
        if row["n"] >= 3:
            out[g] = row
    return out


def test_accumulators_follow_random_changes(seed, monkeypatch):
    import materializer.incremental.aggregate as aggregate

    monkeypatch.setattr(aggregate, "BEST", 2)  # min/max pairs run out often: refills happen
    rng = random.Random(seed)
    refills = 0
    facts = GroupAggregate(
        ("grp",),
        (
            Aggregation("count", None, "n"),
            Aggregation("sum", "x", "sx"),
            Aggregation("avg", "x", "ax"),
            Aggregation("min", "score", "lo"),
            Aggregation("max", "x", "hi"),
            Aggregation("count_distinct", "score", "kinds"),
        ),
        (Comparison("n", ">=", 3),),
        (
            ("grp", "grp"),
            ("n", "n"),
            ("sx", "sx"),
            ("ax", "ax"),
            ("lo", "lo"),
            ("hi", "hi"),
            ("kinds", "kinds"),
        ),
    )
    agg = Aggregator(facts, ("id",))
    state: dict = {}
    contributions: dict = {}
    groups: dict = {}
    distinct: dict = {}
    for _ in range(200):
        images, changed = _changes(rng, state, rng.randrange(1, 10), 40)
        new = agg.contribution(pa.Table.from_pylist(images, schema=SCHEMA))
        for k in (repr((c,)) for c in changed):
            if k in contributions:
                g, values = contributions.pop(k)
                agg.add(groups[g], k, values, -1, distinct.setdefault(g, {}))
            if k in new:
                g, values = new[k]
                contributions[k] = new[k]
                agg.add(
                    groups.setdefault(g, Group(facts.aggregations)), k, values, +1, distinct.setdefault(g, {})
                )
        for g, grp in groups.items():  # a refill, as the batch function does, from the contributions
            for a, acc in zip(facts.aggregations, grp.accs):
                if a.function in ("min", "max") and acc.count > 0 and not acc.best and not acc.complete:
                    refills += 1
                    acc.complete = True
                    for k, (kg, values) in contributions.items():
                        if kg == g and values[a.column] is not None:
                            agg._best(acc, a.function, values[a.column], k, +1)
        got = {}
        for g, grp in groups.items():
            row = agg.output(g, grp, {})
            if row is not None:
                got[g[0]] = {k: round(v, 9) if isinstance(v, float) else v for k, v in row.items()} | {
                    "grp": g[0]
                }
        assert got == _aggregate(list(state.values())), seed
    assert refills > 0


FRAME = "specifiedwindowframe(RowFrame, unboundedpreceding$(), currentrow$())"
# analysed plans of three top-N queries as Spark 4 prints them (the window's frame shortened to FRAME)
_TOPN_PLANS = {
    # SELECT * FROM (SELECT row_number() OVER (ORDER BY spend DESC, user_id ASC) AS rank, * FROM rows)
    # WHERE rank <= 100
    "plain": "\n".join(
        [
            "Project [rank#2, user_id#0, spend#1]",
            "+- Filter (rank#2 <= 100)",
            "   +- SubqueryAlias __auto_generated_subquery_name",
            "      +- Project [rank#2, user_id#0, spend#1]",
            "         +- Project [user_id#0, spend#1, rank#2, rank#2]",
            "            +- Window [row_number() windowspecdefinition("
            "spend#1 DESC NULLS LAST, user_id#0 ASC NULLS FIRST, "
            + FRAME
            + ") AS rank#2], [spend#1 DESC NULLS LAST, user_id#0 ASC NULLS FIRST]",
            "               +- Project [user_id#0, spend#1]",
            "                  +- SubqueryAlias rows",
            "                     +- View (`rows`, [user_id#0, spend#1])",
            "                        +- LogicalRDD [user_id#0, spend#1], false",
        ]
    ),
    # ... rank() OVER (ORDER BY spend DESC) AS rank, user_id AS u, spend, upper(user_id) AS up ...
    "computed": "\n".join(
        [
            "Project [rank#4, u#5, spend#1, up#6]",
            "+- Filter (rank#4 <= 3)",
            "   +- SubqueryAlias __auto_generated_subquery_name",
            "      +- Project [rank#4, u#5, spend#1, up#6]",
            "         +- Project [u#5, spend#1, up#6, rank#4, rank#4]",
            "            +- Window [rank(spend#1) windowspecdefinition(spend#1 DESC NULLS LAST, "
            + FRAME
            + ") AS rank#4], [spend#1 DESC NULLS LAST]",
            "               +- Project [user_id#0 AS u#5, spend#1, upper(user_id#0) AS up#6]",
            "                  +- SubqueryAlias rows",
            "                     +- View (`rows`, [user_id#0, spend#1])",
            "                        +- LogicalRDD [user_id#0, spend#1], false",
        ]
    ),
    # SELECT rank AS r, user_id FROM (SELECT dense_rank() OVER (ORDER BY spend DESC) AS rank, * ...)
    # WHERE rank < 4
    "renamed": "\n".join(
        [
            "Project [rank#15 AS r#16, user_id#0]",
            "+- Filter (rank#15 < 4)",
            "   +- SubqueryAlias __auto_generated_subquery_name",
            "      +- Project [rank#15, user_id#0, spend#1]",
            "         +- Project [user_id#0, spend#1, rank#15, rank#15]",
            "            +- Window [dense_rank(spend#1) windowspecdefinition(spend#1 DESC NULLS LAST, "
            + FRAME
            + ") AS rank#15], [spend#1 DESC NULLS LAST]",
            "               +- Project [user_id#0, spend#1]",
            "                  +- SubqueryAlias rows",
            "                     +- View (`rows`, [user_id#0, spend#1])",
            "                        +- LogicalRDD [user_id#0, spend#1], false",
        ]
    ),
}


_TOPN_PLANS["partitioned"] = "\n".join(
    [  # row_number() OVER (PARTITION BY grp ORDER BY spend DESC, user_id ASC) AS rank, * ... WHERE rank <= 3
        "Project [rank#3, user_id#0, grp#1, spend#2]",
        "+- Filter (rank#3 <= 3)",
        "   +- SubqueryAlias __auto_generated_subquery_name",
        "      +- Project [rank#3, user_id#0, grp#1, spend#2]",
        "         +- Project [user_id#0, grp#1, spend#2, rank#3, rank#3]",
        "            +- Window [row_number() windowspecdefinition(grp#1, spend#2 DESC NULLS LAST, "
        "user_id#0 ASC NULLS FIRST, " + FRAME + ") AS rank#3], [grp#1], "
        "[spend#2 DESC NULLS LAST, user_id#0 ASC NULLS FIRST]",
        "               +- Project [user_id#0, grp#1, spend#2]",
        "                  +- SubqueryAlias rows",
        "                     +- View (`rows`, [user_id#0, grp#1, spend#2])",
        "                        +- LogicalRDD [user_id#0, grp#1, spend#2], false",
    ]
)


def test_topn_output_is_read_from_the_plan_or_left_to_spark():
    from materializer.incremental.facts import topn_facts
    from materializer.plantext import parse_tree

    def facts(name):
        return topn_facts(parse_tree("schema line\n" + _TOPN_PLANS[name]))

    assert facts("plain").output == (("rank", None), ("user_id", "user_id"), ("spend", "spend"))
    assert facts("plain").limit == 100
    assert facts("computed").function == "rank" and facts("computed").output is None  # upper(...): Spark
    assert facts("renamed").output == (("r", None), ("user_id", "user_id"))
    assert facts("renamed").limit == 3
    assert facts("plain").partition == ()
    part = facts("partitioned")
    assert part.partition == ("grp",) and [k.column for k in part.order] == ["spend", "user_id"]
    assert "PARTITION BY grp" in part.describe()


def test_ranked_equals_brute_force_ranks_with_ties_and_nan(seed):
    from materializer.incremental.topn import ranked

    rng = random.Random(seed)
    nan = float("nan")
    for function in ("row_number", "rank", "dense_rank"):
        for _ in range(30):
            values = [
                rng.choice([nan, None, 1.0, 2.0, 2.0, 3.0, -0.0, 0.0]) for _ in range(rng.randrange(1, 12))
            ]
            facts = TopN(
                function, rng.randrange(1, 5), (OrderKey("v", True, False),), (("pos", None), ("v", "v"))
            )
            buf = Buffer(facts, ("id",))
            rows = buf.sort(pa.table({"id": list(range(len(values))), "v": pa.array(values, pa.float64())}))
            got = ranked(rows, facts, pa.schema([("pos", pa.int32()), ("v", pa.float64())])).to_pylist()
            # brute force over the same sorted rows: Spark's ranks, NaN equal to NaN and -0.0 to 0.0
            keys = [
                "nan" if v != v and v is not None else (0.0 if v == 0 else v)
                for v in rows.column("v").to_pylist()
            ]
            want = []
            for i in range(len(keys)):
                earlier = keys[:i]
                rank = {
                    "row_number": i + 1,
                    "rank": 1 + sum(1 for k in earlier if k != keys[i]),
                    "dense_rank": 1 + len({k for k in earlier if k != keys[i]}),
                }[function]
                if rank <= facts.limit:
                    want.append(rank)
            assert [r["pos"] for r in got] == want, (function, values, seed)


def test_ranked_restarts_at_each_partition(seed):
    from materializer.incremental.topn import ranked

    rng = random.Random(seed)
    for function in ("row_number", "rank", "dense_rank"):
        facts = TopN(function, 2, (OrderKey("v", True, False),), (("pos", None), ("g", "g"), ("v", "v")))
        rows = [{"g": rng.choice("ab"), "v": rng.choice([1, 2, 2, 3])} for _ in range(rng.randrange(1, 15))]
        rows.sort(key=lambda r: (r["g"], -r["v"]))
        table = pa.Table.from_pylist(rows, schema=pa.schema([("g", pa.string()), ("v", pa.int64())]))
        schema = pa.schema([("pos", pa.int32()), ("g", pa.string()), ("v", pa.int64())])
        got = ranked(table, facts, schema, [r["g"] for r in rows]).to_pylist()
        want = []
        for g in ("a", "b"):
            vs = [r["v"] for r in rows if r["g"] == g]
            for i, v in enumerate(vs):
                rank = {
                    "row_number": i + 1,
                    "rank": 1 + sum(1 for w in vs if w > v),
                    "dense_rank": 1 + len({w for w in vs if w > v}),
                }[function]
                if rank <= 2:
                    want.append({"pos": rank, "g": g, "v": v})
        assert got == want, (function, rows, seed)
