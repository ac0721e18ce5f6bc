"""Spec -> plan: resolve a flow's actions, dry-run every table's SQL with Spark, decide strategies.

The dry run starts no stream: each table's inputs are bound as empty DataFrames with the upstream schemas
(temp views in a private session), the action SQL is analysed with its named parameters
(``spark.sql(sql, args=...)``), and the analysed plan yields the output schema and the facts the strategy
decision needs. It runs layer by layer, so a table's output schema is the next table's input schema.
Spark's AnalysisException is wrapped in ``TidehouseError(ACTION_SQL_INVALID)`` pointing at the action file
(the line of the SQL body where Spark located the error) and naming the flow table that uses it.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from materializer import shape as shape_mod
from materializer.incremental import literals
from materializer.incremental.logfacts import log_aggregate_refusal
from materializer.plan import (
    QUARANTINE_DDL,
    Expectation,
    FlowPlan,
    Input,
    Param,
    SourcePlan,
    TablePlan,
    data_path_of,
    fingerprint,
    quarantine_name,
    source_path,
    table_fingerprint,
)
from materializer.sources import unreadable
from registry.graph import FlowGraph, node_location, source_node
from registry.specs.flow import FILE_FORMATS
from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.literals import DEFAULT_MERGE_ENGINE, LOG, PRIMARY_KEY, is_system_column
from runtime.core.sparktypes import parse_columns, parse_type
from runtime.spark.session import new_session, stop_session

log = logging.getLogger(__name__)
PASSTHROUGH_REASON = (
    "; the SQL returns its input unchanged, so each micro-batch's rows are written as they are"
)


@dataclass(frozen=True)
class ResolvedFlow:
    """A flow spec with the action version each table uses (``{"dwd.clicks": ActionVersion}``)."""

    spec: Any  # registry.specs.FlowSpec
    version: int | None
    actions: Mapping[str, Any]


# -- parameters -----------------------------------------------------------------------------------------
def bind_params(action_spec, given: Mapping[str, Any]) -> tuple[Param, ...]:
    out = []
    for name in sorted(action_spec.params):
        pspec = action_spec.params[name]
        if name in given:
            value = given[name]
        elif getattr(pspec, "default", None) is not None:
            value = pspec.default
        else:
            raise TidehouseError(
                ErrorCode.PARAM_MISSING, f"action {action_spec.name} needs parameter '{name}'"
            )
        out.append(Param(name, pspec.type, _jsonable(value)))
    return tuple(out)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in sorted(value.items())}
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def spark_args(params: tuple[Param, ...]) -> dict[str, Any]:
    """Named-parameter arguments for ``spark.sql(sql, args=...)``.

    Values are never spliced into the SQL text: each becomes a literal of its declared type (Python values
    converted first: ``double`` -> float, ``date`` -> ``datetime.date``...), arrays and maps the ``array()`` /
    ``map()`` constructors Spark accepts as arguments.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    def convert(dtype, value: Any) -> Any:
        import datetime as dt

        if value is None:
            return None
        if isinstance(dtype, (T.DoubleType, T.FloatType)):
            return float(value)
        if isinstance(dtype, (T.IntegerType, T.LongType, T.ShortType, T.ByteType)):
            return int(value)
        if isinstance(dtype, T.DecimalType):
            import decimal

            return decimal.Decimal(str(value))
        if isinstance(dtype, T.DateType) and isinstance(value, str):
            return dt.date.fromisoformat(value)
        if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)) and isinstance(value, str):
            stamp = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            if isinstance(dtype, T.TimestampType) and stamp.tzinfo is None:
                stamp = stamp.replace(tzinfo=dt.timezone.utc)
            return stamp
        if isinstance(dtype, T.StringType):
            return str(value)
        return value

    def literal(dtype, value: Any):
        if isinstance(dtype, T.ArrayType):
            return F.array(*[literal(dtype.elementType, v) for v in value])
        if isinstance(dtype, T.MapType):
            parts = []
            for k, v in value.items():
                parts += [literal(dtype.keyType, k), literal(dtype.valueType, v)]
            return F.create_map(*parts)
        return F.lit(convert(dtype, value))

    from runtime.spark.types import to_spark_type

    out = {}
    for p in params:
        dtype = to_spark_type(parse_type(p.type))
        out[p.name] = (
            literal(dtype, p.value)
            if isinstance(dtype, (T.ArrayType, T.MapType))
            else convert(dtype, p.value)
        )
    return out


