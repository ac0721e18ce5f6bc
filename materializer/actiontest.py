"""Running action tests (``tidehouse test``): each case in Spark batch, then all of them as one stream.

A case (:class:`registry.specs.actiontest.ActionTestCase`) gives an action its parameters and the rows of
each input, split into the parts that arrive in stream run 1, 2, ... It passes when

1. **batch**: the action's SQL over all the rows (a primary-key input holds its last row per key), with the
   parameters bound as the materializer binds them (:func:`~materializer.analyze.bind_params`,
   :func:`~materializer.analyze.spark_args`), returns the expected rows; and
2. **stream**: the same rows fed through the real materializer return the batch result after every run —
   hot table and, after the last run, its lake copy too.

The stream side is one throw-away project (a temp folder: its own home, registry, hot store, lake and
checkpoints) with two flows: ``action_test_feeds`` declares, per distinct input, an ODS table (primary-key
when the input declares one), and ``action_tests`` per case a DWD table that reads those tables and runs the
action under test with the case's parameters and primary key. So the plan picks each case's strategy
(append, aggregate, changelog, recompute) as it would in a real flow. The feeds flow never runs: before
each run the next part of every input is written into its ODS table (:meth:`TableStore.write`, what an ODS
query's batch does), which halves the queries to start and drain. Every case shares the flow: one plan,
and per run one ``--until-idle`` trigger for all of them. Rows that an
earlier run's result has and a later one's has not (``retractions``) must leave the stream's tables too.

Comparisons are multisets of the user columns (``__`` columns ignored, order ignored, floats within the
case's tolerance; :mod:`materializer.rowdiff`). What goes wrong in the test file (a value that does not fit
the output column's type, a primary key the output lacks, an SQL that does not analyse, a shape no strategy
runs) raises ``TidehouseError`` s located in the test or action file, before anything is compared; what the
action does differently from the test is a failed case in the report.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import pyarrow as pa

from materializer.analyze import _sql_error, bind_params, spark_args
from materializer.rowdiff import RowDiff, diff_rows, rows_of, show
from runtime.core.errors import ErrorCode, Location, TidehouseError, TidehouseErrors
from runtime.core.literals import is_system_column
from runtime.core.sparktypes import parse_columns
from runtime.core.text import counted
from runtime.core.yamlsource import read_text

log = logging.getLogger(__name__)

FLOW = "action_tests"
FEEDS = "action_test_feeds"  # the flow that declares the inputs' ODS tables (never run: written directly)
FEED = "tidehouse_test_feed"
FEED_WRITER = "tidehouse-test"
FEED_SQL = f"""/*---
name: {FEED}
description: Feeds the rows of an action test into the flow that streams them (a pass-through).
inputs: [raw]
---*/
SELECT * FROM raw
"""
TRIGGER = "100ms"  # a drain (--until-idle) waits about one trigger per query
# Cases per streaming flow: every table's query has its Python source process, so a flow of dozens of tables
# runs them all at once; on a small machine (2 cores) they then start too slowly and fail to connect back.
MAX_CASES_PER_FLOW = 6
PROJECT_FILE = "storage: {fsync: false}\n"  # a throw-away store: nothing to keep across a power loss
QUIET_LOGGERS = ("py4j.clientserver", "materializer.batch")
_TABLE_REF = re.compile(r"\b(?:dwd\.|layers\.dwd\.)(t\d+)\b")
_FEED_REF = re.compile(r"\b(?:ods\.|layers\.ods\.)(f\d+)\b")


# -- results ---------------------------------------------------------------------------------------------


@dataclass
class Check:
    """A comparison that found a difference: ``diff.missing`` rows the reference has and the checked side
    lacks, ``diff.unexpected`` rows it has beyond them."""

    what: str
    reference: str
    checked: str
    diff: RowDiff
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        cols = self.diff.columns
        return {
            "what": self.what,
            "reference": self.reference,
            "checked": self.checked,
            "columns": cols,
            "missing": [dict(zip(cols, (_jsonable(v) for v in row))) for row in self.diff.missing],
            "unexpected": [dict(zip(cols, (_jsonable(v) for v in row))) for row in self.diff.unexpected],
            "note": self.note or None,
        }


@dataclass
class CaseResult:
    """What one case did: ``pass``, ``fail`` (a comparison differed) or ``error`` (it could not run)."""

    id: str
    file: str
    action: str
    case: str
    location: str
    description: str = ""
    status: str = "pass"
    seconds: float = 0.0
    rows: int = 0
    runs: int = 1
    strategy: str | None = None
    retractions: int = 0
    failures: list[Check] = field(default_factory=list)
    error: str | None = None

    def fail(self, check: Check) -> None:
        self.failures.append(check)
        if self.status == "pass":
            self.status = "fail"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "file": self.file,
            "action": self.action,
            "case": self.case,
            "location": self.location,
            "status": self.status,
            "seconds": round(self.seconds, 3),
            "rows": self.rows,
            "runs": self.runs,
            "strategy": self.strategy,
            "retractions": self.retractions,
            "failures": [c.to_dict() for c in self.failures],
            "error": self.error,
        }


@dataclass
class ActionTestReport:
    """The results of a ``tidehouse test`` run."""

    cases: list[CaseResult]
    seconds: float = 0.0
    batch_seconds: float = 0.0
    stream_seconds: float | None = None  # None: no stream run (batch only)
    stream_flows: int = 0
    stream_tables: int = 0
    stream_runs: int = 0

    def count(self, status: str) -> int:
        return sum(1 for c in self.cases if c.status == status)

    @property
    def ok(self) -> bool:
        return all(c.status == "pass" for c in self.cases)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "passed": self.count("pass"),
            "failed": self.count("fail"),
            "errors": self.count("error"),
            "seconds": round(self.seconds, 3),
            "batch_seconds": round(self.batch_seconds, 3),
            "stream": None
            if self.stream_seconds is None
            else {
                "seconds": round(self.stream_seconds, 3),
                "flows": self.stream_flows,
                "tables": self.stream_tables,
                "runs": self.stream_runs,
            },
            "cases": [c.to_dict() for c in self.cases],
        }


def _jsonable(value: Any) -> Any:
    return value if value is None or isinstance(value, (bool, int, float, str)) else show(value)


# -- running ---------------------------------------------------------------------------------------------


def run_action_tests(
    cases: Sequence[Any],
    *,
    spark,
    scratch: Callable[[Path], Any],
    stream: bool = True,
    on_progress: Callable[[str], None] | None = None,
) -> ActionTestReport:
    """Run checked cases: batch, then (``stream``) one streaming flow for all. ``scratch(root)`` opens the
    throw-away project of the stream run (a ``runtime.project.Project`` with its home and project directory
    under ``root``). Raises the test files' problems (``TidehouseErrors``); returns the results."""
    began = time.monotonic()
    say = on_progress or (lambda _message: None)
    say(f"batch: {counted(len(cases), 'case')}")
    runs = [_Case(case) for case in cases]
    errors: list[TidehouseError] = []
    for run in runs:
        errors += run.batch(spark, prefixes=stream)
    TidehouseErrors.raise_if_any(errors)
    report = ActionTestReport([r.result for r in runs], batch_seconds=time.monotonic() - began)
    live = [r for r in runs if r.result.status != "error"]
    if stream and live:
        stream_began = time.monotonic()
        groups = [live[i : i + MAX_CASES_PER_FLOW] for i in range(0, len(live), MAX_CASES_PER_FLOW)]
        for number, group in enumerate(groups, 1):
            label = f"stream flow {number}/{len(groups)}" if len(groups) > 1 else "stream"
            done = _Stream(group, spark, scratch, lambda m, label=label: say(f"{label}: {m}"))
            done.run()
            report.stream_flows += 1
            report.stream_tables += done.tables
            report.stream_runs = max(report.stream_runs, done.runs)
        report.stream_seconds = time.monotonic() - stream_began
    report.seconds = time.monotonic() - began
    return report


