"""The standard action library: every action's SQL run in Spark batch over small data, checked by hand.

Randomized cases compare with the same result computed in plain Python (seeded; the seed is printed).
"""

from __future__ import annotations

import datetime as dt
import random
import re
from collections import Counter, defaultdict
from decimal import Decimal

import pytest

from tests.examples._library import ACTIONS, load_action, rows, run_action

EVENTS = "user_id string, event_type string, item_id string, price double, ts timestamp"
T0 = dt.datetime(2024, 5, 1, 12, 0, 0)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


ALL = sorted(p.stem for p in ACTIONS.glob("*.sql"))


# -- the headers (fast, no Spark) ------------------------------------------------------------------------


def test_library_has_at_least_ten_actions():
    assert len(ALL) >= 10, ALL


@pytest.mark.parametrize("name", ALL)
def test_header_documents_every_param_and_binds_only_markers(name):
    header, sql = load_action(name)
    assert header["name"] == name
    assert len(header["description"].split()) >= 8, "describe what the action does"
    assert header["inputs"] and all(re.fullmatch(r"[a-z_]+", i) for i in header["inputs"])
    params = header.get("params") or {}
    for pname, spec in params.items():
        assert set(spec) <= {"type", "default", "description"}, pname
        assert spec.get("type") and spec.get("description"), f"{name}.{pname} needs a type and a description"
    code = re.sub(r"'[^']*'", "''", sql)  # markers never appear inside string literals
    used = set(re.findall(r"(?<![:\w]):([A-Za-z_]\w*)", code))
    assert used == set(params), f"{name}: markers {sorted(used)} vs params {sorted(params)}"
    for relation in header["inputs"]:
        assert re.search(rf"\b{relation}\b", code), f"{name}: input {relation} is never read"
    assert "{" not in code and "%s" not in code, "parameters are markers, never string templates"


# -- each action in Spark batch ---------------------------------------------------------------------------


@pytest.mark.spark
def test_ingest_passes_every_row_and_column(spark):
    data = [("u1", "VIEW", "i1", 1.5, at(0)), ("u2", None, None, None, None)]
    out = run_action(spark, "ingest", {"raw": (EVENTS, data)})
    assert out.columns == ["user_id", "event_type", "item_id", "price", "ts"]
    assert rows(out) == rows_of(data)


@pytest.mark.spark
def test_clean_clicks_filters_and_normalises(spark):
    data = [
        ("u1", "CLICK", "i1", 10.0, at(1)),
        ("u1", "View", "i2", 0.0, at(2)),
        ("u2", "refund", "i1", 5.0, at(3)),  # unknown type
        ("u3", "click", "i1", -1.0, at(4)),  # price below min
        (None, "click", "i1", 2.0, at(5)),  # no user
        ("u4", "click", "i1", None, at(6)),  # no price
        ("u5", "purchase", "i9", 3.0, None),  # no time
    ]
    out = run_action(spark, "clean_clicks", {"events": (EVENTS, data)})
    assert rows(out) == [("u1", "click", "i1", 10.0, at(1)), ("u1", "view", "i2", 0.0, at(2))]
    picky = run_action(
        spark, "clean_clicks", {"events": (EVENTS, data)}, {"valid_types": ["view"], "min_price": 0.0}
    )
    assert rows(picky) == [("u1", "view", "i2", 0.0, at(2))]
    assert rows(run_action(spark, "clean_clicks", {"events": (EVENTS, data)}, {"min_price": 5.0})) == [
        ("u1", "click", "i1", 10.0, at(1))
    ]


@pytest.mark.spark
def test_dedupe_by_key_keeps_latest_row(spark, seed):
    rnd = random.Random(seed)
    data = [(f"k{rnd.randrange(8)}", rnd.randrange(100), at(i)) for i in rnd.sample(range(1000), 60)]
    latest: dict = {}
    for key, value, ts in data:
        if key not in latest or ts > latest[key][2]:
            latest[key] = (key, value, ts)
    out = run_action(spark, "dedupe_by_key", {"rows": ("id string, v int, ts timestamp", data)})
    assert out.columns == ["id", "v", "ts"]
    assert rows(out) == sorted(latest.values(), key=repr)
    by_other = run_action(
        spark,
        "dedupe_by_key",
        {"rows": ("id string, v int, ts timestamp", data)},
        {"key": "v", "order_by": "ts"},
    )
    assert len(by_other.collect()) == len({v for _, v, _ in data})


