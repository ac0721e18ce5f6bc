"""Why a source record is malformed: the quarantine's ``reason`` names the field and the value that Spark's
parser refused, where that can be told without Spark (pure Python, so write tasks run it too).

Spark keeps a malformed record verbatim and says nothing of why. For JSON, the record is parsed here again
(``json``) and each declared column's value is checked against its type with the rules of Spark's JSON
parser (``JacksonParser``): an integer column takes JSON integers in its range, a floating one numbers and
the strings ``NaN``/``Infinity``/``INF`` with their signs, a boolean ``true``/``false``, an array a list,
a struct or map an object, a timestamp a string or an integer; a string column takes anything; ``null`` is
always a value. For CSV, a line without quotes or escapes is split at the separator: it must have one field
per column, and each non-empty field parse as its column's type (Spark's CSV parser: ``Integer.parseInt``,
``Double.parseDouble``, ``true``/``false``). Only what surely fails is named (a timestamp string is blamed
only when it has no digit: Spark's fallback parser reads many spellings), so a record whose fault is
elsewhere (an option that changes the parser, a date format) keeps the general reason. The tests check each
named fault against Spark itself.
"""

from __future__ import annotations

import decimal
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from runtime.core.sparktypes import SparkType, SparkTypeError, parse_columns

GENERAL = "does not parse with the source schema"
# reader options that change what Spark's parser of each format accepts: with one set, no fault is named
_PARSER_OPTIONS = {
    "csv": {
        o.lower()
        for o in (
            "nullValue",
            "emptyValue",
            "nanValue",
            "positiveInf",
            "negativeInf",
            "dateFormat",
            "timestampFormat",
            "timestampNTZFormat",
            "locale",
            "ignoreLeadingWhiteSpace",
            "ignoreTrailingWhiteSpace",
            "quote",
            "escape",
            "comment",
            "charToEscapeQuoteEscaping",
            "unescapedQuoteHandling",
            "multiLine",
            "lineSep",
            "encoding",
            "charset",
            "enforceSchema",
            "preferDate",
            "enableDateTimeParsingFallback",
        )
    },
}
_PARSER_OPTIONS["json"] = {
    o.lower()
    for o in (
        "allowNumericLeadingZeros",
        "allowBackslashEscapingAnyCharacter",
        "allowUnquotedFieldNames",
        "allowComments",
        "allowUnquotedControlChars",
        "allowNonNumericNumbers",
        "allowSingleQuotes",
        "primitivesAsString",
        "prefersDecimal",
        "timestampFormat",
        "timestampNTZFormat",
        "dateFormat",
        "locale",
        "multiLine",
        "encoding",
        "charset",
    )
}
_RANGES = {
    "tinyint": (-(2**7), 2**8 - 1),  # Jackson reads a byte up to 255 (Spark keeps 200 as -56)
    "smallint": (-(2**15), 2**15 - 1),
    "int": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
}
_CSV_RANGES = _RANGES | {"tinyint": (-(2**7), 2**7 - 1)}  # Byte.parseByte
_SPECIAL = {"NaN", "+NaN", "-NaN", "Infinity", "+Infinity", "-Infinity", "INF", "+INF", "-INF"}
_MAX_FAULTS = 3


@dataclass(frozen=True)
class Malformed:
    """The reasons of one source's malformed records (its format, declared schema and reader options)."""

    format: str
    ddl: str | None = None
    options: tuple[tuple[str, str], ...] = ()

    @cached_property
    def _columns(self) -> dict[str, SparkType] | None:
        if self.format not in _PARSER_OPTIONS or not self.ddl:
            return None
        if any(k.lower() in _PARSER_OPTIONS[self.format] for k, _ in self.options):
            return None
        try:
            return {c.name: c.type for c in parse_columns(self.ddl) if c.type is not None}
        except SparkTypeError:
            return None

    @classmethod
    def of(cls, source) -> Malformed:
        """Of a flow's source (``materializer.plan.SourcePlan``)."""
        return cls(source.format, source.ddl, tuple(source.options))

    def reasons(self, raws: Iterable[str | None]) -> list[str]:
        return [self.reason(raw) for raw in raws]

    def reason(self, raw: str | None) -> str:
        head = f"malformed {self.format} record: "
        columns = self._columns
        if columns is None or raw is None:
            return head + GENERAL
        if self.format == "csv":
            return head + (_csv_reason(raw, columns, self._separator) or GENERAL)
        return head + (_json_reason(raw, columns) or GENERAL)

    @property
    def _separator(self) -> str:
        options = {k.lower(): v for k, v in self.options}
        return options.get("sep", options.get("delimiter", ","))


def _json_reason(raw: str, columns: dict[str, SparkType]) -> str | None:
    try:
        record = json.loads(raw, parse_float=decimal.Decimal)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # Spark reads the first value of a line and ignores what follows
            record = json.JSONDecoder(parse_float=decimal.Decimal).raw_decode(raw.strip())[0]
        elif "'" in raw:  # Spark's parser takes single-quoted names and strings: the fault may be elsewhere
            return None
        else:
            return f"not valid JSON ({exc.msg}: character {exc.pos + 1})"
    except (RecursionError, ValueError):  # nested too deep, an integer of over 4,300 digits: not sure why
        return None
    if not isinstance(record, dict):
        return None if isinstance(record, list) else f"a JSON {_kind(record)}, not an object"
    faults = []
    for name, value in record.items():
        if name in columns:
            faults += _faults(value, columns[name], name)
    return "; ".join(faults[:_MAX_FAULTS]) or None


