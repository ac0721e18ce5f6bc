"""Every shipped action in a *streaming* flow: hot and lake equal the action's SQL in Spark batch.

``test_actions.py`` runs each action in batch; this module runs all of them in one flow (one table per use,
so one flow start pays Spark's start-up once) over generated input delivered in two ``--until-idle`` runs,
the second with more input, and checks every table — hot (the store's current content) and lake (plain
pyiceberg) — against the same SQL evaluated in Spark **batch** over the complete input (multisets, ``__``
columns ignored). A new action in ``actions/`` must be added to the flow (the first assertion says so).

The input is generated within the documented exceptions to the batch promise (docs/concepts.md,
Correctness): no row is later than a watermark (the second run's events are all later than the first's),
and no dimension row that a fact already looked up changes afterwards (``enrich_by_lookup``).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import re
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from tests._support import comparable
from tests.examples._library import ACTIONS

pytestmark = [pytest.mark.spark, pytest.mark.slow]

T0 = dt.datetime(2024, 5, 1, 12, 0, 0)

FLOW = """flow: every_action
description: every shipped action in one streaming flow
trigger: 100ms
tiering: {interval: 1s}
sources:
  events:
    format: json
    path: data/events
    schema: "user_id string, event_type string, item_id string, price double, ts timestamp"
  orders:
    format: json
    path: data/orders
    schema: "order_id string, customer_id string, amount string, ts timestamp"
  touches:
    format: json
    path: data/touches
    schema: "customer_id string, channel string, campaign string, ts timestamp"
layers:
  ods:
    events: {action: ingest, inputs: {raw: events}}
    orders: {action: ingest, inputs: {raw: orders}}
    touches: {action: ingest, inputs: {raw: touches}}
  dwd:
    events: {action: clean_clicks, inputs: {events: ods.events}, params: {min_price: 0.0}}
    orders_typed:
      action: cast_rename
      inputs: {rows: ods.orders}
      params: {column: amount, to_type: "decimal(10,2)", rename_to: amount}
    orders:
      action: dedupe_by_key
      inputs: {rows: dwd.orders_typed}
      params: {key: order_id, order_by: ts}
      primary_key: [order_id]
  dws:
    user_activity:
      action: activity_by_key
      inputs: {events: dwd.events}
      params: {key: user_id}
      primary_key: [user_id]
    item_counts:
      action: count_by_key
      inputs: {rows: dwd.events}
      params: {key: item_id, as: n}
      primary_key: [item_id]
    item_revenue:
      action: sum_by_key
      inputs: {rows: dwd.events}
      params: {key: item_id, value: price, as: revenue}
      primary_key: [item_id]
    per_minute:
      action: windowed_count
      inputs: {events: dwd.events}
      params: {key: event_type, window: 1 minute, watermark_seconds: 3600}
      primary_key: [window_start, event_type]
    sessions:
      action: sessionize
      inputs: {events: dwd.events}
      params: {key: user_id, gap: 5 minutes}
      primary_key: [user_id, session_start]
    first_touch:
      action: first_touch
      inputs: {touches: ods.touches}
      primary_key: [customer_id]
    orders_enriched:
      action: enrich_by_lookup
      inputs: {facts: dwd.orders_typed, lookup: dws.first_touch}
      params: {key: customer_id}
      lookups: processing_time
    attributed:
      action: attribute_orders
      inputs: {orders: dwd.orders, first_touches: dws.first_touch}
      primary_key: [order_id]
  ads:
    channel_revenue:
      action: sum_by_key
      inputs: {rows: dws.attributed}
      params: {key: channel, value: amount, as: revenue}
      primary_key: [channel]
    funnel:
      action: conversion_funnel
      inputs: {activity: dws.user_activity}
      primary_key: [step]
    top_users:
      action: top_n
      inputs: {rows: dws.user_activity}
      params: {order_by: events, tiebreak: user_id, n: 5}
      primary_key: [rank]