@pytest.mark.spark
def test_cast_rename_converts_and_renames(spark):
    data = [("o1", "12.50", "2024-05-01 12:00:00"), ("o2", "oops", None)]
    schema = "order_id string, amount string, placed string"
    out = run_action(
        spark,
        "cast_rename",
        {"rows": (schema, data)},
        {"column": "amount", "to_type": "decimal(10,2)", "rename_to": "amount_eur"},
    )
    assert out.columns == ["order_id", "placed", "amount_eur"]
    assert dict(out.dtypes)["amount_eur"] == "decimal(10,2)"
    assert rows(out) == [("o1", "2024-05-01 12:00:00", Decimal("12.50")), ("o2", None, None)]
    ts = run_action(
        spark,
        "cast_rename",
        {"rows": (schema, data)},
        {"column": "placed", "to_type": "timestamp", "rename_to": "placed"},
    )
    assert dict(ts.dtypes)["placed"] == "timestamp"
    assert [r.placed for r in ts.orderBy("order_id").collect()] == [at(0), None]


@pytest.mark.spark
def test_enrich_by_lookup_is_a_left_join(spark):
    facts = (
        "order_id string, customer_id string, amount double",
        [("o1", "c1", 5.0), ("o2", "c2", 7.0), ("o3", "c1", 1.0)],
    )
    lookup = ("customer_id string, country string, tier string", [("c1", "FR", "gold"), ("c9", "DE", "new")])
    out = run_action(spark, "enrich_by_lookup", {"facts": facts, "lookup": lookup}, {"key": "customer_id"})
    assert out.columns == ["customer_id", "order_id", "amount", "country", "tier"]
    assert rows(out) == [
        ("c1", "o1", 5.0, "FR", "gold"),
        ("c1", "o3", 1.0, "FR", "gold"),
        ("c2", "o2", 7.0, None, None),
    ]


@pytest.mark.spark
def test_count_and_sum_by_key(spark, seed):
    rnd = random.Random(seed)
    data = [(rnd.choice("abcde"), rnd.choice(["x", "y"]), round(rnd.uniform(0, 50), 2)) for _ in range(80)]
    schema = "user_id string, channel string, amount double"
    counts = run_action(spark, "count_by_key", {"rows": (schema, data)}, {"key": "user_id", "as": "n"})
    assert counts.columns == ["user_id", "n"]
    assert rows(counts) == sorted(Counter(u for u, _, _ in data).items())
    sums = run_action(spark, "sum_by_key", {"rows": (schema, data)}, {"key": "channel", "value": "amount"})
    assert sums.columns == ["channel", "total", "row_count"]
    expected: dict = defaultdict(lambda: [0.0, 0])
    for _, ch, amount in data:
        expected[ch][0] += amount
        expected[ch][1] += 1
    got = {r.channel: (r.total, r.row_count) for r in sums.collect()}
    assert set(got) == set(expected)
    for ch, (total, n) in expected.items():
        assert got[ch][0] == pytest.approx(total) and got[ch][1] == n


@pytest.mark.spark
def test_activity_by_key_counts_each_stage(spark):
    data = [
        ("u1", "view", "i1", 10.0, at(0)),
        ("u1", "view", "i2", 12.0, at(1)),
        ("u1", "click", "i1", 10.0, at(2)),
        ("u1", "add_to_cart", "i1", 10.0, at(3)),
        ("u1", "purchase", "i1", 10.0, at(4)),
        ("u2", "view", "i1", 10.0, at(5)),
        ("u2", "purchase", "i3", 2.5, at(9)),
    ]
    out = run_action(spark, "activity_by_key", {"events": (EVENTS, data)})
    assert out.columns == [
        "user_id",
        "events",
        "views",
        "clicks",
        "add_to_carts",
        "purchases",
        "revenue",
        "last_event_ts",
    ]
    assert rows(out) == [("u1", 5, 2, 1, 1, 1, 10.0, at(4)), ("u2", 2, 1, 0, 0, 1, 2.5, at(9))]
    items = run_action(spark, "activity_by_key", {"events": (EVENTS, data)}, {"key": "item_id"})
    assert {r.item_id: r.views for r in items.collect()} == {"i1": 2, "i2": 1, "i3": 0}


@pytest.mark.spark
def test_conversion_funnel_rates(spark):
    schema = "user_id string, views bigint, clicks bigint, add_to_carts bigint, purchases bigint"
    data = [("u1", 3, 2, 1, 1), ("u2", 1, 1, 0, 0), ("u3", 2, 0, 0, 0), ("u4", 1, 1, 1, 0)]
    out = run_action(spark, "conversion_funnel", {"activity": (schema, data)})
    assert out.columns == ["step", "stage", "reached", "rate_from_previous", "rate_from_first"]
    assert rows(out) == [
        (1, "view", 4, None, 1.0),
        (2, "click", 3, 0.75, 0.75),
        (3, "add_to_cart", 2, 2 / 3, 0.5),
        (4, "purchase", 1, 0.5, 0.25),
    ]
    empty = run_action(spark, "conversion_funnel", {"activity": (schema, [])})
    assert rows(empty) == [
        (1, "view", 0, None, None),
        (2, "click", 0, None, None),
        (3, "add_to_cart", 0, None, None),
        (4, "purchase", 0, None, None),
    ]