# -- schema helpers ---------------------------------------------------------------------------------
def nullable_ddl(struct) -> str:
    """Spark DDL of a StructType with every top-level column nullable (deletes carry only keys)."""
    from pyspark.sql import types as T

    from runtime.spark.types import arrow_to_ddl, spark_to_arrow

    relaxed = T.StructType([T.StructField(f.name, f.dataType, True) for f in struct.fields])
    return arrow_to_ddl(spark_to_arrow(relaxed))


def struct_of(ddl: str, location: Location | None = None):
    from runtime.spark.types import parse_ddl

    return parse_ddl(ddl, location)


# -- plan inspection --------------------------------------------------------------------------------
def explain_text(df) -> str:
    """``EXPLAIN EXTENDED`` of a DataFrame as text, on a classic session and over Spark Connect alike."""
    from runtime.spark.session import is_connect

    session = df.sparkSession
    if is_connect(session):
        return df._explain_string(mode="extended")
    return session._jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), "extended")


def sql_shape(df) -> shape_mod.SqlShape:
    """Facts about an analysed query, read from its analysed plan's text (:mod:`materializer.plantext`)."""
    from materializer.plantext import shape_of

    return shape_of(explain_text(df))


def streaming_refusal(session, action, params, inputs) -> str:
    """Why Spark refuses the SQL as a streaming aggregation in output mode ``update`` (what the ``aggregate``
    strategy starts), or "" when it accepts it.

    The inputs are bound as streams with their schemas (a ``rate`` stream projected to typed nulls: nothing
    is read, only analysed) and the analysed plan goes through Spark's own check of streaming plans
    (``UnsupportedOperationChecker``, which ``writeStream.start()`` runs), so what Spark would refuse when
    the query starts is known when the flow is planned.
    """
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F

    from runtime.spark.session import is_connect

    for inp in inputs:
        typed = [F.lit(None).cast(f.dataType).alias(f.name) for f in struct_of(inp.ddl).fields]
        session.readStream.format("rate").load().select(*typed).createOrReplaceTempView(inp.name)
    try:
        df = session.sql(action.sql, args=spark_args(params))
        if is_connect(session):
            return _refusal_on_start(df)
        plan = df._jdf.queryExecution().analyzed()
        jvm = session._jvm
        jvm.org.apache.spark.sql.catalyst.analysis.UnsupportedOperationChecker.checkForStreaming(
            plan, jvm.org.apache.spark.sql.streaming.OutputMode.Update()
        )
        return ""
    except Py4JJavaError as exc:
        return _first_line(str(exc.java_exception.getMessage()))
    except PySparkException as exc:
        return _first_line(str(exc))
    finally:
        for inp in inputs:
            session.catalog.dropTempView(inp.name)


def _refusal_on_start(df) -> str:
    """Over Spark Connect (no JVM here): start the query into the ``noop`` sink in update mode — Spark runs
    the same check when it starts — and stop it at once."""
    import tempfile

    from pyspark.errors import PySparkException

    with tempfile.TemporaryDirectory(prefix="tidehouse-check-") as folder:
        try:
            query = df.writeStream.format("noop").outputMode("update").option("checkpointLocation", folder)
            query.start().stop()
        except PySparkException as exc:
            return _first_line(str(exc))
    return ""


def _first_line(message: str) -> str:
    return re.sub(r"\s*SQLSTATE: \w+;?.*$", "", message.strip().split("\n")[0])


