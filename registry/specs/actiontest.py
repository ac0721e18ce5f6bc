"""Action tests: fixture rows in, expected rows out, in a file next to the action.

``actions/top_n.test.yaml`` tests ``actions/top_n.sql`` (``tidehouse test``; docs/actions.md, "Testing an
action")::

    action: top_n                        # default: the file name without .test.yaml
    inputs:                              # each input relation's schema (Spark DDL) and primary key
      rows: {schema: "user_id string, events bigint", primary_key: [user_id]}
    primary_key: [rank]                  # of the table under test (its stream run needs one to upsert)
    cases:
      top_two:
        params: {order_by: events, tiebreak: user_id, n: 2}
        given:
          rows:                          # split into halves: the second half arrives in a second run
            - {user_id: u1, events: 3}
            - {user_id: u2, events: 5}
            - {user_id: u1, events: 9}   # u1 overtakes u2
        expect:
          - {rank: 1, user_id: u1, events: 9}
          - {rank: 2, user_id: u2, events: 5}

The models below check the file's shape (strict, like every spec); the checked case
(:class:`ActionTestCase`) is what :func:`registry.specs.testfiles.load_action_tests` makes of a file once it
resolved the action, checked the cases against its header (inputs, parameters and their types, the output
contract) and typed every input value by its input's schema, each error at its line and column. Expected
rows are typed later, by the output schema Spark finds (:meth:`Expected.typed`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from registry.specs.action import ActionSpec
from registry.specs.base import (
    BAD_PRIMARY_KEY,
    BAD_VALUE,
    Column,
    Identifier,
    PrimaryKey,
    Spec,
    Text,
    custom,
    ddl_columns,
    did_you_mean,
    unique,
)
from registry.specs.fixtures import RawRow, typed_rows
from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.sparktypes import Column as DdlColumn
from runtime.core.sparktypes import parse_columns

TEST_SUFFIX = ".test.yaml"
DEFAULT_RUNS = 2
MAX_RUNS = 10
DEFAULT_TOLERANCE = 1e-6


def _ddl(value: Any) -> str:
    if not isinstance(value, str):
        raise custom("th_type", "expected Spark DDL like 'user_id string, events bigint'")
    ddl_columns(value)
    return value.strip()


Tolerance = Annotated[float, Field(strict=True, ge=0)]


class CaseInputSpec(Spec):
    """The schema of one input relation of the action under test."""

    schema_: Annotated[str, BeforeValidator(_ddl)] = Field(
        alias="schema",
        description="Spark DDL of the rows the input receives ('user_id string, ts timestamp'); the types of "
        "the given values.",
    )
    primary_key: tuple[Column, ...] = Field(
        (),
        description="Makes the input a primary-key table: a later row replaces an earlier one with the same "
        "key (in the stream run as an update, in the batch run only the last row per key is read).",
    )

    @model_validator(mode="after")
    def _key_columns(self) -> CaseInputSpec:
        unique(self.primary_key, "primary key column")
        names = [c.name for c in parse_columns(self.schema_)]
        for i, name in enumerate(self.primary_key):
            if name not in names:
                raise custom(
                    BAD_PRIMARY_KEY,
                    f"primary key column {name!r} is not a column of the schema ({', '.join(names)})",
                    at=("primary_key", i),
                )
        return self


class CaseSpec(Spec):
    """One case: the action's parameters, the rows each input receives and the rows the action returns."""

    description: Text = Field("", description="What the case shows.")
    params: dict[Identifier, Any] = Field(
        default_factory=dict, description="Parameter values (checked against their types); defaults apply."
    )
    inputs: dict[Identifier, CaseInputSpec] = Field(
        default_factory=dict, description="Input schemas of this case, replacing the file's for those named."
    )
    given: dict[Identifier, Any] = Field(
        description="The rows of each input: a list of mappings (column: value; a column left out is NULL), "
        "`{csv: FILE}` (a CSV file next to the test file), or `{runs: [ROWS, ROWS, ...]}` to say which rows "
        "arrive in which stream run."
    )
    expect: Any = Field(
        description="The rows the action returns, in any order: a list of mappings or `{csv: FILE}`. Only "
        "the columns they name are compared (a column a row leaves out is NULL); `[]` expects no rows."
    )
    primary_key: PrimaryKey | None = Field(
        None, description="Primary key of the table under test in this case; `[]` for a log table."
    )
    lookups: Literal["processing_time"] | None = Field(
        None,
        description="`processing_time` to look up the primary-key inputs in this case (default: the file's).",
    )
    runs: Annotated[int, Field(strict=True, ge=1, le=MAX_RUNS)] | None = Field(
        None,
        description=f"How many `--until-idle` runs the stream run feeds the rows in "
        f"(default {DEFAULT_RUNS}): each input's rows are split into that many consecutive parts.",
    )
    tolerance: Tolerance | None = Field(
        None, description="Float tolerance of this case (default: the file's)."
    )


