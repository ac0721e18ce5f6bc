"""Engine checks of specs before they are registered: Spark's parser and analyzer are the authority.

The registry checks what it can without a JVM (:mod:`registry.validation`); what only Spark knows is checked
here, through the public ``spark.sql(...)`` API (so it works over Spark Connect as well as in-process):

* **an action's SQL parses** and is one query. ``EXPLAIN`` parses a statement without running it and
  reports analysis problems (unknown relations: an action's inputs are only bound by a flow) as text, so
  an exception from ``spark.sql("EXPLAIN\\n" + sql)`` is a problem of the SQL text itself: a syntax error,
  or a parameter marker the header does not declare. A second parse with the SQL as a subquery tells a
  query from a command (``DROP TABLE ...``), which would run when a flow is analysed.
* **a flow analyses**: the same dry run ``flow plan`` does (:func:`materializer.analyze.build_plan`), so a
  primary key, bucket key or aggregated column that the SQL does not output, an SQL that does not analyse
  against its upstream schemas, or a shape no strategy supports is refused with its location. A table read
  from another flow that has not run yet is analysed against that flow's plan; flows that read each other's
  tables before any of them ran are refused (none could start).

:class:`EngineChecks` is what ``tidehouse action register``, ``flow register`` and ``flow validate`` hand to
the registry (``checks=``); ``--quick`` skips it. The registry runs it only after its own checks passed, so
malformed specs never start Spark.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from runtime.core.errors import ErrorCode, Location, TidehouseError, TidehouseErrors

_EXPLAIN = "EXPLAIN\n"  # ends with a newline: positions in the SQL keep their column, one line down
_AS_QUERY = ("EXPLAIN\nSELECT * FROM (\n", "\n) AS __tidehouse_query")
_POSITION = re.compile(r"\(line (\d+), pos (\d+)\)")
# what only a query starts with (WITH and FROM can start an INSERT), after blanks and comments (a nested
# comment is left to Spark)
_QUERY_START = re.compile(
    r"(?:\s+|--[^\n]*(?:\n|$)|/\*(?:(?!/\*)[\s\S])*?\*/)*(?:(?i:select|values|table)\b|\()"
)


def action_sql_error(spark, action) -> TidehouseError | None:
    """``None`` when Spark parses the SQL of ``action`` (an ``ActionSpec``) as one query; else the error,
    located in the action file (line and column of Spark's error when it gives one)."""
    from pyspark.errors import AnalysisException

    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)  # we report the error ourselves
    args = parse_args(action)
    try:
        spark.sql(_EXPLAIN + action.sql, args=args)
    except (
        AnalysisException
    ) as exc:  # ParseException is one; EXPLAIN reports the other analysis errors as text
        line, col = _position(exc, action.sql, len(_EXPLAIN), 1)
        if (
            _condition(exc) == "UNBOUND_SQL_PARAMETER"
        ):  # Spark names a positional marker `_34`: say what it is
            return _located(
                action,
                "the SQL uses a parameter marker that the header does not declare",
                line,
                col,
                hint="parameters are named markers (:name) declared under params:; '?' is not one",
            )
        return _located(action, f"the SQL does not parse: {_message(exc)}", line, col)
    # Spark parsed it as one statement: one that starts as only a query does is one, without asking again
    # (~20 ms a question: a project's first trigger checks every action)
    if not _QUERY_START.match(action.sql) and not is_query(spark, action.sql, args):
        return _located(
            action,
            "the SQL is not a query: Spark parses it as a command, which would run when a "
            "flow using it is analysed",
            1,
            1,
            hint="an action is one SELECT (or WITH ... SELECT, VALUES, FROM ... SELECT) statement",
        )
    return None


def is_query(spark, sql: str, args: Mapping[str, Any]) -> bool:
    """Whether ``sql`` parses as one query (not a command): ``spark.sql(sql)`` runs a command at once, so
    nothing may pass SQL to it before this is known. Nothing is run or analysed here."""
    from pyspark.errors import AnalysisException

    try:
        spark.sql(_AS_QUERY[0] + sql + _AS_QUERY[1], args=args)
    except AnalysisException:
        return False
    return True


