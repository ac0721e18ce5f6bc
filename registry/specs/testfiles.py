"""Loading action tests: find the test files, parse each one, check every case against its action.

:func:`load_action_tests` takes files, ``FILE::CASE`` and folders; :func:`parse_action_test` one file. A case
is checked against the action's header (inputs, parameters and their types, the output contract) and its
input rows are typed by their input's schema, each error at its line and column; every error of every file
is reported together. The file format is :mod:`registry.specs.actiontest`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from registry.specs.action import ActionSpec
from registry.specs.actiontest import (
    DEFAULT_RUNS,
    MAX_RUNS,
    TEST_SUFFIX,
    ActionTestCase,
    ActionTestSpec,
    CaseInput,
    CaseSpec,
    Expected,
)
from registry.specs.base import did_you_mean
from registry.specs.filekinds import kind_of
from registry.specs.fixtures import Cell, RawRow, read_csv, typed_rows
from registry.specs.loading import ambiguous_errors, located_errors, parse_action
from registry.specs.values import check_value, describe
from runtime.core.errors import ErrorCode, Location, TidehouseError, TidehouseErrors
from runtime.core.sparktypes import parse_columns
from runtime.core.yamlsource import Document, load_yaml, read_text


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
        elif path.is_file() and kind_of(name) == "action":  # `tidehouse test top_n.sql`: was read as YAML
            tests = path.with_name(path.stem + TEST_SUFFIX)
            raise TidehouseError(
                ErrorCode.SPEC_BAD_VALUE,
                "an action file, not a test file",
                location=Location(name),
                hint=f"its tests are in {tests}"
                if tests.is_file()
                else f"write its tests in {tests}, as docs/actions.md shows",
            )
        elif path.is_file():
            out.append((path, case or None))
        else:
            what = "not a file or folder" if path.exists() else "no such file or folder"  # /dev/null, a fifo
            raise TidehouseError(ErrorCode.SPEC_BAD_VALUE, what, location=Location(name))
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
        except TidehouseError as exc:
            errors += TidehouseErrors.listed(exc)
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
            lookups=case.lookups if case.lookups is not None else self.spec.lookups,
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