class ActionTestSpec(Spec):
    """An action test file (``actions/<action>.test.yaml``)."""

    action: Identifier | None = Field(
        None,
        description="The action under test, a `.sql` file of the test file's folder; default: the file name "
        "without `.test.yaml`.",
    )
    description: Text = Field("", description="What the tests cover.")
    inputs: dict[Identifier, CaseInputSpec] = Field(
        default_factory=dict, description="Schema (and primary key) of each input relation of the action."
    )
    primary_key: PrimaryKey = Field(
        (),
        description="Primary key of the table under test (as a flow would declare it); needed when the "
        "action aggregates, ranks or joins primary-key inputs.",
    )
    lookups: Literal["processing_time"] | None = Field(
        None,
        description="`processing_time` when the table under test looks its primary-key inputs up as a flow "
        "would with `lookups: processing_time` (each fact joined with them as they are when its run reads "
        "it); needed by a log table that reads primary-key inputs.",
    )
    tolerance: Tolerance = Field(
        DEFAULT_TOLERANCE,
        description="Floats are equal when they differ by at most this much, relatively or absolutely.",
    )
    cases: dict[Identifier, CaseSpec] = Field(description="The cases, by name.")

    @model_validator(mode="after")
    def _has_cases(self) -> ActionTestSpec:
        if not self.cases:
            raise custom(BAD_VALUE, "no cases: add one under cases:", at=("cases",))
        return self


# -- what a case is once checked --------------------------------------------------------------------------


@dataclass(frozen=True)
class CaseInput:
    """One input relation of a case: its schema, its primary key and the typed rows of each run."""

    relation: str
    ddl: str
    primary_key: tuple[str, ...]
    parts: tuple[tuple[dict[str, Any], ...], ...]  # the rows that arrive in run 1, 2, ...

    def rows(self, runs: int | None = None) -> list[dict[str, Any]]:
        """The input's content after ``runs`` runs (default: all): every row of a log input; the last row per
        key of a primary-key input (its state)."""
        rows = [row for part in self.parts[:runs] for row in part]
        if not self.primary_key:
            return rows
        state: dict[tuple, dict[str, Any]] = {}
        for row in rows:
            key = tuple(_hashable(row[c]) for c in self.primary_key)
            state.pop(key, None)
            state[key] = row
        return list(state.values())


@dataclass(frozen=True)
class Expected:
    """The expected rows of a case as written (typed once the output schema is known)."""

    columns: tuple[str, ...]
    rows: tuple[RawRow, ...]
    location: Location

    def typed(self, output: Sequence[DdlColumn]) -> tuple[list[dict[str, Any]], list[TidehouseError]]:
        """The rows as Python values of the output columns they name; an unknown column or a value that does
        not fit its column's type is an error at its line."""
        by_name = {c.name: c for c in output}
        errors = []
        for name in self.columns:
            if name not in by_name:
                where = next(
                    (
                        r.key_locations.get(name) or r.cells[name].location
                        for r in self.rows
                        if name in r.cells
                    ),
                    self.location,
                )
                errors.append(
                    TidehouseError(
                        ErrorCode.SPEC_UNKNOWN_KEY,
                        f"the action's output has no column '{name}'",
                        location=where,
                        hint=did_you_mean(name, by_name) or f"output columns: {', '.join(by_name)}",
                    )
                )
        known = tuple(DdlColumn(by_name[n].name, by_name[n].type) for n in self.columns if n in by_name)
        rows, typing = typed_rows(
            tuple(
                RawRow({k: v for k, v in r.cells.items() if k in by_name}, r.location, r.key_locations)
                for r in self.rows
            ),
            known,
            what="the output",
        )
        return rows, errors + typing


@dataclass(frozen=True)
class ActionTestCase:
    """One checked case, ready to run."""

    file: str
    name: str
    location: Location
    action: ActionSpec
    description: str
    params: dict[str, Any]
    inputs: tuple[CaseInput, ...]
    expect: Expected
    primary_key: tuple[str, ...]
    primary_key_location: Location
    runs: int
    tolerance: float
    lookups: str | None = None  # "processing_time": the table under test looks its primary-key inputs up

    @property
    def id(self) -> str:
        """``FILE::CASE``, how ``tidehouse test`` selects one case."""
        return f"{self.file}::{self.name}"


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value