def parse_args(action) -> dict[str, Any]:
    """A value for every declared parameter, so the SQL parses as a flow would run it: Spark substitutes
    markers before parsing, and some positions need a real value (``AS IDENTIFIER(:name)``, ``INTERVAL :n
    SECONDS``). The default where there is one, else a placeholder of the declared type (a string parameter
    gets its own name: a valid identifier)."""
    from materializer.analyze import spark_args
    from materializer.plan import Param

    params = []
    for name, spec in sorted(action.params.items()):
        value = spec.default if spec.default is not None else _placeholder(name, spec.type)
        params.append(Param(name, spec.type, value))
    return spark_args(tuple(params))


def _placeholder(name: str, type_: str) -> Any:
    kind = type_.strip().lower()
    for prefix, value in (
        ("array", []),
        ("map", {}),
        ("struct", None),
        ("boolean", True),
        ("date", "1970-01-01"),
        ("timestamp", "1970-01-01T00:00:00"),
        ("string", name),
        ("varchar", name),
        ("char", name),
    ):
        if kind.startswith(prefix):
            return value
    return 1  # the numeric types: int, bigint, smallint, tinyint, double, float, decimal(p,s)


def _condition(exc: Exception) -> str | None:
    get = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    return get() if get else None


def _message(exc: Exception) -> str:
    """Spark's first message line without the position and SQLSTATE (we give both as a location)."""
    text = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    text = re.sub(r"\s*SQLSTATE: \w+;?.*$", "", text)
    return _POSITION.sub("", text).strip()


def _position(
    exc: Exception, sql: str, prefix_chars: int, prefix_lines: int
) -> tuple[int | None, int | None]:
    """Line and column (1-based, in ``sql``) of a Spark error raised for ``prefix + sql``."""
    contexts = exc.getQueryContext() if hasattr(exc, "getQueryContext") else []
    for context in contexts or []:
        start = context.startIndex() - prefix_chars
        if 0 <= start <= len(sql):
            return sql.count("\n", 0, start) + 1, start - (sql.rfind("\n", 0, start) + 1) + 1
    match = _POSITION.search(str(exc))  # parse errors carry "(line N, pos P)" only in their message
    if match and int(match.group(1)) > prefix_lines:
        return int(match.group(1)) - prefix_lines, int(match.group(2)) + 1
    return None, None


def _located(
    action, message: str, line: int | None, col: int | None, hint: str | None = None
) -> TidehouseError:
    first = int(getattr(action, "sql_line", 1) or 1)
    return TidehouseError(
        ErrorCode.ACTION_SQL_INVALID,
        f"action {action.name}: {message}",
        location=Location(action.path or f"<action {action.name}>", first + (line or 1) - 1, col),
        hint=hint,
    )