def _sql_error(exc: Exception, action_spec, table: str, table_location: Location | None) -> TidehouseError:
    line = getattr(action_spec, "sql_line", 1) or 1
    col = None
    sql = action_spec.sql
    try:
        contexts = exc.getQueryContext() if hasattr(exc, "getQueryContext") else []
        if contexts:
            start = contexts[0].startIndex()
            if start is not None and start >= 0:
                line += sql.count("\n", 0, start)
                col = start - (sql.rfind("\n", 0, start) + 1) + 1
    except Exception:  # noqa: BLE001, S110 - the position is a nicety: never hide the error it locates
        pass
    message = str(getattr(exc, "getMessage", lambda: str(exc))()).split("\n")[0]
    message = re.sub(r"\s*SQLSTATE: \w+;?.*$", "", message)
    used_by = table_location.prefix() if table_location else table
    return TidehouseError(
        ErrorCode.ACTION_SQL_INVALID,
        f"action {action_spec.name}: {message} (used by {used_by})",
        location=Location(action_spec.path or f"<action {action_spec.name}>", line, col),
        params={"table": table, "table_location": used_by},
    )


# -- building the plan ------------------------------------------------------------------------------
def build_plan(
    project,
    resolved: ResolvedFlow,
    spark=None,
    *,
    upstream: Mapping[str, TablePlan] | None = None,
) -> FlowPlan:
    """Analyse every table of a resolved flow and return its :class:`FlowPlan`.

    ``upstream``: plans of tables of other flows that the hot store does not hold yet (a flow checked before
    the flow it reads has run); a table the hot store has is read with its stored schema.
    """
    spec = resolved.spec
    location_of = getattr(spec, "location_of", None)
    table_specs = dict(spec.tables())
    graph = FlowGraph.build(
        spec.sources.keys(), {t: dict(s.inputs) for t, s in table_specs.items()}, location_of=location_of
    )
    spark = spark or project.spark()
    session = new_session(spark)
    try:
        return _build_plan(project, resolved, graph, spark, session, upstream)
    finally:
        # a Spark Connect session left to the garbage collector closes its channel in ``__del__``, which at
        # interpreter shutdown can wait forever: the CLI would hang after its work is done
        stop_session(session)