@pytest.mark.spark
def test_windowed_count_tumbling_windows(spark):
    data = [("u1", "view", "i1", 1.0, at(s)) for s in (0, 10, 29.9, 30, 95)] + [
        ("u2", "view", "i1", 1.0, at(5))
    ]
    out = run_action(spark, "windowed_count", {"events": (EVENTS, data)}, {"window": "30 seconds"})
    assert out.columns == ["window_start", "window_end", "user_id", "events"]
    assert rows(out) == sorted(
        [
            (at(0), at(30), "u1", 3),
            (at(30), at(60), "u1", 1),
            (at(90), at(120), "u1", 1),
            (at(0), at(30), "u2", 1),
        ],
        key=repr,
    )


@pytest.mark.spark
def test_sessionize_splits_on_gap(spark):
    data = [("u1", "view", "i1", 1.0, at(s)) for s in (0, 20, 50, 200, 210)] + [
        ("u2", "click", "i1", 1.0, at(7))
    ]
    out = run_action(spark, "sessionize", {"events": (EVENTS, data)}, {"gap": "60 seconds"})
    assert out.columns == ["user_id", "session_start", "session_end", "events", "duration_seconds"]
    assert rows(out) == sorted(
        [("u1", at(0), at(110), 3, 110.0), ("u1", at(200), at(270), 2, 70.0), ("u2", at(7), at(67), 1, 60.0)],
        key=repr,
    )


@pytest.mark.spark
def test_top_n_ranks_with_deterministic_ties(spark, seed):
    rnd = random.Random(seed)
    data = [(f"u{i:02d}", rnd.randrange(6)) for i in range(30)]
    out = run_action(
        spark, "top_n", {"rows": ("user_id string, events bigint", data)}, {"n": 7, "tiebreak": "user_id"}
    )
    assert out.columns == ["rank", "user_id", "events"]
    expected = sorted(data, key=lambda r: (-r[1], r[0]))[:7]
    assert sorted(rows(out)) == [(i + 1, *r) for i, r in enumerate(expected)]


@pytest.mark.spark
def test_first_touch_per_customer(spark, seed):
    rnd = random.Random(seed)
    data = [
        (f"c{rnd.randrange(6)}", rnd.choice(["ads", "email", "social"]), f"cmp{rnd.randrange(3)}", at(s))
        for s in rnd.sample(range(500), 40)
    ]
    first: dict = {}
    for cust, ch, cmp, ts in data:
        if cust not in first or ts < first[cust][3]:
            first[cust] = (cust, ch, cmp, ts)
    out = run_action(
        spark,
        "first_touch",
        {"touches": ("customer_id string, channel string, campaign string, ts timestamp", data)},
    )
    assert out.columns == ["customer_id", "channel", "campaign", "first_touch_ts"]
    assert rows(out) == sorted(first.values(), key=repr)


@pytest.mark.spark
def test_attribute_orders_to_first_touch(spark):
    orders = (
        "order_id string, customer_id string, amount double, ts timestamp",
        [("o1", "c1", 10.0, at(100)), ("o2", "c2", 4.0, at(101))],
    )
    touches = (
        "customer_id string, channel string, campaign string, first_touch_ts timestamp",
        [("c1", "email", "spring", at(3))],
    )
    out = run_action(spark, "attribute_orders", {"orders": orders, "first_touches": touches})
    assert out.columns == ["order_id", "customer_id", "amount", "ts", "channel", "campaign", "first_touch_ts"]
    assert rows(out) == [
        ("o1", "c1", 10.0, at(100), "email", "spring", at(3)),
        ("o2", "c2", 4.0, at(101), "direct", None, None),
    ]


@pytest.mark.spark
def test_identifier_params_cannot_inject_sql(spark):
    from pyspark.errors import AnalysisException, ParseException

    data = [("u1", "CLICK", "i1", 10.0, at(1))]
    with pytest.raises((AnalysisException, ParseException)):
        run_action(
            spark, "count_by_key", {"rows": (EVENTS, data)}, {"key": "user_id FROM rows; DROP TABLE x; --"}
        ).collect()


def rows_of(data):
    return sorted((tuple(r) for r in data), key=repr)