"""


def _iso(seconds: int) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def generate(rng: random.Random, part: int) -> dict[str, list[dict]]:
    """One delivery of input. Part 1's event times all follow part 0's (no row is late for a watermark);
    a customer's first touch never changes once an order of theirs has arrived (lookups stay exact)."""
    base = part * 1800  # part 0: 12:00-12:30, part 1: 12:30-13:00
    times = rng.sample(range(base, base + 1500), 160)  # distinct: max_by/min_by never see a tie
    types = ["view", "VIEW", "click", "add_to_cart", "purchase", "hover"]
    events = [
        {
            "user_id": f"u{rng.randrange(8)}",
            "event_type": rng.choice(types),
            "item_id": f"i{rng.randrange(10)}",
            "price": rng.choice([round(rng.uniform(0, 60), 2), round(rng.uniform(0, 60), 2), -1.0, None]),
            "ts": _iso(s),
        }
        for s in times
    ]
    customers = range(10) if part == 0 else range(20)
    touched = [c for c in customers if c not in (9, 19)]  # c9 and c19 never have a touch
    touch_times = rng.sample(range(base, base + 1500), 3 * len(touched))
    touches = [
        {
            "customer_id": f"c{c}",
            "channel": rng.choice(["ads", "email", "social"]),
            "campaign": f"cmp{rng.randrange(3)}",
            "ts": _iso(s),
        }
        for c, s in zip(touched * 3, touch_times)
    ]
    order_ids = (
        range(30) if part == 0 else list(range(0, 30, 3)) + list(range(30, 50))
    )  # part 1 re-sends some
    order_times = rng.sample(range(base, base + 1500), len(order_ids))
    orders = [
        {
            "order_id": f"o{o}",
            "customer_id": f"c{o % 10 if o < 30 else 10 + o % 10}",
            "amount": rng.choice([f"{rng.uniform(1, 200):.2f}", f"{rng.uniform(1, 200):.2f}", "n/a"]),
            "ts": _iso(s),
        }
        for o, s in zip(order_ids, order_times)
    ]
    return {"events": events, "orders": orders, "touches": touches}


def deliver(project_dir: Path, part: int, data: dict[str, list[dict]]) -> None:
    for source, rows in data.items():
        folder = project_dir / "data" / source
        folder.mkdir(parents=True, exist_ok=True)
        tmp = project_dir / "data" / f".{source}-{part}.tmp"
        tmp.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        tmp.rename(folder / f"part-{part}.json")  # atomic: the file source never sees half a file


def batch_results(spark, project, flow_name: str) -> dict:
    """table -> Arrow result of its pinned action's SQL in Spark batch over the complete input files."""
    flow = project.registry.get_flow(flow_name)
    spec = flow.spec
    data: dict = {}
    results: dict = {}
    reader = spark.newSession().read
    for name, source in spec.sources.items():
        data[name] = (
            reader.schema(source.schema_).json(str(project.config.project_dir / source.path)).toArrow()
        )
    for qualified, table in spec.tables():
        action = project.registry.resolve(flow.pins[qualified]).spec
        session = spark.newSession()
        for relation, bound in table.inputs.items():
            session.createDataFrame(data[bound]).createOrReplaceTempView(relation)
        data[qualified] = results[qualified] = session.sql(
            action.sql, args=action.param_values(dict(table.params))
        ).toArrow()
    return results


def _norm(value):
    if isinstance(value, float):
        return None if math.isnan(value) else comparable(value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


def _rows(table, columns: list[str]) -> Counter:
    return Counter(tuple(_norm(r[c]) for c in columns) for r in table.select(columns).to_pylist())


def test_every_action_streams_to_its_batch_result(spark, project_dir, seed):
    from runtime.project import Project

    for path in ACTIONS.glob("*.sql"):
        shutil.copy(path, project_dir / "actions" / path.name)
    flow_path = project_dir / "flows" / "every_action.yaml"
    flow_path.write_text(FLOW)
    used = set(re.findall(r"action: (\w+)", FLOW))
    assert used == {p.stem for p in ACTIONS.glob("*.sql")}, "add every action of actions/ to this flow"

    rng = random.Random(seed)
    project = Project.open()
    try:
        plan = project.plan(flow_path, spark=spark)
        strategies = {t.name: t.strategy for t in plan.tables}
        assert strategies["dws.sessions"] == "recompute"  # Spark cannot run session windows in update mode
        assert strategies["dws.per_minute"] == "aggregate"
        timings = []
        for part in (0, 1):
            deliver(project_dir, part, generate(rng, part))
            began = time.monotonic()
            project.trigger(flow_path if part == 0 else "every_action", until_idle=True, spark=spark)
            timings.append(round(time.monotonic() - began, 1))
            expected = batch_results(spark, project, "every_action")
            for table, want in expected.items():
                columns = [c for c in want.column_names if not c.startswith("__")]
                assert want.num_rows > 0, f"{table}: the generated input must exercise every table"
                hot = project.store.scan(table)
                assert _rows(hot, columns) == _rows(want, columns), (
                    f"run {part}: hot {table} differs from batch"
                )
                lake = project.lake.load(table).scan().to_arrow()
                assert _rows(lake, columns) == _rows(want, columns), (
                    f"run {part}: lake {table} differs from batch"
                )
        print(f"\n[every_action] until-idle runs took {timings} s")
    finally:
        project.close()
