"""The spec base model and the small value types every spec shares (identifiers, columns, durations).

Specs are strict and frozen: unknown keys are errors (``extra="forbid"``), scalars are not coerced (a
string field refuses ``5``, an integer field refuses ``"5"``), and a loaded spec never changes. Checks that
pydantic cannot express raise :class:`pydantic_core.PydanticCustomError` with a ``th_*`` type; the loader
maps those types to :class:`~runtime.core.errors.ErrorCode` values (see :mod:`registry.specs.loading`).
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict
from pydantic_core import PydanticCustomError

from runtime.core.durations import parse_duration
from runtime.core.literals import is_system_column
from runtime.core.sparktypes import Column as DdlColumn
from runtime.core.sparktypes import SparkTypeError, parse_columns

IDENTIFIER_RE = re.compile(r"^[a-z_][a-z0-9_]*\Z")  # \Z: "$" would accept a trailing newline
COLUMN_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
MAX_NAME = 128

# error types raised by validators; the loader turns them into error codes
BAD_IDENTIFIER = "th_identifier"
BAD_DURATION = "th_duration"
BAD_VALUE = "th_value"
WRONG_TYPE = "th_type"
MISSING = "th_missing"
BAD_PRIMARY_KEY = "th_primary_key"


class Spec(BaseModel):
    """Base of every spec: strict, frozen, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, validate_default=False)


def did_you_mean(word: Any, choices: Iterable[Any]) -> str | None:
    """A hint naming the closest choice, or ``None`` when nothing is close."""
    if not isinstance(word, str):
        return None
    names = sorted({str(c) for c in choices})
    close = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    if not close:
        lowered = {n.lower(): n for n in names}
        close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
        close = [lowered[c] for c in close]
    return f"did you mean '{close[0]}'?" if close else None


def custom(kind: str, message: str, **context: Any) -> PydanticCustomError:
    """A validation error of one of our ``th_*`` kinds; ``at=("key", ...)`` points below the current node."""
    return PydanticCustomError(kind, message.replace("{", "{{").replace("}", "}}"), context or None)


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        from registry.specs.values import describe

        raise custom(WRONG_TYPE, f"expected {what}, got {describe(value)}")
    return value


def identifier(value: Any) -> str:
    """Names of flows, tables, sources, actions, inputs and parameters: ``[a-z_][a-z0-9_]*``."""
    value = _str(value, "a name (lower-case letters, digits, _)")
    if not IDENTIFIER_RE.match(value) or len(value) > MAX_NAME:
        raise custom(
            BAD_IDENTIFIER,
            f"{value!r} is not a valid name: use lower-case letters, digits and _, "
            f"not starting with a digit (at most {MAX_NAME} characters)",
        )
    if is_system_column(value):
        raise custom(BAD_IDENTIFIER, f"{value!r}: names starting with '__' are reserved for system columns")
    return value


def column(value: Any) -> str:
    """A user column name: letters, digits, _; never starting with ``__`` (system columns)."""
    value = _str(value, "a column name")
    if not COLUMN_RE.match(value) or len(value) > MAX_NAME:
        raise custom(BAD_IDENTIFIER, f"{value!r} is not a valid column name (letters, digits and _)")
    if is_system_column(value):
        raise custom(BAD_IDENTIFIER, f"{value!r}: columns starting with '__' are system columns")
    return value


def duration(value: Any) -> float:
    """``500ms``, ``5s``, ``1m``, ``2h``, ``1d`` or a number of seconds; must be positive."""
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise custom(BAD_DURATION, str(exc)) from None
    if seconds <= 0:
        raise custom(BAD_DURATION, f"a duration must be positive, got {value!r}")
    return seconds


def strict_text(value: Any) -> str:
    return _str(value, "a string")


def unique(values: tuple, what: str) -> tuple:
    seen: set = set()
    for i, v in enumerate(values):
        key = v.lower() if isinstance(v, str) else v
        if key in seen:
            raise custom(BAD_VALUE, f"{what} {v!r} is listed twice", at=(i,))
        seen.add(key)
    return values


def listed_once(what: str) -> AfterValidator:
    """A list field's validator: no value twice (names compared case-insensitively), the second one named."""
    return AfterValidator(functools.partial(unique, what=what))


def ddl_columns(
    value: str, *, untyped: bool = False, what: str = "column", error: str = "not a Spark DDL schema"
) -> list[DdlColumn]:
    """The columns of a Spark DDL column list; one that does not parse, or a ``__`` (system) column, is a
    spec error."""
    try:
        columns = parse_columns(value, untyped=untyped)
    except SparkTypeError as exc:
        raise custom(BAD_VALUE, f"{error}: {exc}") from None
    for c in columns:
        if is_system_column(c.name):
            raise custom(BAD_VALUE, f"{what} {c.name!r}: columns starting with '__' are system columns")
    return columns


Identifier = Annotated[str, BeforeValidator(identifier)]
Column = Annotated[str, BeforeValidator(column)]
Duration = Annotated[float, BeforeValidator(duration)]
Text = Annotated[str, BeforeValidator(strict_text)]
PrimaryKey = Annotated[tuple[Column, ...], listed_once("primary key column")]
