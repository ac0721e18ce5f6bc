"""The fingerprint of a table is derived from its TablePlan's fields minus an explicit exclusion list, and is
the same value the hand-written payload of earlier releases gave (fingerprints name checkpoints and writer
ids of running deployments: a changed fingerprint forces a rebuild)."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from materializer.plan import (
    NOT_FINGERPRINTED,
    BatchException,
    Expectation,
    Input,
    Param,
    TablePlan,
    table_fingerprint,
)

UPSTREAM = {"source:raw": "f" * 64, "dwd.users": "e" * 64}
PLAN = TablePlan(
    name="dws.spend",
    layer="dws",
    kind="primary_key",
    strategy="aggregate",
    reason="a GROUP BY",
    action="sum_by_key@3",
    action_path="actions/sum_by_key.sql",
    sql_line=9,
    sql="SELECT IDENTIFIER(:key), sum(v) AS v FROM events GROUP BY 1",
    params=(
        Param("key", "string", "user_id"),
        Param("weights", "map<string,double>", {"a": 1.5}),
        Param("tags", "array<string>", ["x", "y"]),
    ),
    inputs=(
        Input("events", "source:raw", "source", "`v` double", ()),
        Input("users", "dwd.users", "primary_key", "`user_id` string", ("user_id",)),
    ),
    ddl="`user_id` string, `v` double",
    primary_key=("user_id",),
    merge_engine="aggregate",
    aggregations=(("v", "sum"),),
    buckets=4,
    bucket_key=("user_id",),
    trigger=1.0,
    tiering_interval=30.0,
    expect=(Expectation("positive", "v >= 0", "quarantine"),),
    quarantine="dws.spend__quarantine",
    fingerprint="",
    checkpoint="",
    passthrough=False,
    exceptions=(BatchException("lookup", "users is read as of each micro-batch"),),
    freshness=60.0,
)


def _released_fingerprint(plan: TablePlan, upstream) -> str:
    """The payload materializer/analyze.py wrote by hand before the fingerprint was derived (verbatim, over
    the plan's values)."""
    payload = {
        "name": plan.name,
        "kind": plan.kind,
        "strategy": plan.strategy,
        "sql": plan.sql,
        "params": [(p.name, p.type, p.value) for p in plan.params],
        "inputs": [(i.name, i.ref, upstream[i.ref]) for i in plan.inputs],
        "ddl": plan.ddl,
        "pk": plan.primary_key,
        "merge": plan.merge_engine,
        "aggs": sorted(dict(plan.aggregations).items()),
        "buckets": int(plan.buckets),
        "bucket_key": tuple(plan.bucket_key),
        "expect": [(e.name, e.condition, e.on_violation) for e in plan.expect],
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_the_derived_fingerprint_is_the_released_one():
    assert table_fingerprint(PLAN, UPSTREAM) == _released_fingerprint(PLAN, UPSTREAM)


def test_the_exclusions_are_fields_and_say_why():
    names = {f.name for f in dataclasses.fields(TablePlan)}
    assert set(NOT_FINGERPRINTED) <= names
    assert all(reason.strip() for reason in NOT_FINGERPRINTED.values())


def _changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 7
    if isinstance(value, str):
        return value + "x"
    if value is None:
        return 1.0
    if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
        first = value[0]
        f = dataclasses.fields(first)[-1]
        return (dataclasses.replace(first, **{f.name: _changed(getattr(first, f.name))}),) + value[1:]
    return value + (("z", "min"),) if value and isinstance(value[0], tuple) else value + ("z",)


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(TablePlan)])
def test_every_field_is_in_the_fingerprint_unless_excluded_on_purpose(field):
    before = table_fingerprint(PLAN, UPSTREAM)
    changed = dataclasses.replace(PLAN, **{field: _changed(getattr(PLAN, field))})
    if field == "inputs":  # an input is in by its name, its ref and the fingerprint of what it reads
        assert table_fingerprint(changed, {**UPSTREAM, "dwd.users": "d" * 64}) != before
        kind_only = dataclasses.replace(PLAN.inputs[1], kind="log", ddl="`x` int")
        assert (
            table_fingerprint(dataclasses.replace(PLAN, inputs=(PLAN.inputs[0], kind_only)), UPSTREAM)
            == before
        )
        return
    after = table_fingerprint(changed, UPSTREAM)
    assert (after == before) == (field in NOT_FINGERPRINTED), field


def test_an_upstream_change_changes_the_fingerprint():
    assert table_fingerprint(PLAN, {**UPSTREAM, "source:raw": "0" * 64}) != table_fingerprint(PLAN, UPSTREAM)
