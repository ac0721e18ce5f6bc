"""YAML values checked against Spark SQL types (parsed by the one grammar, :mod:`runtime.core.sparktypes`).

Action parameters declare a Spark type; a flow's parameter value (and a parameter's default) is checked
against it before Spark ever sees it, so a wrong value is reported at its YAML line rather than as a Spark
error at run time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from datetime import date, datetime
from typing import Any

from runtime.core.sparktypes import SparkType

_INT_RANGES = {"tinyint": 8, "smallint": 16, "int": 32, "bigint": 64}


# -- values ---------------------------------------------------------------------------------------------


def describe(value: Any) -> str:
    """How a YAML value reads in an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def check_value(value: Any, spark_type: SparkType, path: tuple = ()) -> Iterator[tuple[tuple, str]]:
    """Yield ``(sub_path, message)`` for every part of ``value`` that does not fit ``spark_type``."""
    name = spark_type.name
    if value is None:
        yield path, f"expected a {spark_type} value, got null"
        return
    if name in _INT_RANGES:
        bits = _INT_RANGES[name]
        if not isinstance(value, int) or isinstance(value, bool):
            yield path, f"expected an integer ({name}), got {describe(value)}"
        elif not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            yield path, f"{value} is out of range for {name}"
    elif name in ("double", "float"):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            yield path, f"expected a number ({name}), got {describe(value)}"
    elif name == "decimal":
        if (
            not isinstance(value, (int, float))
            or isinstance(value, bool)
            or (isinstance(value, float) and not math.isfinite(value))
        ):
            yield path, f"expected a number ({spark_type}), got {describe(value)}"
        else:
            precision, scale = spark_type.args
            whole = len(str(abs(int(value))).lstrip("0"))
            if whole > precision - scale:
                yield path, f"{value} does not fit {spark_type}"
    elif name == "boolean":
        if not isinstance(value, bool):
            yield path, f"expected true or false (boolean), got {describe(value)}"
    elif name in ("string", "binary", "varchar", "char"):
        if not isinstance(value, str):
            yield (
                path,
                f"expected a string, got {describe(value)}"
                + (" (quote it)" if isinstance(value, (int, float, bool)) else ""),
            )
        elif name in ("varchar", "char") and len(value) > spark_type.args[0]:
            yield path, f"string of {len(value)} characters is longer than {spark_type}"
    elif name == "date":
        if not isinstance(value, str) or not _is_date(value):
            yield path, f"expected a date like '2024-01-31', got {describe(value)}"
    elif name in ("timestamp", "timestamp_ntz"):
        if not isinstance(value, str) or not _is_timestamp(value):
            yield path, f"expected a timestamp like '2024-01-31 12:00:00', got {describe(value)}"
    elif name == "array":
        if not isinstance(value, list):
            yield path, f"expected a list ({spark_type}), got {describe(value)}"
        else:
            for i, item in enumerate(value):
                yield from check_value(item, spark_type.args[0], path + (i,))
    elif name == "map":
        if not isinstance(value, dict):
            yield path, f"expected a mapping ({spark_type}), got {describe(value)}"
        else:
            key_type, value_type = spark_type.args
            for key, item in value.items():
                for _, message in check_value(_key_value(key, key_type), key_type):
                    yield path + (key,), f"key: {message}"
                yield from check_value(item, value_type, path + (key,))
    elif name == "struct":
        if not isinstance(value, dict):
            yield path, f"expected a mapping ({spark_type}), got {describe(value)}"
        else:
            fields = {c.name: c.type for c in spark_type.args}
            for key in value:
                if key not in fields:
                    yield path + (key,), f"unknown field {key!r} of {spark_type}"
            for key, field_type in fields.items():
                if key not in value:
                    yield path, f"missing field {key!r} of {spark_type}"
                else:
                    yield from check_value(value[key], field_type, path + (key,))
    else:  # pragma: no cover - every parsed type is handled above
        yield path, f"values of type {spark_type} cannot be given in YAML"


def _key_value(key: Any, key_type: SparkType) -> Any:
    """YAML mapping keys of numeric maps may be written as plain numbers or strings of digits."""
    if key_type.name in _INT_RANGES and isinstance(key, str) and re.fullmatch(r"[-+]?\d+", key):
        return int(key)
    return key


def _is_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
        return True
    except ValueError:
        return False


def _is_timestamp(text: str) -> bool:
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
        return True
    except ValueError:
        return False
