"""Fixture rows: values written in YAML or CSV, typed by a Spark schema, every problem located.

Action tests (:mod:`registry.specs.actiontest`) give input rows and expected rows as YAML mappings or as CSV
files. Both become plain Python values of the column's Spark type — ``int``, ``float``, ``Decimal``, ``str``,
``bytes``, ``bool``, ``date``, ``datetime`` (UTC for ``timestamp``, naive for ``timestamp_ntz``), lists for
arrays, ``[(key, value), ...]`` for maps and dicts for structs — which is what pyarrow builds columns from.
A value that does not fit is an error at its line and column, never a quiet NULL (a Spark JSON reader would
turn ``"abc"`` in a ``bigint`` column into NULL).

* YAML: the value's own type must fit (``check_value``, the rule of action parameters); a ``decimal`` may
  also be a quoted string (``"12.50"``: exact); ``timestamp`` and ``date`` are ISO strings; NULL is ``null``
  or a missing key; nested NULLs are allowed.
* CSV: a header row names the columns; an empty field is NULL; numbers, ``true``/``false`` and ISO times are
  parsed from the text; an ``array``, ``map`` or ``struct`` field holds JSON.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from registry.specs.base import COLUMN_RE, did_you_mean
from registry.specs.values import check_value, describe
from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.sparktypes import Column, SparkType
from runtime.core.yamlsource import read_text

_INTS = ("tinyint", "smallint", "int", "bigint")
_TEXT_TYPES = ("string", "varchar", "char", "binary", "date", "timestamp", "timestamp_ntz")
_INT_TEXT = re.compile(r"[-+]?\d+")

Problem = tuple[tuple, str]  # (path below the value, message)


# -- one value ------------------------------------------------------------------------------------------


def yaml_value(value: Any, stype: SparkType) -> tuple[Any, list[Problem]]:
    """A YAML value as a Python value of ``stype`` (``None`` stays ``None``), and the problems found."""
    problems: list[Problem] = []
    return _convert(value, stype, (), problems), problems


def text_value(text: str, stype: SparkType) -> tuple[Any, list[Problem]]:
    """A CSV field as a Python value of ``stype`` (an empty field is ``None``), and the problems found."""
    problems: list[Problem] = []
    if text == "":
        return None, problems
    name = stype.name
    value: Any = text
    if name in _INTS:
        if not _INT_TEXT.fullmatch(text.strip()):
            return None, [((), f"expected an integer ({name}), got {text!r}")]
        value = int(text)
    elif name in ("double", "float"):
        try:
            value = float(text)
        except ValueError:
            return None, [((), f"expected a number ({name}), got {text!r}")]
    elif name == "boolean":
        if text.strip().lower() not in ("true", "false"):
            return None, [((), f"expected true or false (boolean), got {text!r}")]
        value = text.strip().lower() == "true"
    elif name in ("array", "map", "struct"):
        try:
            value = json.loads(text)
        except ValueError as exc:
            return None, [((), f"expected JSON for a {stype} field: {exc}")]
    return _convert(value, stype, (), problems), problems


def _convert(value: Any, stype: SparkType, path: tuple, problems: list[Problem]) -> Any:
    if value is None:
        return None
    name = stype.name
    if name == "array":
        if not isinstance(value, list):
            problems.append((path, f"expected a list ({stype}), got {describe(value)}"))
            return None
        return [_convert(item, stype.args[0], path + (i,), problems) for i, item in enumerate(value)]
    if name == "map":
        if not isinstance(value, dict):
            problems.append((path, f"expected a mapping ({stype}), got {describe(value)}"))
            return None
        key_type, value_type = stype.args
        out = []
        for key, item in value.items():
            if key_type.name in _INTS and isinstance(key, str) and _INT_TEXT.fullmatch(key):
                key = int(key)  # YAML and JSON keys of numeric maps are often strings of digits
            out.append(
                (
                    _convert(key, key_type, path + (key,), problems),
                    _convert(item, value_type, path + (key,), problems),
                )
            )
        return out
    if name == "struct":
        if not isinstance(value, dict):
            problems.append((path, f"expected a mapping ({stype}), got {describe(value)}"))
            return None
        fields = {c.name: c.type for c in stype.args}
        for key in value:
            if key not in fields:
                hint = did_you_mean(key, fields)
                problems.append(
                    (path + (key,), f"unknown field {key!r} of {stype}" + (f" ({hint})" if hint else ""))
                )
        return {f: _convert(value.get(f), t, path + (f,), problems) for f, t in fields.items()}
    if name == "decimal":
        return _decimal(value, stype, path, problems)
    found = list(check_value(value, stype, path))
    if found:
        problems.extend(found)
        return None
    if name in ("double", "float"):
        return float(value)
    if name == "binary":
        return value.encode("utf-8")
    if name == "date":
        return date.fromisoformat(value)
    if name in ("timestamp", "timestamp_ntz"):
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if name == "timestamp_ntz":
            if stamp.tzinfo is not None:
                problems.append((path, f"a timestamp_ntz has no time zone, got {value!r}"))
                return None
            return stamp
        return (stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
    return value  # integers, booleans, strings


def _decimal(value: Any, stype: SparkType, path: tuple, problems: list[Problem]) -> Decimal | None:
    precision, scale = stype.args
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        problems.append((path, f"expected a number ({stype}), got {describe(value)}"))
        return None
    if isinstance(value, float) and not math.isfinite(value):
        problems.append((path, f"{value} is not a {stype} value"))
        return None
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        problems.append((path, f"expected a number ({stype}), got {describe(value)}"))
        return None
    if not number.is_finite():
        problems.append((path, f"{value} is not a {stype} value"))
        return None
    exponent = number.as_tuple().exponent
    if (
        isinstance(exponent, int)
        and -exponent > scale
        and number != number.quantize(Decimal(1).scaleb(-scale))
    ):
        problems.append((path, f"{value} has more than {scale} digits after the point ({stype})"))
        return None
    if len(str(abs(int(number))).lstrip("0")) > precision - scale:
        problems.append((path, f"{value} does not fit {stype}"))
        return None
    return number.quantize(Decimal(1).scaleb(-scale))


# -- rows -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One written value and where it is: a YAML value, or a CSV field (``text``)."""

    value: Any
    location: Location
    text: bool = False

    def typed(self, stype: SparkType, column: str) -> tuple[Any, list[TidehouseError]]:
        value, problems = text_value(self.value, stype) if self.text else yaml_value(self.value, stype)
        return value, [
            TidehouseError(
                ErrorCode.SPEC_WRONG_TYPE,
                f"column {column}: {message}" + (f" (at {_sub(sub)})" if sub else ""),
                location=self.location,
            )
            for sub, message in problems
        ]