class _Case:
    """One case in batch: its result after every run (the reference of the stream run) and the checks."""

    def __init__(self, case) -> None:
        self.case = case
        self.result = CaseResult(
            id=case.id,
            file=case.file,
            action=case.action.name,
            case=case.name,
            location=case.location.prefix(),
            description=case.description,
            runs=case.runs,
        )
        self.batches: list[pa.Table] = []  # the batch result after run 1, 2, ..., runs
        self.columns: list[str] = []  # the output's user columns
        self.exceptions = ""  # the differences by design the plan names for its stream table

    def batch(self, spark, *, prefixes: bool) -> list[TidehouseError]:
        """Run the case in batch and compare with the expected rows; the test file's problems are returned."""
        case, began = self.case, time.monotonic()
        try:
            full = self.evaluate(spark, None)
        except TidehouseError as exc:
            return [exc]
        except Exception as exc:  # noqa: BLE001 - Spark failed while running the query: the case errs
            self._error(exc)
            return []
        finally:
            self.result.seconds += time.monotonic() - began
        output = parse_columns(_ddl(full.schema))
        self.columns = [c.name for c in output if not is_system_column(c.name)]
        errors = [
            TidehouseError(
                ErrorCode.PRIMARY_KEY_INVALID,
                f"primary key column '{column}' is not an output column of action {case.action.name} "
                f"({', '.join(self.columns)})",
                location=case.primary_key_location,
            )
            for column in case.primary_key
            if column not in self.columns
        ]
        expected, typing = case.expect.typed(output)
        errors += typing
        if errors:
            return errors
        began = time.monotonic()
        try:
            columns = list(case.expect.columns) or self.columns
            schema = pa.schema([full.schema.field(c) for c in columns])
            try:
                want = pa.Table.from_pylist(expected, schema=schema)
            except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
                return [
                    TidehouseError(
                        ErrorCode.SPEC_BAD_VALUE,
                        f"the expected rows do not fit the output's types: {exc}",
                        location=case.expect.location,
                    )
                ]
            self.result.rows = full.num_rows
            diff = diff_rows(columns, rows_of(want, columns), rows_of(full, columns), case.tolerance)
            if diff:
                self.result.fail(Check("batch result vs expected rows", "expected", "batch", diff))
            if prefixes:
                try:
                    self.batches = [self.evaluate(spark, i) for i in range(1, case.runs)] + [full]
                except Exception as exc:  # noqa: BLE001 - a prefix the query fails on: the case errs
                    self._error(exc)
                    return []
                steps = [rows_of(b, self.columns) for b in self.batches]
                self.result.retractions = sum(
                    len(diff_rows(self.columns, a, b, case.tolerance).missing) for a, b in pairwise(steps)
                )
        finally:
            self.result.seconds += time.monotonic() - began
        return []

    def evaluate(self, spark, runs: int | None) -> pa.Table:
        """The action's result in batch over the rows of the first ``runs`` runs (default all)."""
        from pyspark.errors import PySparkException

        from materializer.checks import is_query
        from materializer.strategies import local_df
        from runtime.spark.types import ddl_to_arrow

        case = self.case
        action = case.action
        session = spark.newSession()
        for inp in case.inputs:
            data = pa.Table.from_pylist(inp.rows(runs), schema=ddl_to_arrow(inp.ddl))
            local_df(session, data, inp.ddl).createOrReplaceTempView(inp.relation)
        args = spark_args(bind_params(action, case.params))
        if not is_query(session, action.sql, args):
            raise TidehouseError(
                ErrorCode.ACTION_SQL_INVALID,
                f"action {action.name}: the SQL is not a query",
                location=Location(action.path or action.name, action.sql_line),
            )
        try:
            df = session.sql(action.sql, args=args)
            df.schema  # noqa: B018 - analyses: an error here is the SQL's, located in the action file
        except PySparkException as exc:
            raise _sql_error(exc, action, case.id, case.location) from exc
        return df.toArrow()

    def _error(self, exc: BaseException) -> None:
        self.result.status = "error"
        message = getattr(exc, "message", None) or str(exc)
        self.result.error = (
            f"{type(exc).__name__}: {message.strip().splitlines()[0] if message.strip() else ''}"
        )


