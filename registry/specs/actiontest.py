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

The models below check the file's shape (strict, like every spec); :func:`load_action_tests` then resolves
the action, checks the cases against its header (inputs, parameters and their types, the output contract)
and types every input value by its input's schema, each error at its line and column. Expected rows are
typed later, by the output schema Spark finds (:meth:`Expected.typed`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator

from registry.specs.action import ActionSpec
from registry.specs.base import (
    BAD_PRIMARY_KEY,
    BAD_VALUE,
    Column,
    Identifier,
    Spec,
    Text,
    custom,
    did_you_mean,
    unique,
)
from registry.specs.fixtures import Cell, RawRow, read_csv, typed_rows
from registry.specs.loading import ambiguous_errors, located_errors, parse_action
from registry.specs.values import check_value, describe
from runtime.core.errors import ErrorCode, Location, TidehouseError, TidehouseErrors
from runtime.core.literals import is_system_column
from runtime.core.sparktypes import Column as DdlColumn
from runtime.core.sparktypes import SparkTypeError, parse_columns
from runtime.core.yamlsource import Document, load_yaml, read_text

TEST_SUFFIX = ".test.yaml"
DEFAULT_RUNS = 2
MAX_RUNS = 10
DEFAULT_TOLERANCE = 1e-6


def _ddl(value: Any) -> str:
    if not isinstance(value, str):
        raise custom("th_type", "expected Spark DDL like 'user_id string, events bigint'")
    try:
        columns = parse_columns(value)
    except SparkTypeError as exc:
        raise custom(BAD_VALUE, f"not a Spark DDL schema: {exc}") from None
    for column in columns:
        if is_system_column(column.name):
            raise custom(BAD_VALUE, f"column {column.name!r}: columns starting with '__' are system columns")
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
    primary_key: tuple[Column, ...] | None = Field(
        None, description="Primary key of the table under test in this case; `[]` for a log table."
    )
    runs: Annotated[int, Field(strict=True, ge=1, le=MAX_RUNS)] | None = Field(
        None,
        description=f"How many `--until-idle` runs the stream run feeds the rows in "
        f"(default {DEFAULT_RUNS}): each input's rows are split into that many consecutive parts.",
    )
    tolerance: Tolerance | None = Field(
        None, description="Float tolerance of this case (default: the file's)."
    )

    @field_validator("primary_key")
    @classmethod
    def _pk_unique(cls, value: tuple | None) -> tuple | None:
        return None if value is None else unique(value, "primary key column")


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
    primary_key: tuple[Column, ...] = Field(
        (),
        description="Primary key of the table under test (as a flow would declare it); needed when the "
        "action aggregates, ranks or joins primary-key inputs.",
    )
    tolerance: Tolerance = Field(
        DEFAULT_TOLERANCE,
        description="Floats are equal when they differ by at most this much, relatively or absolutely.",
    )
    cases: dict[Identifier, CaseSpec] = Field(description="The cases, by name.")

    @field_validator("primary_key")
    @classmethod
    def _pk_unique(cls, value: tuple) -> tuple:
        return unique(value, "primary key column")

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

    @property
    def id(self) -> str:
        """``FILE::CASE``, how ``tidehouse test`` selects one case."""
        return f"{self.file}::{self.name}"


# -- loading ----------------------------------------------------------------------------------------------


def collect_test_files(paths: Iterable[str | os.PathLike]) -> list[tuple[Path, str | None]]:
    """``(file, case or None)`` for each argument: a test file, ``FILE::CASE``, or a folder (its
    ``*.test.yaml`` files, recursively)."""
    out: list[tuple[Path, str | None]] = []
    for raw in paths:
        text = str(raw)
        name, _, case = text.partition("::")
        path = Path(name)
        if path.is_dir() and not case:
            found = sorted(p for p in path.rglob("*" + TEST_SUFFIX) if p.is_file())
            if not found:
                raise TidehouseError(
                    ErrorCode.SPEC_BAD_VALUE,
                    f"the folder holds no action tests (*{TEST_SUFFIX})",
                    location=Location(name),
                    hint=f"write one next to its action: <action>{TEST_SUFFIX} (docs/actions.md)",
                )
            out += [(p, None) for p in found]
        elif path.is_file():
            out.append((path, case or None))
        else:
            raise TidehouseError(ErrorCode.SPEC_BAD_VALUE, "no such file or folder", location=Location(name))
    return out


def load_action_tests(paths: Iterable[str | os.PathLike]) -> list[ActionTestCase]:
    """The cases of the test files and folders in ``paths`` (``FILE::CASE`` selects one case). Every problem
    of every file is reported together (``TidehouseErrors``)."""
    cases: list[ActionTestCase] = []
    errors: list[TidehouseError] = []
    seen: dict[tuple[str, str], None] = {}
    for path, only in collect_test_files(paths):
        try:
            found = parse_action_test(path)
        except TidehouseErrors as exc:
            errors += exc.errors
            continue
        except TidehouseError as exc:
            errors.append(exc)
            continue
        if only is not None and only not in {c.name for c in found}:
            errors.append(
                TidehouseError(
                    ErrorCode.SPEC_BAD_VALUE,
                    f"no case '{only}'",
                    location=Location(str(path)),
                    hint=did_you_mean(only, [c.name for c in found])
                    or "cases: " + ", ".join(c.name for c in found),
                )
            )
            continue
        for case in found:
            if (only is None or case.name == only) and (case.file, case.name) not in seen:
                seen[(case.file, case.name)] = None
                cases.append(case)
    errors += _action_conflicts(cases)
    TidehouseErrors.raise_if_any(errors)
    return cases


def _action_conflicts(cases: list[ActionTestCase]) -> list[TidehouseError]:
    """Two different action files of one name cannot be tested together (one throw-away registry)."""
    first: dict[str, ActionSpec] = {}
    out = []
    for case in cases:
        spec = case.action
        other = first.setdefault(spec.name, spec)
        if other.path != spec.path and other.model_dump(exclude={"path"}) != spec.model_dump(
            exclude={"path"}
        ):
            out.append(
                TidehouseError(
                    ErrorCode.ACTION_DUPLICATE,
                    f"two different actions named {spec.name}: {other.path} and {spec.path}",
                    location=case.location,
                    hint="test them in separate runs of tidehouse test",
                )
            )
            first[spec.name] = spec  # report each pair once
    return out


def parse_action_test(path: str | Path) -> list[ActionTestCase]:
    """The checked cases of one test file; raises every problem found, each at its line and column."""
    path = Path(path)
    file = str(path)
    doc = load_yaml(read_text(path), file)
    errors = ambiguous_errors(doc)
    if not isinstance(doc.data, dict):
        raise TidehouseError(
            ErrorCode.SPEC_WRONG_TYPE,
            f"expected a mapping at the top, got {describe(doc.data)}",
            location=doc.location(()),
        )
    try:
        spec = ActionTestSpec.model_validate(doc.data)
    except ValidationError as exc:
        bad = {e.location.path for e in errors}
        errors += [e for e in located_errors(exc, doc, ActionTestSpec) if e.location.path not in bad]
        errors.sort(key=lambda e: (e.location.line or 0, e.location.col or 0))
        TidehouseErrors.raise_if_any(errors)
        raise  # pragma: no cover - a ValidationError always has errors
    TidehouseErrors.raise_if_any(errors)
    action = _find_action(spec, path, doc)
    builder = _CaseBuilder(spec, action, doc, path)
    cases = [builder.case(name, case) for name, case in spec.cases.items()]
    builder.errors.sort(key=lambda e: (e.location.line or 0, e.location.col or 0) if e.location else (0, 0))
    TidehouseErrors.raise_if_any(builder.errors)
    return cases


def _find_action(spec: ActionTestSpec, path: Path, doc: Document) -> ActionSpec:
    name = spec.action
    where = doc.location(("action",)) if name else Location(str(path), 1, 1)
    if name is None:
        stem = path.name[: -len(TEST_SUFFIX)] if path.name.endswith(TEST_SUFFIX) else path.stem
        name = stem
    folder = path.parent
    candidates = [folder / f"{name}.sql"] + sorted(p for p in folder.glob("*.sql") if p.stem != name)
    names: list[str] = []
    for candidate in candidates:
        if not candidate.is_file():
            continue
        action = parse_action(candidate)  # a broken action is reported where it is broken
        if action.name == name:
            return action
        names.append(action.name)
    raise TidehouseError(
        ErrorCode.ACTION_UNKNOWN,
        f"no action '{name}' in {folder}" + ("" if spec.action else " (named after the test file)"),
        location=where,
        hint=did_you_mean(name, names)
        or (f"actions there: {', '.join(sorted(names))}" if names else "set action:"),
    )


class _CaseBuilder:
    """Checks the cases of one file against its action and types their input rows; collects every error."""

    def __init__(self, spec: ActionTestSpec, action: ActionSpec, doc: Document, path: Path) -> None:
        self.spec, self.action, self.doc, self.path = spec, action, doc, path
        self.errors: list[TidehouseError] = []
        for relation in spec.inputs:
            if relation not in action.inputs:
                self._extra_input(("inputs", relation), relation)

    def error(
        self, code: ErrorCode, message: str, at: tuple, *, key: bool = False, hint: str | None = None
    ) -> None:
        self.errors.append(TidehouseError(code, message, location=self.doc.location(at, key=key), hint=hint))

    def _extra_input(self, at: tuple, relation: str) -> None:
        self.error(
            ErrorCode.INPUT_EXTRA,
            f"action {self.action.name} has no input '{relation}'",
            at,
            key=True,
            hint=did_you_mean(relation, self.action.inputs) or f"its inputs: {', '.join(self.action.inputs)}",
        )

    def case(self, name: str, case: CaseSpec) -> ActionTestCase:
        base = ("cases", name)
        action = self.action
        for relation in case.inputs:
            if relation not in action.inputs:
                self._extra_input(base + ("inputs", relation), relation)
        self._check_params(case, base)
        explicit: dict[str, int] = {}
        written: dict[str, list[list[RawRow]] | list[RawRow]] = {}
        for relation, value in case.given.items():
            if relation not in action.inputs:
                self._extra_input(base + ("given", relation), relation)
                continue
            written[relation] = self._given(value, base + ("given", relation))
            if written[relation] and isinstance(written[relation][0], list):
                explicit[relation] = len(written[relation])
        missing = [r for r in action.inputs if r not in case.given]
        if missing:
            self.error(
                ErrorCode.INPUT_MISSING,
                f"no rows given for input {', '.join(repr(m) for m in missing)} of action {action.name}",
                base + ("given",),
                key=True,
                hint=f"write {missing[0]}: [] for none",
            )
        runs = case.runs or max(explicit.values(), default=DEFAULT_RUNS)
        for relation, count in explicit.items():
            if count > runs:
                self.error(
                    ErrorCode.SPEC_BAD_VALUE,
                    f"input {relation} gives rows for {count} runs, the case has runs: {runs}",
                    base + ("runs",),
                )
        inputs = []
        for relation in action.inputs:
            schema = case.inputs.get(relation) or self.spec.inputs.get(relation)
            if schema is None:
                self.error(
                    ErrorCode.SPEC_MISSING_KEY,
                    f"no schema for input '{relation}'",
                    base,
                    key=True,
                    hint=f"declare it under inputs: {relation}: {{schema: 'col type, ...'}}",
                )
                continue
            parts = written.get(relation, [])
            if parts and isinstance(parts[0], list):
                split = list(parts) + [[] for _ in range(runs - len(parts))]
            else:
                split = _split(list(parts), runs)
            columns = parse_columns(schema.schema_)
            typed_parts = []
            for part in split:
                rows, errors = typed_rows(
                    tuple(part), columns, what=f"input {relation}", required=schema.primary_key
                )
                self.errors += errors
                typed_parts.append(tuple(rows))
            inputs.append(CaseInput(relation, schema.schema_, schema.primary_key, tuple(typed_parts)))
        primary_key = case.primary_key if case.primary_key is not None else self.spec.primary_key
        pk_at = base + ("primary_key",) if case.primary_key is not None else ("primary_key",)
        contract = action.output_columns
        if contract is not None:
            for i, column in enumerate(primary_key):
                if column not in contract:
                    self.error(
                        ErrorCode.PRIMARY_KEY_INVALID,
                        f"primary key column '{column}' is not an output column of action {action.name} "
                        f"({', '.join(contract)})",
                        pk_at + (i,),
                    )
        return ActionTestCase(
            file=str(self.path),
            name=name,
            location=self.doc.location(base, key=True),
            action=action,
            description=case.description,
            params=dict(case.params),
            inputs=tuple(inputs),
            expect=self._expect(case.expect, base + ("expect",)),
            primary_key=tuple(primary_key),
            primary_key_location=self.doc.location(pk_at),
            runs=runs,
            tolerance=case.tolerance if case.tolerance is not None else self.spec.tolerance,
        )

    def _check_params(self, case: CaseSpec, base: tuple) -> None:
        declared = self.action.params
        for pname, value in case.params.items():
            at = base + ("params", pname)
            if pname not in declared:
                self.error(
                    ErrorCode.PARAM_UNKNOWN,
                    f"action {self.action.name} has no parameter '{pname}'",
                    at,
                    key=True,
                    hint=did_you_mean(pname, declared) or f"its parameters: {', '.join(declared) or 'none'}",
                )
                continue
            for sub, message in check_value(value, declared[pname].spark_type):
                self.error(ErrorCode.PARAM_TYPE, f"parameter {pname}: {message}", at + sub)
        for pname, pspec in declared.items():
            if pspec.required and pname not in case.params:
                self.error(
                    ErrorCode.PARAM_MISSING,
                    f"action {self.action.name} needs parameter '{pname}' ({pspec.type})",
                    base + ("params",) if case.params else base,
                    key=True,
                )

    def _rows(self, value: Any, at: tuple) -> list[RawRow]:
        """A list of row mappings, or ``{csv: FILE}``."""
        if isinstance(value, dict) and set(value) == {"csv"}:
            return self._csv(value["csv"], at + ("csv",))
        if not isinstance(value, list):
            self.error(
                ErrorCode.SPEC_WRONG_TYPE,
                f"expected a list of rows or {{csv: FILE}}, got {describe(value)}",
                at,
            )
            return []
        rows = []
        for i, row in enumerate(value):
            if not isinstance(row, dict):
                self.error(
                    ErrorCode.SPEC_WRONG_TYPE,
                    f"expected a row (column: value), got {describe(row)}",
                    at + (i,),
                )
                continue
            cells = {str(k): Cell(v, self.doc.location(at + (i, k))) for k, v in row.items()}
            keys = {str(k): self.doc.location(at + (i, k), key=True) for k in row}
            rows.append(RawRow(cells, self.doc.location(at + (i,)), keys))
        return rows

    def _csv(self, name: Any, at: tuple) -> list[RawRow]:
        if not isinstance(name, str) or not name.strip():
            self.error(ErrorCode.SPEC_WRONG_TYPE, f"expected a CSV file name, got {describe(name)}", at)
            return []
        file = self.path.parent / name
        if not file.is_file():
            self.error(
                ErrorCode.SPEC_BAD_VALUE,
                f"no such CSV file: {file}",
                at,
                hint="the path is relative to the test file",
            )
            return []
        try:
            return list(read_csv(file, str(file))[1])
        except TidehouseError as exc:
            self.errors.append(exc)
            return []

    def _given(self, value: Any, at: tuple) -> list[list[RawRow]] | list[RawRow]:
        if isinstance(value, dict) and set(value) == {"runs"}:
            parts = value["runs"]
            if not isinstance(parts, list) or not parts:
                self.error(
                    ErrorCode.SPEC_WRONG_TYPE, "expected a list with the rows of each run", at + ("runs",)
                )
                return []
            if len(parts) > MAX_RUNS:
                self.error(ErrorCode.SPEC_BAD_VALUE, f"at most {MAX_RUNS} runs", at + ("runs",))
            return [self._rows(part, at + ("runs", i)) for i, part in enumerate(parts)]
        if isinstance(value, dict) and set(value) - {"csv"}:
            unknown = sorted(set(value) - {"csv", "runs"}) or sorted(value)
            self.error(
                ErrorCode.SPEC_UNKNOWN_KEY,
                f"unknown key '{unknown[0]}'",
                at + (unknown[0],),
                key=True,
                hint="the rows of an input are a list of rows, {csv: FILE} or {runs: [ROWS, ...]}",
            )
            return []
        return self._rows(value, at)

    def _expect(self, value: Any, at: tuple) -> Expected:
        if isinstance(value, dict) and set(value) == {"csv"}:
            name = value["csv"]
            rows = self._csv(name, at + ("csv",))
            header: tuple[str, ...] = ()
            if rows:
                header = tuple(rows[0].cells)
            elif isinstance(name, str) and (self.path.parent / name).is_file():
                try:
                    header = read_csv(self.path.parent / name, str(self.path.parent / name))[0]
                except TidehouseError:
                    header = ()
            return Expected(header, tuple(rows), self.doc.location(at))
        rows = self._rows(value, at)
        columns: dict[str, None] = {}
        for row in rows:
            columns.update(dict.fromkeys(row.cells))
        return Expected(tuple(columns), tuple(rows), self.doc.location(at))


def _split(rows: list, parts: int) -> list[list]:
    """``rows`` in ``parts`` consecutive pieces of (nearly) equal size, the longer ones first."""
    size, extra = divmod(len(rows), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(rows[start:end])
        start = end
    return out


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value
