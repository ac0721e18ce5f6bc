"""Parameter values that try SQL injection are bound as values and cannot change the query.

Actions bind parameters with Spark's named parameter markers (``:name``) and identifiers with
``IDENTIFIER(:name)``; the values go through the materializer's own binding (:func:`bind_params` and
:func:`spark_args`), never into the SQL text. Each hostile value is checked against the literal-value
semantics computed in Python, and a sentinel view must survive every attempt. Names (flows, tables,
actions) are refused unless they are ``[a-z_][a-z0-9_]*`` -- in the registry and in the hot storage.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from materializer.analyze import bind_params, spark_args
from registry.specs import parse_action_text
from registry.specs.base import identifier
from runtime.core.errors import ErrorCode, TidehouseError
from runtime.storage import TableMeta, open_store

HOSTILE = [
    "'",
    "''",
    '"',
    "\\",
    "\\'",
    "x' OR '1'='1",
    "') OR 1=1 --",
    "click' OR 1=1 --",
    "click'; DROP TABLE sentinel; --",
    "click'); DROP VIEW sentinel; --",
    "click /* comment */",
    "*/ OR 1=1 /*",
    "-- ",
    "click -- trailing",
    "\\'; DROP TABLE sentinel; --",
    "\u2019 OR 1=1 --",
    "\uff07 OR \uff071\uff07=\uff071",
    "\u02bc OR 1=1 --",
    "click\u0000",
    "click\n",
    "${sentinel}",
    ":min_price",
    "?",
    "%",
    "_",
    "$$ OR 1=1 $$",
    "'; SELECT * FROM sentinel; --",
    "IDENTIFIER('sentinel')",
    "click\\' OR 1=1 --",
    '" OR ""="',
    "`sentinel`",
    "CLICK",
    "click",
]

EVENTS = [(f"u{i}", t, float(i)) for i, t in enumerate(["click", "view", "CLICK", *HOSTILE])]

VALUE_ACTION = """/*---
name: pick
inputs: [events]
params:
  t: {type: string}
  types: {type: "array<string>", default: [view]}
  min_price: {type: double, default: 0.0}
---*/
SELECT user_id, event_type FROM events
WHERE (event_type = :t OR array_contains(:types, event_type)) AND price >= :min_price
"""

IDENTIFIER_ACTION = """/*---
name: count_by
inputs: [events]
params:
  key: {type: string}
---*/
SELECT IDENTIFIER(:key) AS k, count(*) AS n FROM events GROUP BY IDENTIFIER(:key)
"""


@pytest.fixture(scope="module")
def events(spark):
    df = spark.createDataFrame(EVENTS, "user_id string, event_type string, price double")
    df.createOrReplaceTempView("events")
    spark.range(7).createOrReplaceTempView("sentinel")
    yield df
    spark.catalog.dropTempView("events")
    spark.catalog.dropTempView("sentinel")


def _run(spark, text: str, given: dict):
    action = parse_action_text(text, "<test>")
    return spark.sql(action.sql, args=spark_args(bind_params(action, given)))


def _sentinel_intact(spark) -> None:
    assert spark.catalog.tableExists("sentinel") and spark.table("sentinel").count() == 7


@pytest.mark.spark
@pytest.mark.reliability
def test_hostile_values_are_bound_as_literals(spark, events):
    failures = []
    for value in HOSTILE:
        got = sorted(
            tuple(r) for r in _run(spark, VALUE_ACTION, {"t": value, "types": [value, "x' OR 1=1"]}).collect()
        )
        want = sorted((u, t) for u, t, _p in EVENTS if t == value)  # the literal semantics, no more, no less
        if got != want:
            failures.append((value, got, want))
        _sentinel_intact(spark)
    assert not failures, failures


@pytest.mark.spark
@pytest.mark.reliability
def test_hostile_identifier_fails_analysis_and_runs_nothing(spark, events):
    """``IDENTIFIER(:key)`` parses the value as one (qualified) name: anything else is an analysis error.

    Spark's identifier parser skips comments and honours back-quotes, so ``event_type --`` or
    ```event_type``` still name exactly the column ``event_type``: same result, no other effect.
    """
    from pyspark.errors import AnalysisException

    plain = sorted(tuple(r) for r in _run(spark, IDENTIFIER_ACTION, {"key": "event_type"}).collect())
    assert plain
    for value in [
        "event_type) FROM events; DROP VIEW sentinel; --",
        "event_type, (SELECT count(*) FROM sentinel)",
        "user_id`, `event_type",
        "1=1 OR event_type",
        "sentinel.id",
        "`sentinel`.`id`",
        "*",
        "",
        "'event_type'",
        "event_type\u2019",
        "event_type; DROP VIEW sentinel",
        "(SELECT 1)",
    ]:
        with pytest.raises(AnalysisException):  # ParseException is an AnalysisException
            _run(spark, IDENTIFIER_ACTION, {"key": value}).collect()
        _sentinel_intact(spark)
    for value in [
        "event_type --",
        "event_type /* DROP VIEW sentinel */",
        "`event_type`",
        "events.event_type",
    ]:
        assert sorted(tuple(r) for r in _run(spark, IDENTIFIER_ACTION, {"key": value}).collect()) == plain, (
            value
        )
        _sentinel_intact(spark)


@pytest.mark.spark
@pytest.mark.reliability
def test_hostile_strings_for_typed_params_are_refused(spark, events):
    action = parse_action_text(VALUE_ACTION, "<test>")
    for value in ["0 OR 1=1", "0; DROP TABLE sentinel", "1e400x", "'0'"]:
        with pytest.raises((TidehouseError, ValueError)):
            _run(spark, VALUE_ACTION, {"t": "click", "min_price": value}).collect()
    assert action.params["min_price"].type == "double"
    _sentinel_intact(spark)


BAD_NAMES = [
    "shop\n",
    "Shop",
    "sh\u043ep",
    "sh\u200bop",
    "shop; drop table flows",
    "shop'--",
    "../shop",
    "sh op",
    "",
    "1shop",
    "__shop",
    "shop-1",
    "shop.x",
    "a" * 129,
    "\uff53hop",
    "shop\x00",
    "sh\u0131p",
    "ｓhop",
]


@pytest.mark.parametrize("name", BAD_NAMES, ids=[repr(n)[:20] for n in BAD_NAMES])
def test_registry_refuses_names_outside_the_identifier_alphabet(name):
    from pydantic_core import PydanticCustomError

    with pytest.raises(PydanticCustomError):
        identifier(name)


@pytest.mark.parametrize("name", ["shop", "_x", "a1_b2", "a" * 128])
def test_registry_accepts_identifiers(name):
    assert identifier(name) == name


@pytest.mark.parametrize(
    "name", ["ods.t\n", "ods.t; drop", "ods.\u0442", "ods./x", "ods", "ods.t.u", "../ods.t"]
)
def test_hot_storage_refuses_bad_table_names(tmp_path, name):
    store = open_store(str(tmp_path), fsync=False)
    with pytest.raises(TidehouseError) as info:
        store.create_table(TableMeta(name, pa.schema([("a", pa.int64())])))
    assert info.value.code is ErrorCode.TABLE_INVALID
    assert store.list_tables() == []