def _build_plan(project, resolved: ResolvedFlow, graph: FlowGraph, spark, session, upstream) -> FlowPlan:
    spec = resolved.spec
    location_of = getattr(spec, "location_of", None)
    table_specs = dict(spec.tables())
    _quiet_spark_logs()

    sources = {
        name: _source_plan(project, name, src, session, location_of)
        for name, src in sorted(spec.sources.items())
    }
    # node -> (kind, ddl, fingerprint, primary key)
    known: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
        s.ref: ("source", s.ddl or "", s.fingerprint, ()) for s in sources.values()
    }
    for node in graph.order():
        if graph.kind(node) == "external":
            known[node] = _external(project, node, (upstream or {}).get(node))
    ckpt_root = project.config.checkpoint_root
    flow_trigger = float(getattr(spec, "trigger", 1.0) or 0.0)
    data_path = planned_data_path(project, spark)
    default_tiering = float(project.config.get("tiering.interval"))

    tables: list[TablePlan] = []
    for name in graph.tables():
        tspec = table_specs[name]
        version = resolved.actions[name]
        action = version.spec
        tloc = node_location(location_of, name)
        params = bind_params(action, dict(tspec.params or {}))
        inputs = []
        for relation, ref in sorted(tspec.inputs.items()):
            node = source_node(ref) if ref in spec.sources and "." not in ref else ref
            kind, ddl, _, pk = known[node]
            inputs.append(Input(relation, node, kind, ddl, pk))
        primary_key = tuple(tspec.primary_key or ())
        expect = tuple(Expectation(e.name, e.condition, e.on_violation) for e in (tspec.expect or ()))
        with _analysed(session, action, params, inputs, name, tloc) as df:
            out_ddl = nullable_ddl(df.schema)
            _check_output(name, df, action, primary_key, tspec, tloc, location_of)
            shape = sql_shape(df)
            _check_expectations(name, df, spec, tspec, tloc)
        if shape.row_keys is not None and [i.kind for i in inputs] == ["primary_key"]:
            why = shape.row_keys.refusal(primary_key, inputs[0].primary_key)
            shape = replace(shape, row_key_refusal=why)
        if shape.group_aggregate is not None and len(inputs) == 1:
            facts, why = literals.typed(
                shape.group_aggregate,
                struct_of(inputs[0].ddl),
                struct_of(out_ddl),
                action.sql,
                [p.value for p in params],
            )
            shape = replace(shape, group_aggregate=facts, having_refusal=why)
        if _aggregate_candidate(shape, inputs, primary_key):
            shape = replace(shape, streaming_refusal=streaming_refusal(session, action, params, inputs))
            if shape.group_aggregate is not None and not log_aggregate_refusal(
                shape.group_aggregate, struct_of(inputs[0].ddl), primary_key, bool(expect)
            ):
                shape = replace(shape, log_aggregate=shape.group_aggregate)
        decision = shape_mod.decide(
            name,
            shape,
            [(i.name, i.kind) for i in inputs],
            primary_key=primary_key,
            merge_engine=tspec.merge_engine or DEFAULT_MERGE_ENGINE,
            location=tloc,
            data_path=data_path,
            lookups_at=tspec.lookups,
            lookups_location=node_location(location_of, f"{name}.lookups"),
        )
        passthrough = shape.identity and decision.strategy == "append" and len(inputs) == 1
        has_source = any(i.kind == "source" and sources[i.ref.split(":", 1)[1]].quarantines for i in inputs)
        quarantine = (
            quarantine_name(name)
            if has_source or any(e.on_violation == "quarantine" for e in expect)
            else None
        )
        kind = PRIMARY_KEY if primary_key else LOG
        plan = TablePlan(
            name=name,
            layer=name.split(".", 1)[0],
            kind=kind,
            strategy=decision.strategy,
            reason=decision.reason + (PASSTHROUGH_REASON if passthrough else ""),
            action=f"{action.name}@{version.version}",
            action_path=_rel(project, action.path),
            sql_line=int(getattr(action, "sql_line", 1) or 1),
            sql=action.sql,
            params=params,
            inputs=tuple(inputs),
            ddl=out_ddl,
            primary_key=primary_key,
            passthrough=passthrough,
            merge_engine=tspec.merge_engine or DEFAULT_MERGE_ENGINE,
            aggregations=tuple(sorted((tspec.aggregations or {}).items())),
            buckets=int(tspec.buckets or 1),
            bucket_key=tuple(tspec.bucket_key or ()),
            trigger=float(tspec.trigger if tspec.trigger is not None else flow_trigger),
            tiering_interval=float(spec.tiering_of(name, default_tiering)),
            expect=expect,
            quarantine=quarantine,
            fingerprint="",
            checkpoint="",
            exceptions=shape_mod.batch_exceptions(
                decision.strategy, shape, [(i.ref, i.kind) for i in inputs]
            ),
            freshness=spec.freshness_of(name),
            tags=tuple(tspec.tags),
            incremental={
                "topn": shape.topn,
                "agg_changelog": shape.group_aggregate,
                "agg_log": shape.log_aggregate,
                "join_changelog": shape.join,
                "join_log": shape.join,
            }.get(decision.strategy),
        )
        fp = table_fingerprint(plan, {i.ref: known[i.ref][2] for i in inputs})
        plan = replace(plan, fingerprint=fp, checkpoint=str(Path(ckpt_root) / spec.flow / name / fp[:12]))
        known[name] = (kind, out_ddl, fp, primary_key)
        tables.append(plan)
    generations = tuple(tuple(g) for g in graph.table_generations())
    return FlowPlan(
        spec.flow, resolved.version, tuple(sources.values()), tuple(tables), generations, tuple(graph.edges())
    )