@dataclass(frozen=True)
class RawRow:
    """One written row: its cells by column name, and where the row (and each key) is."""

    cells: dict[str, Cell]
    location: Location
    key_locations: dict[str, Location]


def _sub(path: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def typed_rows(
    rows: tuple[RawRow, ...], columns: tuple[Column, ...], *, what: str, required: tuple[str, ...] = ()
) -> tuple[list[dict[str, Any]], list[TidehouseError]]:
    """``rows`` as dicts of Python values of ``columns`` (a column a row leaves out is NULL). Errors: an
    unknown column, a value that does not fit its type, NULL in a NOT NULL column or in ``required``."""
    types = {c.name: c.type for c in columns}
    not_null = {c.name for c in columns if not c.nullable} | set(required)
    out: list[dict[str, Any]] = []
    errors: list[TidehouseError] = []
    for row in rows:
        typed: dict[str, Any] = {}
        for name, cell in row.cells.items():
            if name not in types:
                hint = did_you_mean(name, types)
                errors.append(
                    TidehouseError(
                        ErrorCode.SPEC_UNKNOWN_KEY,
                        f"{what} has no column '{name}'",
                        location=row.key_locations.get(name, cell.location),
                        hint=hint or f"columns: {', '.join(types)}",
                    )
                )
                continue
            typed[name], problems = cell.typed(types[name], name)
            errors += problems
        for name in sorted(not_null):
            if typed.get(name) is None and name in types:
                cell = row.cells.get(name)
                errors.append(
                    TidehouseError(
                        ErrorCode.SPEC_BAD_VALUE,
                        f"column {name} may not be NULL"
                        + (" (a primary key column)" if name in required else " (NOT NULL)"),
                        location=cell.location if cell else row.location,
                    )
                )
        out.append({c.name: typed.get(c.name) for c in columns})
    return out, errors


# -- CSV files ------------------------------------------------------------------------------------------


def read_csv(path: Path, shown: str) -> tuple[tuple[str, ...], tuple[RawRow, ...]]:
    """The header and the rows of a CSV file (fields kept as text); ``shown`` is the file name in errors."""
    text = read_text(path)
    lines = text.splitlines()
    reader = csv.reader(io.StringIO(text))
    header: tuple[str, ...] | None = None
    header_cols: list[int] = []
    rows: list[RawRow] = []
    start = 1
    for record in reader:
        line = start
        start = reader.line_num + 1
        if not record:
            continue  # a blank line
        cols = _field_starts(lines[line - 1]) if line - 1 < len(lines) else []
        if header is None:
            header = tuple(f.strip() for f in record)
            header_cols = cols
            _check_header(header, header_cols, shown, line)
            continue
        if len(record) != len(header):
            raise TidehouseError(
                ErrorCode.SPEC_BAD_VALUE,
                f"the row has {len(record)} fields, the header {len(header)}",
                location=Location(shown, line, 1),
                hint="quote fields that contain commas",
            )
        cells = {
            name: Cell(field, Location(shown, line, cols[i] if i < len(cols) else None, name), text=True)
            for i, (name, field) in enumerate(zip(header, record))
        }
        rows.append(RawRow(cells, Location(shown, line, 1), {}))
    if header is None:
        raise TidehouseError(
            ErrorCode.YAML_EMPTY, "the CSV file is empty: it needs a header row", location=Location(shown, 1)
        )
    return header, tuple(rows)


def _check_header(header: tuple[str, ...], cols: list[int], shown: str, line: int) -> None:
    seen: set[str] = set()
    for i, name in enumerate(header):
        where = Location(shown, line, cols[i] if i < len(cols) else None)
        if not COLUMN_RE.match(name):
            raise TidehouseError(
                ErrorCode.SPEC_BAD_IDENTIFIER, f"{name!r} is not a column name", location=where
            )
        if name in seen:
            raise TidehouseError(ErrorCode.SPEC_BAD_VALUE, f"column {name!r} is named twice", location=where)
        seen.add(name)


def _field_starts(line: str) -> list[int]:
    """1-based columns where the fields of one CSV line start (quotes respected)."""
    starts, quoted = [1], False
    for i, char in enumerate(line):
        if char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            starts.append(i + 2)
    return starts
