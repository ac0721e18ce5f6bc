"""The vectorised primary-key merge (``last_row``, ``first_row``) against the row loop it replaces."""

from __future__ import annotations

import math
import random
from decimal import Decimal

import pyarrow as pa
import pytest

from runtime.storage import TableMeta, fastpk, open_store
from tests.storage._util import read_all

SCHEMA = pa.schema(
    [
        ("k", pa.string()),
        ("day", pa.date32()),
        ("a", pa.int64()),
        ("b", pa.float64()),
        ("c", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("d", pa.decimal128(9, 2)),
    ]
)


def _meta(engine: str, buckets: int) -> TableMeta:
    return TableMeta(
        "dws.f", SCHEMA, kind="primary_key", primary_key=("k", "day"), buckets=buckets, merge_engine=engine
    )


def _random_write(rng: random.Random, n_keys: int, deletes: bool) -> pa.Table:
    n = rng.randint(1, 40)
    keys = [(f"k{rng.randrange(n_keys)}", 19000 + rng.randrange(2)) for _ in range(n)]

    def maybe(v):
        return None if rng.random() < 0.1 else v

    data = {
        "k": [k for k, _ in keys],
        "day": pa.array([d for _, d in keys], pa.date32()),
        "a": pa.array([maybe(rng.randint(0, 2)) for _ in keys], pa.int64()),
        "b": pa.array([maybe(rng.choice([0.5, 1.0, math.nan])) for _ in keys], pa.float64()),
        "c": [maybe(rng.choice(["x", "y"])) for _ in keys],
        "ts": pa.array([maybe(rng.randint(0, 1) * 1000) for _ in keys], pa.timestamp("us", tz="UTC")),
        "d": pa.array([maybe(Decimal(rng.choice(["1.00", "2.50"]))) for _ in keys], pa.decimal128(9, 2)),
    }
    table = pa.table(data)
    if deletes or rng.random() < 0.5:
        pool = ["+I", "+U", "+U", "-D", "-U"] if deletes else ["+I", "+U"]
        table = table.append_column("__change", pa.array([rng.choice(pool) for _ in keys]))
    return table


def _norm(rows: list[dict]) -> list[dict]:
    """NaN != NaN: spell it as a string so rows compare."""
    return [{k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]


def _changelog(store, buckets: int) -> list:
    out = []
    for b in range(buckets):
        t = read_all(store, "dws.f", bucket=b)
        out.append([] if t is None else _norm(t.drop_columns(["__ts"]).to_pylist()))
    return out


def _state(store) -> list:
    return sorted(_norm(store.scan("dws.f").to_pylist()), key=lambda r: (r["k"], r["day"]))


@pytest.mark.parametrize("engine,deletes", [("last_row", True), ("last_row", False), ("first_row", False)])
@pytest.mark.parametrize("buckets", [1, 2])
def test_vectorised_merge_equals_the_row_loop(tmp_path, seed, monkeypatch, engine, deletes, buckets):
    rng = random.Random(seed)
    writes = [_random_write(rng, 8, deletes) for _ in range(30)]
    fast = open_store(str(tmp_path / "fast"), fsync=False)
    fast.create_table(_meta(engine, buckets))
    calls = []
    real_merge = fastpk.merge
    monkeypatch.setattr(fastpk, "merge", lambda *a: calls.append(1) or real_merge(*a))
    for seq, w in enumerate(writes):
        fast.write("dws.f", w, writer="w", seq=seq)
    assert len(calls) >= len(writes)  # every write took the vectorised path (once per bucket it touched)
    monkeypatch.setattr(fastpk, "supported", lambda *a: False)
    slow = open_store(str(tmp_path / "slow"), fsync=False)
    slow.create_table(_meta(engine, buckets))
    for seq, w in enumerate(writes):
        slow.write("dws.f", w, writer="w", seq=seq)
    assert _changelog(fast, buckets) == _changelog(slow, buckets)
    assert _state(fast) == _state(slow)
    assert len(_state(fast)) > 0
    keys = pa.table({"k": ["k0", "k1", "k9"], "day": pa.array([19000, 19001, 19000], pa.date32())})
    assert _norm(fast.lookup("dws.f", keys).to_pylist()) == _norm(slow.lookup("dws.f", keys).to_pylist())
    fast.close()
    slow.close()


def test_first_row_with_deletes_falls_back_to_the_loop():
    meta = _meta("first_row", 1)
    t = pa.table({c: pa.nulls(1, f.type) for c, f in zip(SCHEMA.names, SCHEMA)})
    assert fastpk.supported(meta, t, fastpk.delete_mask(["+I"], 1))
    assert not fastpk.supported(meta, t, fastpk.delete_mask(["-D"], 1))
    nested = TableMeta(
        "dws.n",
        pa.schema([("k", pa.string()), ("l", pa.list_(pa.int64()))]),
        kind="primary_key",
        primary_key=("k",),
    )
    assert not fastpk.supported(nested, pa.table({"k": ["a"], "l": [[1]]}), fastpk.delete_mask(None, 1))


@pytest.mark.parametrize("engine", ["last_row", "partial_update", "aggregate"])
def test_nan_rewrite_is_a_noop(store, engine):
    """NaN never compares equal in Python or Arrow; the no-op check treats NaN as equal to NaN."""
    schema = pa.schema([("k", pa.string()), ("v", pa.float64())])
    store.create_table(
        TableMeta(
            "dws.n",
            schema,
            kind="primary_key",
            primary_key=("k",),
            merge_engine=engine,
            aggregations={"v": "max"} if engine == "aggregate" else {},
        )
    )
    data = pa.table({"k": ["a", "b"], "v": [math.nan, 1.0]})
    store.write("dws.n", data, writer="w", seq=1)
    again = store.write("dws.n", data, writer="w", seq=2)
    assert again.rows == 0 and not again.skipped
    assert store.end_offsets("dws.n") == [2]


@pytest.mark.parametrize("engine", ["last_row", "aggregate"])
def test_delete_then_upsert_in_one_write_is_delete_then_insert(store, engine):
    """Documented: rows apply in order, so -D old then +I new (not -U/+U); the end state is the new row."""
    store.create_table(
        TableMeta(
            "dws.t",
            pa.schema([("k", pa.string()), ("v", pa.int64())]),
            kind="primary_key",
            primary_key=("k",),
            merge_engine=engine,
        )
    )
    store.write("dws.t", pa.table({"k": ["a"], "v": [1]}), writer="w", seq=1)
    store.write(
        "dws.t", pa.table({"k": ["a", "a"], "v": [1, 2], "__change": ["-U", "+U"]}), writer="w", seq=2
    )
    t = read_all(store, "dws.t")
    assert list(zip(t.column("__change").to_pylist(), t.column("v").to_pylist())) == [
        ("+I", 1),
        ("-D", 1),
        ("+I", 2),
    ]
    assert store.scan("dws.t").to_pylist() == [{"k": "a", "v": 2}]


AGG_SCHEMA = pa.schema(
    [
        ("g", pa.string()),
        ("n", pa.int64()),  # sum
        ("s", pa.float64()),  # sum (NaN, -0.0)
        ("lo", pa.float64()),  # min (NaN: Python's min keeps whichever came first)
        ("hi", pa.string()),  # max
        ("t", pa.timestamp("us", tz="UTC")),  # min
        ("d", pa.decimal128(9, 2)),  # max
        ("c", pa.int64()),  # count
        ("l", pa.string()),  # last_non_null
        ("x", pa.int32()),  # the implicit last
    ]
)
AGGS = {
    "n": "sum",
    "s": "sum",
    "lo": "min",
    "hi": "max",
    "t": "min",
    "d": "max",
    "c": "count",
    "l": "last_non_null",
}


def _agg_meta(buckets: int) -> TableMeta:
    return TableMeta(
        "dws.f",
        AGG_SCHEMA,
        kind="primary_key",
        primary_key=("g",),
        buckets=buckets,
        merge_engine="aggregate",
        aggregations=AGGS,
    )


def _agg_write(rng: random.Random, unique: bool) -> pa.Table:
    pool = [f"g{i}" for i in range(10)]
    keys = (
        rng.sample(pool, rng.randint(1, 10))
        if unique
        else [rng.choice(pool) for _ in range(rng.randint(1, 12))]
    )

    def maybe(v):
        return None if rng.random() < 0.15 else v

    return pa.table(
        {
            "g": keys,
            "n": pa.array([maybe(rng.randint(-5, 5)) for _ in keys], pa.int64()),
            "s": pa.array(
                [maybe(rng.choice([0.25, -0.0, 0.0, math.nan, 1e300])) for _ in keys], pa.float64()
            ),
            "lo": pa.array([maybe(rng.choice([1.0, -2.0, math.nan, 3.5])) for _ in keys], pa.float64()),
            "hi": [maybe(rng.choice(["a", "b", "ä", "Z"])) for _ in keys],
            "t": pa.array([maybe(rng.randint(0, 3) * 1000) for _ in keys], pa.timestamp("us", tz="UTC")),
            "d": pa.array(
                [maybe(Decimal(rng.choice(["1.00", "-2.50", "7.25"]))) for _ in keys], pa.decimal128(9, 2)
            ),
            "c": pa.array([maybe(rng.randint(0, 9)) for _ in keys], pa.int64()),
            "l": [maybe(rng.choice(["p", "q"])) for _ in keys],
            "x": pa.array([maybe(rng.randint(0, 3)) for _ in keys], pa.int32()),
        }
    )


@pytest.mark.parametrize("buckets", [1, 2])
def test_vectorised_aggregate_merge_equals_the_row_loop(tmp_path, seed, monkeypatch, buckets):
    """The aggregate engine: writes of one row per key take the vectorised path, writes with several rows
    of a key the row loop; changelog, state and lookups equal a store that only runs the row loop."""
    rng = random.Random(seed)
    writes = [_agg_write(rng, unique=rng.random() < 0.8) for _ in range(40)]
    fast = open_store(str(tmp_path / "fast"), fsync=False)
    fast.create_table(_agg_meta(buckets))
    took = []
    real_aggregate = fastpk._aggregate
    monkeypatch.setattr(fastpk, "_aggregate", lambda *a: took.append(r := real_aggregate(*a)) or r)
    for seq, w in enumerate(writes):
        fast.write("dws.f", w, writer="w", seq=seq)
    vectorised = sum(1 for r in took if r is not None)
    assert vectorised >= 10 and any(r is None for r in took), (vectorised, len(took))
    monkeypatch.setattr(fastpk, "supported", lambda *a: False)
    slow = open_store(str(tmp_path / "slow"), fsync=False)
    slow.create_table(_agg_meta(buckets))
    for seq, w in enumerate(writes):
        slow.write("dws.f", w, writer="w", seq=seq)
    assert _changelog(fast, buckets) == _changelog(slow, buckets)
    key = "g"
    assert sorted(_norm(fast.scan("dws.f").to_pylist()), key=lambda r: r[key]) == sorted(
        _norm(slow.scan("dws.f").to_pylist()), key=lambda r: r[key]
    )
    keys = pa.table({"g": ["g0", "g3", "nope"]})
    assert _norm(fast.lookup("dws.f", keys).to_pylist()) == _norm(slow.lookup("dws.f", keys).to_pylist())
    fast.close()
    slow.close()


def test_an_aggregate_integer_sum_that_overflows_takes_the_row_loop(tmp_path, monkeypatch):
    """int64 sums are checked: an overflowing write is left to the row loop, which refuses it as before."""
    store = open_store(str(tmp_path / "s"), fsync=False)
    schema = pa.schema([("g", pa.string()), ("n", pa.int64())])
    meta = TableMeta(
        "dws.o",
        schema,
        kind="primary_key",
        primary_key=("g",),
        merge_engine="aggregate",
        aggregations={"n": "sum"},
    )
    store.create_table(meta)
    took = []
    real_aggregate = fastpk._aggregate
    monkeypatch.setattr(fastpk, "_aggregate", lambda *a: took.append(r := real_aggregate(*a)) or r)
    big = pa.table({"g": ["a"], "n": pa.array([2**62], pa.int64())})
    store.write("dws.o", big, writer="w", seq=1)
    with pytest.raises((OverflowError, pa.ArrowInvalid)):
        store.write("dws.o", big, writer="w", seq=2)
    assert took[0] is not None and took[1] is None
    assert store.scan("dws.o").to_pylist() == [{"g": "a", "n": 2**62}]
    store.close()