class EngineChecks:
    """The Spark checks of actions and flows (see the module docstring) for one project.

    Spark starts on the first check that needs it (``project.spark()``, or the ``spark`` given).
    """

    def __init__(self, project, spark=None, *, alongside: Mapping[str, Any] = {}, local_actions=()) -> None:
        self.project = project
        self._spark = spark
        self._session = None
        # flows validated together (``flow validate A B``): a table one of them produces is analysed against
        # its plan, with the unregistered ``local_actions`` it may use
        self.alongside = dict(alongside)
        self.local_actions = tuple(local_actions)

    @property
    def spark(self):
        if self._spark is None:
            self._spark = self.project.spark()
        return self._spark

    @property
    def session(self):
        """A session of its own for the parse checks (temp views of other work never meet the checked SQL)."""
        if self._session is None:
            self._session = self.spark.newSession()
        return self._session

    # -- actions --------------------------------------------------------------------------------------
    def check_actions(self, specs: Iterable[Any]) -> list[TidehouseError]:
        """Every action whose SQL Spark does not parse as one query (``registry.specs.ActionSpec``)."""
        errors = []
        for spec in specs:
            error = action_sql_error(self.session, spec)
            if error is not None:
                errors.append(error)
        return errors

    # -- flows ----------------------------------------------------------------------------------------
    def check_flow(self, spec, resolved: Mapping[str, Any]) -> list[TidehouseError]:
        """The errors of analysing ``spec`` (a ``FlowSpec``) with the action each table ``resolved`` to
        (``{"dwd.clicks": Resolution}``, what the registry's own checks found): the actions' SQL first, then
        the dry run of every table that ``flow plan`` does."""
        distinct = {(r.name, r.version, r.spec.path): r.spec for r in resolved.values()}
        errors = self.check_actions(distinct.values())
        if errors:
            return errors
        try:
            self._plan(spec, resolved, root=spec, path=(spec.flow,))
        except TidehouseErrors as exc:
            return list(exc.errors)
        except TidehouseError as exc:
            return [exc]
        return []

    def _plan(self, spec, resolved: Mapping[str, Any], root, path: Sequence[str]):
        from materializer.analyze import ResolvedFlow, build_plan

        return build_plan(
            self.project,
            ResolvedFlow(spec, None, dict(resolved)),
            self.spark,
            upstream=self._upstream(spec, root, path),
        )

    def _upstream(self, spec, root, path: Sequence[str]) -> dict[str, Any]:
        """Plans of the tables ``spec`` reads from other flows that have not run yet (the hot store has no
        schema for them): each is the plan of the registered flow producing it, analysed the same way.
        ``root``: the flow checked first; ``path``: how the check got here from it, the flows' names and
        between them the table each reads from the next, ending with ``spec``'s (``("shop", "dwd.shared",
        "other")``)."""
        own = {q for q, _ in spec.tables()}
        wanted = sorted({ref for _, t in spec.tables() for ref in t.inputs.values() if "." in ref} - own)
        if not wanted:
            return {}
        store, registry = self.project.store, self.project.registry
        root_tables = {q for q, _ in root.tables()}
        out: dict[str, Any] = {}
        for table in wanted:
            if table in out or store.has_table(table):
                continue
            if table in root_tables:  # read back from the flow checked first
                raise _circular_reads(root, (*path, table, root.flow))
            companion = next((f for f in self.alongside.values() if table in dict(f.tables())), None)
            if companion is not None:  # a file validated with it: its actions as they are now
                producer, pins = companion, None
                kwargs = {
                    "local_actions": self.local_actions,
                    "alongside": {**self.alongside, root.flow: root},
                }
            else:
                registered = registry.producer_of(table)
                if registered is None:
                    continue  # build_plan reports the table it cannot read
                producer, pins, kwargs = registered.spec, registered.pins, {}
            if producer.flow in path[::2]:
                raise _circular_reads(root, (*path, table, producer.flow))
            check = registry.check_flow(producer, pins=pins, **kwargs)
            TidehouseErrors.raise_if_any(check.errors)
            plan = self._plan(producer, check.resolved, root, path=(*path, table, producer.flow))
            out.update({t.name: t for t in plan.tables})
        return out


def _circular_reads(root, path: Sequence[str]) -> TidehouseError:
    """Flows that read each other's tables, none of which exists yet: a flow starts only once the tables it
    reads from other flows exist, so none of them can run first. ``path`` alternates flows and the table
    each reads from the next, and ends with a flow met before; located at the first read, in ``root``'s file
    (the flow checked)."""
    from registry.graph import node_location

    start = path.index(path[-1])
    loop = path[start:]
    reads = ", ".join(f"{loop[i]} reads {loop[i + 1]} from {loop[i + 2]}" for i in range(0, len(loop) - 2, 2))
    first = path[1]
    field = next(
        (
            f"layers.{q}.inputs.{name}"
            for q, t in root.tables()
            for name, ref in t.inputs.items()
            if ref == first
        ),
        None,
    )
    return TidehouseError(
        ErrorCode.FLOW_CYCLE,
        f"flows read each other's tables and none of them has run: {reads}",
        location=node_location(getattr(root, "location_of", None), field, prefixed=True) if field else None,
        hint="a flow starts once the tables it reads from other flows exist: move one of these tables into"
        " the flow that reads it",
    )
