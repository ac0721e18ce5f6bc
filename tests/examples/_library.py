"""Helpers for the example tests: read an action file and run it in Spark batch over in-memory views.

The header is read with plain YAML here on purpose: these tests check the SQL of the shipped actions
against hand-computed results, independently of the registry's parser (which has its own tests and is
exercised on these files by test_library_registers).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

import yaml

REPO = Path(__file__).resolve().parents[2]
ACTIONS = REPO / "actions"
_HEADER = re.compile(r"\A\s*/\*---\n(.*?)\n---\*/\n(.*)\Z", re.S)


def load_action(name: str) -> tuple[dict[str, Any], str]:
    """(header, sql) of ``actions/<name>.sql``."""
    text = (ACTIONS / f"{name}.sql").read_text(encoding="utf-8")
    match = _HEADER.match(text)
    assert match, f"{name}.sql has no /*--- ... ---*/ header"
    return yaml.safe_load(match.group(1)), match.group(2)


def run_action(spark, name: str, inputs: Mapping[str, tuple[str, list[tuple]]],
               params: Mapping[str, Any] | None = None):
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