def planned_data_path(project, spark) -> str:
    """The data path the flow's queries will run on with this session (the runner's choice)."""
    from runtime.spark.session import is_connect

    connect = is_connect(spark)
    master = "" if connect else spark.conf.get("spark.master", "local[*]")
    return data_path_of(project.config.get("materializer.data_path"), master, connect)


def _aggregate_candidate(shape: shape_mod.SqlShape, inputs, primary_key) -> bool:
    """A primary-key table whose SQL aggregates one log table: the ``aggregate`` strategy may keep it, if
    Spark accepts the SQL as a streaming aggregation (asked only then: it costs one more analysis)."""
    return bool(primary_key) and "Aggregate" in shape.nodes and [i.kind for i in inputs] == ["log"]


def _rel(project, path: str | None) -> str | None:
    if not path:
        return None
    try:
        return str(Path(path).resolve().relative_to(project.config.project_dir))
    except ValueError:
        return str(path)


def _source_plan(project, name: str, src, session, location_of=None) -> SourcePlan:
    path = source_path(project.config.project_dir, getattr(src, "path", None))
    options = tuple(sorted((str(k), str(v)) for k, v in (getattr(src, "options", None) or {}).items()))
    ddl = getattr(src, "schema_", None)
    required: tuple[str, ...] = ()
    if ddl is not None:
        declared = struct_of(ddl)
        required = tuple(f.name for f in declared.fields if not f.nullable)
        # file sources read every column as nullable; `required` is checked per row
        ddl = nullable_ddl(declared)
    if ddl is None or src.format not in FILE_FORMATS:  # Spark resolves the format (a file format is Spark's)
        try:
            reader = session.readStream.format(src.format).options(**dict(options))
            reader = reader.schema(ddl) if ddl is not None else reader
            schema = (reader.load(path) if path else reader.load()).schema
        except Exception as exc:
            raise unreadable(
                name, src.format, exc, declared=ddl is not None, location_of=location_of
            ) from exc
        ddl = ddl or nullable_ddl(schema)
    payload = {"format": src.format, "path": getattr(src, "path", None), "ddl": ddl, "options": options}
    if required:
        payload["required"] = list(required)
    return SourcePlan(name, src.format, path, ddl, options, fingerprint(payload), required)


def _external(project, table: str, planned: TablePlan | None = None) -> tuple[str, str, str, tuple[str, ...]]:
    from runtime.spark.types import arrow_to_ddl

    store = project.store
    if not store.has_table(table):
        if planned is not None:
            fp = fingerprint({"external": table, "ddl": planned.ddl})
            return planned.kind, planned.ddl, fp, planned.primary_key
        raise TidehouseError(
            ErrorCode.INPUT_UNKNOWN_TABLE,
            f"table {table} is produced by another flow that has not run yet",
            hint="trigger the flow that produces it first",
        )
    meta = store.get_table(table)
    kind = PRIMARY_KEY if meta.is_primary_key else LOG
    ddl = arrow_to_ddl(meta.schema)
    return kind, ddl, fingerprint({"external": table, "ddl": ddl}), tuple(meta.primary_key)


@contextlib.contextmanager
def _analysed(session, action, params, inputs, table: str, tloc) -> Iterator[Any]:
    """The action's SQL analysed over empty inputs of the input schemas, bound as temporary views for the
    ``with`` block: over Spark Connect a DataFrame is a plan the server analyses again on every call (its
    schema, its explain text), so its views must outlive the first analysis."""
    from pyspark.errors import PySparkException

    from materializer.checks import action_sql_error, is_query

    args = spark_args(params)
    if not is_query(
        session, action.sql, args
    ):  # spark.sql() would *run* a command (DROP TABLE ...) right here
        raise action_sql_error(session, action) or TidehouseError(
            ErrorCode.ACTION_SQL_INVALID,
            f"action {action.name}: the SQL is not a query (used by {table})",
            location=Location(action.path or f"<action {action.name}>", getattr(action, "sql_line", None)),
        )
    for inp in inputs:
        session.createDataFrame([], struct_of(inp.ddl)).createOrReplaceTempView(inp.name)
    try:
        try:
            df = session.sql(action.sql, args=args)
            df.schema  # noqa: B018 - forces analysis
        except PySparkException as exc:
            raise _sql_error(exc, action, table, tloc) from exc
        yield df
    finally:
        for inp in inputs:
            session.catalog.dropTempView(inp.name)