def _csv_reason(raw: str, columns: dict[str, SparkType], sep: str) -> str | None:
    if not sep or "\\" in sep or any(c in raw for c in '"\\\r'):  # quoted or escaped fields: not split here
        return None
    fields = raw.split(sep)
    if len(fields) != len(columns):
        return f"{len(fields)} fields, the schema has {len(columns)} columns"
    faults = [
        f"field {name}: {_shown(text)} {fault}"
        for (name, t), text in zip(columns.items(), fields)
        if text != "" and (fault := _csv_fault(text, t))  # an empty field is null
    ]
    return "; ".join(faults[:_MAX_FAULTS]) or None


_INTEGER = re.compile(r"[+-]?\d+")


def _csv_fault(text: str, t: SparkType) -> str | None:
    name = t.name
    if name in _RANGES:
        if not _INTEGER.fullmatch(text):
            return f"is not {_a(name)}"
        low, high = _CSV_RANGES[name]
        digits = text.lstrip("+-").lstrip("0")
        return None if len(digits) < 20 and low <= int(text) <= high else f"is out of {name}'s range"
    if name in ("double", "float"):
        if text in ("NaN", "Inf", "-Inf") or text.rstrip()[-1:] in "dDfF" or "x" in text.lower():
            return None  # Spark's nanValue and infinities; Java's suffixed and hexadecimal numbers
        try:
            float(text)
        except ValueError:
            return f"is not {_a(name)}"
        return None
    if name == "boolean":
        return None if text.lower() in ("true", "false") else "is not a boolean"
    if name in ("decimal", "timestamp", "timestamp_ntz", "date"):
        return None if any(c.isdigit() for c in text) else f"is not {_a(str(t))}"
    return None


def _faults(value, t: SparkType, path: str) -> list[str]:
    """What of ``value`` Spark's JSON parser surely refuses as ``t`` (empty: nothing, or not sure)."""
    if value is None or t.name in ("string", "varchar", "char"):
        return []
    fault = _fault(value, t)
    if fault:
        return [f"field {path}: {_shown(value)} {fault}"]
    if t.name == "array":
        return [f for i, v in enumerate(value) for f in _faults(v, t.args[0], f"{path}[{i}]")]
    if t.name == "map":
        return [f for k, v in value.items() for f in _faults(v, t.args[1], f"{path}[{_shown(k)}]")]
    if t.name == "struct":
        fields = {c.name: c.type for c in t.args if c.type is not None}
        return [f for k, v in value.items() if k in fields for f in _faults(v, fields[k], f"{path}.{k}")]
    return []


def _fault(value, t: SparkType) -> str | None:
    kind, name = _kind(value), t.name
    if name in _RANGES:
        low, high = _RANGES[name]
        if kind != "integer":
            return f"is not {_a(name)}"
        return None if low <= value <= high else f"is out of {name}'s range"
    if name in ("double", "float"):
        return (
            None
            if kind in ("integer", "number") or (kind == "string" and value in _SPECIAL)
            else f"is not {_a(name)}"
        )
    if name == "boolean":
        return None if kind == "boolean" else "is not a boolean"
    if name == "decimal":
        if kind in ("integer", "number"):
            return _decimal_fault(value, *t.args)
        return None if kind == "string" and any(c.isdigit() for c in value) else f"is not {_a(str(t))}"
    if name in ("timestamp", "timestamp_ntz", "date"):
        if kind == "string":
            return None if any(c.isdigit() for c in value) else f"is not {_a(name)}"
        return None if kind == "integer" else f"is not {_a(name)}"
    if name == "binary":
        return None if kind == "string" else "is not a binary (a base64 string)"
    if name == "array":
        return None if kind == "array" else "is not an array"
    if name in ("map", "struct"):
        return None if kind == "object" else f"is not an object (the column is a {name})"
    return None


def _decimal_fault(value, precision: int, scale: int) -> str | None:
    """Spark sets the scale (half up), then refuses more digits than the precision."""
    if not isinstance(value, (int, decimal.Decimal)) or not decimal.Decimal(value).is_finite():
        return f"is not a decimal({precision},{scale})"
    number = decimal.Decimal(value)
    if number.adjusted() >= precision - scale + 1:  # more integer digits than the type has (and no rounding)
        return f"does not fit decimal({precision},{scale})"
    exact = decimal.Context(prec=precision + 2 * abs(scale) + 40)
    rounded = number.quantize(decimal.Decimal(1).scaleb(-scale), decimal.ROUND_HALF_UP, exact)
    if rounded != 0 and len(rounded.as_tuple().digits) > precision:
        return f"does not fit decimal({precision},{scale})"
    return None


def _kind(value) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, (float, decimal.Decimal)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _a(name: str) -> str:
    return ("an " if name[0] in "aeiou" else "a ") + name


def _shown(value) -> str:
    text = (
        str(value)
        if isinstance(value, decimal.Decimal)
        else json.dumps(value, default=float, ensure_ascii=False)
    )
    return text if len(text) <= 40 else text[:37] + "..."
