"""Helpers for the example tests: read an action file and run it in Spark batch over in-memory views.

The header is read with plain YAML here on purpose: these tests check the SQL of the shipped actions
against hand-computed results, independently of the registry's parser (which has its own tests and is
exercised on these files by test_library_registers).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tests._support import comparable

REPO = Path(__file__).resolve().parents[2]
ACTIONS = REPO / "actions"
_HEADER = re.compile(r"\A\s*/\*---\n(.*?)\n---\*/\n(.*)\Z", re.S)


def load_action(name: str) -> tuple[dict[str, Any], str]:
    """(header, sql) of ``actions/<name>.sql``."""
    text = (ACTIONS / f"{name}.sql").read_text(encoding="utf-8")
    match = _HEADER.match(text)
    assert match, f"{name}.sql has no /*--- ... ---*/ header"
    return yaml.safe_load(match.group(1)), match.group(2)


def run_action(
    spark, name: str, inputs: Mapping[str, tuple[str, list[tuple]]], params: Mapping[str, Any] | None = None
):
    """Run an action in batch and return the DataFrame.

    ``inputs`` maps each input name to ``(schema DDL, rows)``. Parameters not given take their header
    default. The views live in a fresh Spark session (same SparkContext) so tests never see each other's
    views.
    """
    header, sql = load_action(name)
    declared = header.get("params") or {}
    unknown = set(params or {}) - set(declared)
    assert not unknown, f"{name}: unknown params {unknown}"
    args = {k: spec["default"] for k, spec in declared.items() if "default" in spec}
    args.update(params or {})
    assert set(inputs) == set(header["inputs"]), f"{name}: inputs are {header['inputs']}"
    session = spark.newSession()
    for view, (schema, data) in inputs.items():
        session.createDataFrame(data, schema).createOrReplaceTempView(view)
    return session.sql(sql, args=args)


def rows(df, *, order: bool = True) -> list[tuple]:
    """A DataFrame's rows as plain tuples (sorted unless ``order`` is False)."""
    out = [tuple(r) for r in df.collect()]
    return sorted(out, key=repr) if order else out


# -- the shipped flows' batch oracle ---------------------------------------------------------------------

FLOW_ORDER = ("ecommerce_activity", "shop_trends", "order_attribution")  # shop_trends reads dwd.events


def _norm(value):
    import datetime as dt
    import math

    if isinstance(value, float):
        return None if math.isnan(value) else comparable(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value
    return value


def rows_bag(table, columns: list[str]):
    """The rows of ``columns`` as a multiset (floats rounded, timestamps as naive UTC)."""
    from collections import Counter

    data = table.select(columns).to_pylist()
    return Counter(tuple(_norm(r[c]) for c in columns) for r in data)


def batch_results(spark, project, flows=FLOW_ORDER) -> dict:
    """flow -> table -> Arrow result of its pinned action's SQL in Spark batch over the complete raw input
    (the source files; malformed lines dropped, as the ODS tables quarantine them)."""
    data, results = {}, {}
    for flow_name in flows:
        flow = project.registry.get_flow(flow_name)
        spec = flow.spec
        reader = spark.newSession().read
        for name, source in spec.sources.items():
            path = str(project.config.project_dir / source.path)
            data[name] = reader.schema(source.schema_).option("mode", "DROPMALFORMED").json(path).toArrow()
        for qualified, table in spec.tables():
            action = project.registry.resolve(flow.pins[qualified]).spec
            session = spark.newSession()
            for relation, bound in table.inputs.items():
                session.createDataFrame(data[bound]).createOrReplaceTempView(relation)
            data[qualified] = results.setdefault(flow_name, {})[qualified] = session.sql(
                action.sql, args=action.param_values(dict(table.params))
            ).toArrow()
    return results