def _check_output(table: str, df, action, primary_key, tspec, tloc, location_of=None) -> None:
    columns = df.columns
    bad = [c for c in columns if is_system_column(c)]
    if bad:
        raise TidehouseError(
            ErrorCode.ACTION_SQL_INVALID,
            f"table {table}: output column '{bad[0]}' starts with "
            "two underscores, which are reserved for system columns",
            location=tloc,
            hint="rename it with AS, or select only the user columns",
        )
    if len(set(columns)) != len(columns):
        dup = sorted({c for c in columns if columns.count(c) > 1})[0]
        raise TidehouseError(
            ErrorCode.ACTION_SQL_INVALID,
            f"table {table}: output column '{dup}' appears twice",
            location=tloc,
            hint="give each output column its own name with AS",
        )
    for label, cols in (
        ("primary_key", primary_key),
        ("bucket_key", tuple(tspec.bucket_key or ())),
        ("aggregations", tuple((tspec.aggregations or {}).keys())),
    ):
        missing = [c for c in cols if c not in columns]
        if missing:
            field = (
                f"aggregations.{missing[0]}"
                if label == "aggregations"
                else f"{label}[{cols.index(missing[0])}]"
            )
            raise TidehouseError(
                ErrorCode.PRIMARY_KEY_INVALID,
                f"table {table}: {label} column '{missing[0]}' is "
                f"not an output column of action {action.name} ({', '.join(columns)})",
                location=node_location(location_of, f"{table}.{field}") or tloc,
            )
    output = getattr(action, "output", None)
    if output:
        expected = [c.name for c in parse_columns(output, untyped=True)]  # a contract may name columns only
        if sorted(expected) != sorted(columns):
            raise TidehouseError(
                ErrorCode.ACTION_SQL_INVALID,
                f"action {action.name}: the SQL's output columns ({', '.join(columns)}) do not "
                f"match its output contract ({', '.join(expected)})",
                location=Location(action.path or action.name, getattr(action, "sql_line", None)),
                params={"table": table},
            )


def _check_expectations(table: str, df, spec, tspec, tloc) -> None:
    """Each expectation's condition analyses over the output; an error is at the condition: in the flow's
    ``defaults`` (the same object, added to the table's own) or in the table's own ``expect``."""
    from pyspark.errors import PySparkException

    defaults = list(getattr(getattr(spec, "defaults", None), "expect", ()))
    own = [e for e in tspec.expect if not any(e is d for d in defaults)]
    for e in tspec.expect:
        try:
            df.selectExpr(f"CAST(({e.condition}) AS BOOLEAN) AS ok").schema  # noqa: B018
        except PySparkException as exc:
            j = next((j for j, d in enumerate(defaults) if d is e), None)
            where = f"defaults.expect[{j}]" if j is not None else f"layers.{table}.expect[{own.index(e)}]"
            raise TidehouseError(
                ErrorCode.SPEC_BAD_VALUE,
                f"table {table}: expectation '{e.name}' is not a valid "
                f"condition over the output columns: {str(exc).splitlines()[0]}",
                location=node_location(
                    getattr(spec, "location_of", None), f"{where}.condition", prefixed=True
                )
                or tloc,
            ) from exc


def _quiet_spark_logs() -> None:
    """PySpark logs every captured analysis error at ERROR before we wrap it; the wrapped error says it
    all."""
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)


QUARANTINE_SCHEMA_DDL = QUARANTINE_DDL