def _ddl(schema: pa.Schema) -> str:
    from runtime.spark.types import arrow_to_ddl

    return arrow_to_ddl(schema)


# -- the stream run --------------------------------------------------------------------------------------


class _Stream:
    """All cases as the DWD tables of one flow in a throw-away project, fed run by run."""

    def __init__(self, cases: list[_Case], spark, scratch: Callable[[Path], Any], say: Callable[[str], None]):
        self.cases = list(cases)
        self.spark = spark
        self.scratch = scratch
        self.say = say
        self.tables = self.runs = 0  # of the flow that ran

    def run(self) -> None:
        while self.cases:
            root = Path(tempfile.mkdtemp(prefix="tidehouse-test-"))
            try:
                with _quiet(*QUIET_LOGGERS):  # a failed query is the case's error, reported in the results
                    failed = self._attempt(root)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            if not failed:
                return
            # a case whose query failed is out; the others run again from scratch (rare)
            self.cases = [c for c in self.cases if c not in failed]
            for case in self.cases:
                case.result.failures = [f for f in case.result.failures if not f.what.startswith("stream")]
                case.result.status = "fail" if case.result.failures else "pass"

    # -- the project and its flow ---------------------------------------------------------------------
    def _write_project(self, project_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        (project_dir / "actions").mkdir(parents=True)
        (project_dir / "flows").mkdir()
        (project_dir / "tidehouse.yaml").write_text(PROJECT_FILE, encoding="utf-8")
        (project_dir / "actions" / f"{FEED}.sql").write_text(FEED_SQL, encoding="utf-8")
        written: set[str] = set()
        for case in self.cases:
            action = case.case.action
            if action.name not in written:
                text = read_text(action.path) if action.path else None
                if text is None:  # pragma: no cover - parsed actions always have a path
                    raise TidehouseError(ErrorCode.INTERNAL, f"action {action.name} has no file")
                (project_dir / "actions" / f"{action.name}.sql").write_text(text, encoding="utf-8")
                written.add(action.name)
        self.feeds: dict[tuple, str] = {}  # (ddl, key, parts) -> feed name
        self.feed_parts: dict[str, tuple] = {}
        self.table_of: dict[str, _Case] = {}
        sources, ods, dwd = {}, {}, {}
        for k, case in enumerate(self.cases):
            inputs = {}
            for inp in case.case.inputs:
                key = (inp.ddl, inp.primary_key, repr(inp.parts))
                if key not in self.feeds:
                    name = f"f{len(self.feeds)}"
                    self.feeds[key] = name
                    self.feed_parts[name] = inp.parts
                    # never read (the feeds flow never runs): the ODS table needs an input of its type
                    sources[name] = {"format": "parquet", "path": f"data/{name}", "schema": inp.ddl}
                    ods[name] = {
                        "action": FEED,
                        "inputs": {"raw": name},
                        "primary_key": list(inp.primary_key),
                    }
                inputs[inp.relation] = f"ods.{self.feeds[key]}"
            table = f"t{k}"
            self.table_of[table] = case
            dwd[table] = {
                "action": case.case.action.name,
                "inputs": inputs,
                "params": case.case.params,
                "primary_key": list(case.case.primary_key),
            }
            if case.case.lookups is not None:
                dwd[table]["lookups"] = case.case.lookups
        feeds = {
            "flow": FEEDS,
            "description": "The inputs of the cases of tidehouse test, written into their tables directly.",
            "sources": sources,
            "layers": {"ods": ods},
        }
        return feeds, {
            "flow": FLOW,
            "description": "The cases of tidehouse test, one DWD table each.",
            "trigger": TRIGGER,
            "tiering": {"interval": "1h"},  # tiered once at the end of each --until-idle run
            "layers": {"dwd": dwd},
        }

    @staticmethod
    def _make_feeds(project, feed_plan) -> None:
        """The inputs' ODS tables, empty (new ones: an attempt without a failed case numbers them anew)."""
        from materializer.tables import table_meta

        for feed in feed_plan.tables:
            if project.store.has_table(feed.name):
                project.store.drop_table(feed.name)
            project.store.create_table(table_meta(feed))

    def _write_parts(self, store, run: int) -> None:
        """The ``run``-th part of every input, into its ODS table, as an ODS query's batch writes it."""
        from runtime.spark.types import ddl_to_arrow

        for (ddl, _key, _parts), name in self.feeds.items():
            parts = self.feed_parts[name]
            if run < len(parts) and parts[run]:
                rows = pa.Table.from_pylist(list(parts[run]), schema=ddl_to_arrow(ddl))
                store.write(f"ods.{name}", rows, writer=FEED_WRITER, seq=run)

    def _attempt(self, root: Path) -> list[_Case]:
        """One stream run of the remaining cases; returns the cases whose query failed (to run without)."""
        project_dir = root / "project"
        flow_path = project_dir / "flows" / f"{FLOW}.yaml"
        feeds_path = project_dir / "flows" / f"{FEEDS}.yaml"
        problems: list[TidehouseError] = []
        project = None
        try:
            while True:
                feeds, flow = self._write_project_once(project_dir)
                feeds_path.write_text(json.dumps(feeds, indent=2, default=str), encoding="utf-8")
                flow_path.write_text(json.dumps(flow, indent=2, default=str), encoding="utf-8")
                if project is None:
                    project = self.scratch(root)
                self.say(f"planning {counted(len(self.cases), 'case')}")
                try:
                    self._make_feeds(project, project.plan(feeds_path, register=True, spark=self.spark))
                    plan = project.plan(flow_path, register=True, spark=self.spark)
                    break
                except TidehouseError as exc:
                    culprits = self._culprits(exc)
                    if not culprits:
                        raise
                    for case in culprits:
                        problems.append(_relocate(exc, case))
                    self.cases = [c for c in self.cases if c not in culprits]
                    shutil.rmtree(project_dir, ignore_errors=True)
                    if not self.cases:
                        break
            TidehouseErrors.raise_if_any(problems)
            for table, case in self.table_of.items():
                t = plan.table(f"dwd.{table}")
                case.result.strategy = t.strategy
                case.exceptions = "; ".join(str(e) for e in t.exceptions)
            total = max(c.case.runs for c in self.cases)
            self.tables, self.runs = len(plan.tables), total
            last_runs = {c.case.runs for c in self.cases}
            for run in range(total):
                self.say(f"run {run + 1}/{total} (--until-idle, {len(plan.tables)} tables)")
                try:  # an input refused by its table (it names ods.fN) is its cases' error, as a run's is
                    self._write_parts(project.store, run)
                    project.trigger(  # a case's lake is compared after its last run: tier then only
                        FLOW, until_idle=True, spark=self.spark, plan=plan, tiering=run + 1 in last_runs
                    )
                except TidehouseError as exc:
                    culprits = self._culprits(exc)
                    for case in culprits or self.cases:
                        told = _relocate(exc, case)
                        case.result.status = "error"
                        case.result.error = (
                            f"stream run {run + 1}/{total}: {told.message} [{told.code.value}]"
                        )
                    return culprits if culprits and len(culprits) < len(self.cases) else []
                self._compare(project, run, total)
            return []
        finally:
            if project is not None:
                project.close()

    def _write_project_once(self, project_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        if project_dir.exists():
            shutil.rmtree(project_dir)
        return self._write_project(project_dir)

    def _culprits(self, exc: TidehouseError) -> list[_Case]:
        """The cases an error of the scratch flow is about (by the tables it names)."""
        errors = exc.errors if isinstance(exc, TidehouseErrors) else [exc]
        text = " ".join(
            f"{e.message} {e.location.path if e.location else ''} {e.params.get('table', '')}" for e in errors
        )
        found = {m for m in _TABLE_REF.findall(text)}
        feeds = set(_FEED_REF.findall(text))
        for table, case in self.table_of.items():
            refs = {inp.split(".", 1)[1] for inp in self._inputs_of(case)}
            if refs & feeds:
                found.add(table)
        return [self.table_of[t] for t in sorted(found) if t in self.table_of]

    def _inputs_of(self, case: _Case) -> list[str]:
        return [
            f"ods.{self.feeds[(inp.ddl, inp.primary_key, repr(inp.parts))]}"
            for inp in case.case.inputs
            if (inp.ddl, inp.primary_key, repr(inp.parts)) in self.feeds
        ]

    def _compare(self, project, run: int, total: int) -> None:
        for table, case in self.table_of.items():
            runs = case.case.runs
            if run >= runs:
                continue  # its last part came in an earlier run: nothing changed
            began = time.monotonic()
            name = f"dwd.{table}"
            reference = rows_of(case.batches[run], case.columns)
            tol = case.case.tolerance
            note = f"the plan names a difference by design: {case.exceptions}" if case.exceptions else ""
            hot = rows_of(project.store.scan(name), case.columns)
            diff = diff_rows(case.columns, reference, hot, tol)
            after = f"after run {run + 1}/{runs}"
            if diff:
                case.result.fail(Check(f"stream: hot table {after} vs batch", "batch", "hot", diff, note))
            if run == runs - 1:
                lake = rows_of(project.lake.load(name).scan().to_arrow(), case.columns)
                diff = diff_rows(case.columns, reference, lake, tol)
                if diff:
                    case.result.fail(
                        Check(f"stream: lake table {after} vs batch", "batch", "lake", diff, note)
                    )
            case.result.seconds += time.monotonic() - began


@contextlib.contextmanager
def _quiet(*names: str) -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _relocate(exc: TidehouseError, case: _Case) -> TidehouseError:
    """An error of the scratch flow told about the case: its tables renamed, located in the test file (an
    error located in the action file keeps that place)."""
    errors = exc.errors if isinstance(exc, TidehouseErrors) else [exc]
    first = errors[0]
    message = re.sub(r"\b(?:the query of )?table dwd\.t\d+\b", "the table under test", first.message)
    message = _TABLE_REF.sub("the table under test", message)
    message = re.sub(r"\(used by [^)]*\)", f"(case {case.case.name})", message)
    location = first.location
    if location is None or not location.file or location.file.endswith((f"{FLOW}.yaml", f"{FEEDS}.yaml")):
        location = (
            case.case.primary_key_location
            if first.code is ErrorCode.PRIMARY_KEY_INVALID
            else case.case.location
        )
    return TidehouseError(first.code, message, location=location, hint=first.hint)
