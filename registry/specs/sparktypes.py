"""Spark SQL type strings (``bigint``, ``array<string>``, ``map<string,int>``, ``decimal(10,2)``, ``struct<...>``)
and checking YAML values against them.

Action parameters declare a Spark type; a flow's parameter value is checked against it before Spark ever
sees it, so a wrong value is reported at its YAML line rather than as a Spark error at run time. Output
contracts are Spark DDL (``user_id string, cnt bigint``) parsed with the same grammar.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

# canonical name -> spellings Spark accepts
_PRIMITIVES = {
    "string": ("string",),
    "tinyint": ("tinyint", "byte"),
    "smallint": ("smallint", "short"),
    "int": ("int", "integer"),
    "bigint": ("bigint", "long"),
    "float": ("float", "real"),
    "double": ("double",),
    "boolean": ("boolean", "bool"),
    "date": ("date",),
    "timestamp": ("timestamp", "timestamp_ltz"),
    "timestamp_ntz": ("timestamp_ntz",),
    "binary": ("binary",),
}
_ALIASES = {spelling: name for name, spellings in _PRIMITIVES.items() for spelling in spellings}
_INT_RANGES = {"tinyint": 8, "smallint": 16, "int": 32, "bigint": 64}
_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|([<>(),:]))")


class SparkTypeError(ValueError):
    """A type string that does not parse; the message says where."""


@dataclass(frozen=True)
class SparkType:
    """A parsed Spark SQL type: ``name`` is canonical (``bigint``, ``array``, ``map``, ``struct``, ``decimal``...)."""

    name: str
    args: tuple = ()  # element type / (key, value) / ((field, type), ...) / (precision, scale) / (length,)

    def __str__(self) -> str:
        if self.name == "array":
            return f"array<{self.args[0]}>"
        if self.name == "map":
            return f"map<{self.args[0]},{self.args[1]}>"
        if self.name == "struct":
            return "struct<" + ",".join(f"{n}:{t}" for n, t in self.args) + ">"
        if self.args:
            return f"{self.name}({','.join(str(a) for a in self.args)})"
        return self.name


class _Tokens:
    def __init__(self, text: str) -> None:
        self.text = text
        self.items: list[tuple[str, str, int]] = []  # (kind, value, position)
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if not m:
                raise SparkTypeError(f"unexpected {text[pos:].strip()[:10]!r} at character {pos + 1}")
            kind = "quoted" if m.group(1) else "word" if m.group(2) else "number" if m.group(3) else "punct"
            value = m.group(m.lastindex)
            self.items.append((kind, value, m.start(m.lastindex)))
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str, int] | None:
        return self.items[self.i] if self.i < len(self.items) else None

    def take(self, expected: str | None = None) -> tuple[str, str, int]:
        item = self.peek()
        if item is None:
            raise SparkTypeError(f"unexpected end of {self.text!r}" + (f", expected '{expected}'" if expected else ""))
        if expected is not None and item[1] != expected:
            raise SparkTypeError(f"expected '{expected}' at character {item[2] + 1} of {self.text!r}, got {item[1]!r}")
        self.i += 1
        return item

    def done(self) -> bool:
        return self.i >= len(self.items)


def _parse(tokens: _Tokens) -> SparkType:
    kind, word, pos = tokens.take()
    low = word.lower()
    if kind != "word":
        raise SparkTypeError(f"expected a type name at character {pos + 1}, got {word!r}")
    if low == "array":
        tokens.take("<")
        element = _parse(tokens)
        tokens.take(">")
        return SparkType("array", (element,))
    if low == "map":
        tokens.take("<")
        key = _parse(tokens)
        tokens.take(",")
        value = _parse(tokens)
        tokens.take(">")
        return SparkType("map", (key, value))
    if low == "struct":
        tokens.take("<")
        fields = []
        while True:
            fkind, fname, fpos = tokens.take()
            if fkind not in ("word", "quoted"):
                raise SparkTypeError(f"expected a field name at character {fpos + 1}, got {fname!r}")
            if tokens.peek() and tokens.peek()[1] == ":":
                tokens.take(":")
            fields.append((_unquote(fname), _parse(tokens)))
            if tokens.peek() and tokens.peek()[1] == ",":
                tokens.take(",")
                continue
            tokens.take(">")
            return SparkType("struct", tuple(fields))
    if low in ("decimal", "dec", "numeric"):
        if tokens.peek() and tokens.peek()[1] == "(":
            tokens.take("(")
            precision = int(_number(tokens))
            scale = 0
            if tokens.peek() and tokens.peek()[1] == ",":
                tokens.take(",")
                scale = int(_number(tokens))
            tokens.take(")")
            if not (1 <= precision <= 38 and 0 <= scale <= precision):
                raise SparkTypeError(f"decimal({precision},{scale}) is out of range (precision 1..38, scale <= precision)")
            return SparkType("decimal", (precision, scale))
        return SparkType("decimal", (10, 0))
    if low in ("varchar", "char"):
        tokens.take("(")
        length = int(_number(tokens))
        tokens.take(")")
        return SparkType(low, (length,))
    if low in _ALIASES:
        return SparkType(_ALIASES[low])
    raise SparkTypeError(f"unknown type {word!r}")


def _number(tokens: _Tokens) -> str:
    kind, value, pos = tokens.take()
    if kind != "number":
        raise SparkTypeError(f"expected a number at character {pos + 1}, got {value!r}")
    return value


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def parse_type(text: str) -> SparkType:
    """Parse one Spark SQL type string. Raises :class:`SparkTypeError`."""
    if not isinstance(text, str) or not text.strip():
        raise SparkTypeError("a type must be a non-empty string like 'bigint' or 'array<string>'")
    tokens = _Tokens(text)
    result = _parse(tokens)
    if not tokens.done():
        _, value, pos = tokens.peek()
        raise SparkTypeError(f"unexpected {value!r} at character {pos + 1} of {text!r}")
    return result


def parse_ddl(text: str, *, allow_not_null: bool = False) -> list[tuple[str, SparkType | None]]:
    """A column list: ``"a string, b bigint"`` -> [(a, string), (b, bigint)]; names alone give ``None`` types.

    ``allow_not_null`` accepts ``NOT NULL`` after a column's type (source schemas: a required column)."""
    if not isinstance(text, str) or not text.strip():
        raise SparkTypeError("expected columns like 'user_id string, cnt bigint'")
    tokens = _Tokens(text)
    columns: list[tuple[str, SparkType | None]] = []
    while True:
        kind, name, pos = tokens.take()
        if kind not in ("word", "quoted"):
            raise SparkTypeError(f"expected a column name at character {pos + 1}, got {name!r}")
        col_type = None
        nxt = tokens.peek()
        if nxt is not None and nxt[1] != ",":
            if nxt[1] == ":":
                tokens.take(":")
            col_type = _parse(tokens)
            if allow_not_null and _at_not_null(tokens):
                tokens.take(), tokens.take()
            if tokens.peek() and tokens.peek()[0] == "word":  # COMMENT, or NOT NULL in a contract
                hint = "" if allow_not_null or tokens.peek()[1].upper() != "NOT" else \
                    " (NOT NULL is for source schemas only)"
                raise SparkTypeError(f"unexpected {tokens.peek()[1]!r} after the type of column {name!r}{hint}")
        columns.append((_unquote(name), col_type))
        if tokens.done():
            return columns
        tokens.take(",")


def _at_not_null(tokens: _Tokens) -> bool:
    ahead = tokens.items[tokens.i:tokens.i + 2]
    return [v.upper() for k, v, _ in ahead if k == "word"] == ["NOT", "NULL"]


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
        if not isinstance(value, (int, float)) or isinstance(value, bool) or (
                isinstance(value, float) and not math.isfinite(value)):
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
            yield path, f"expected a string, got {describe(value)}" + (
                " (quote it)" if isinstance(value, (int, float, bool)) else "")
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
            fields = dict(spark_type.args)
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
