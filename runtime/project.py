"""The library façade: one object per project that the CLI, the demo, tests and notebooks drive.

Like SQLMesh's ``Context`` or dbt's ``dbtRunner``, :class:`Project` is the one entry point above the parts:
``plan``, ``trigger``, ``status``, ``tier``, ``query``, ``register_*``, ``validate_flow``, ``info``. It opens
each part lazily from the configuration — the registry store, the hot table store, the lake catalog, the
SparkSession — so a command only pays for what it uses (``action list`` never starts Spark). It returns
results and raises :class:`~runtime.core.errors.TidehouseError`; it never exits or prints.

A flow is named the same way everywhere (:class:`~runtime.core.refs.FlowRef`): a YAML file, or ``NAME[@N]``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
from collections.abc import Callable, Iterable, Sequence
from functools import cache, cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.core.config import Config, load_config, mask_catalog, redact
from runtime.core.durations import run_seconds
from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.files import shown_path
from runtime.core.literals import is_internal_table
from runtime.core.refs import FlowRef, Ref
from runtime.core.yamlsource import read_text

if TYPE_CHECKING:  # pragma: no cover
    import threading

    import pyarrow as pa

    from materializer.actiontest import ActionTestReport
    from materializer.diff import FlowDiff
    from materializer.metrics import MetricsEndpoint
    from materializer.plan import FlowPlan
    from materializer.runner import RunReport
    from registry.service import ActionVersion, FlowVersion, Registry
    from runtime.lake.catalog import Lake
    from runtime.lake.scheduler import TieringService, TierReport
    from runtime.lake.tiering import CycleResult
    from runtime.storage.api import TableStore


class Project:
    def __init__(self, config: Config) -> None:
        self.config = config

    @classmethod
    def open(
        cls, home: str | os.PathLike | None = None, project_dir: str | os.PathLike | None = None
    ) -> Project:
        return cls(load_config(home=home, project_dir=project_dir))

    @property
    def home(self) -> Path:
        return self.config.home

    @property
    def actions_dir(self) -> Path:
        return self.config.project_dir / "actions"

    @property
    def flows_dir(self) -> Path:
        return self.config.project_dir / "flows"

    @property
    def logs_dir(self) -> Path:
        """Where Spark's log goes (``spark.log``)."""
        return self.home / "logs"

    # -- parts, opened on first use ----------------------------------------------------------------
    @cached_property
    def registry(self) -> Registry:
        """The versioned flow & action registry."""
        from registry.service import Registry

        try:
            self.home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file, or a folder this user cannot create: not an internal error
            why = "it exists and is not a directory" if self.home.exists() else exc.strerror
            raise TidehouseError(
                ErrorCode.CONFIG_INVALID,
                f"cannot use {self.home} as the home directory: {why}",
                hint="give --home, $TIDEHOUSE_HOME or the project file's home: a folder this user can create",
            ) from None
        return Registry.open(self.config.registry_url)

    @cached_property
    def store(self) -> TableStore:
        """The hot table store. A store whose primary-key state is a cache (the object store) rebuilds it
        from this project's lake snapshot plus the changelog after it."""
        from runtime.lake import lake_bootstrap
        from runtime.storage import open_configured

        return open_configured(self.config, bootstrap=lake_bootstrap(lambda: self.lake))

    @cached_property
    def lake(self) -> Lake:
        """The Iceberg lake."""
        from runtime.lake.catalog import Lake

        return Lake.open(self.config)

    def spark(self):
        """The process's SparkSession, configured from the project file; its log goes to ``<home>/logs``. Its
        ``tidehouse`` data source reads this project (``spark.read.format("tidehouse").load("dwd.events")``:
        lake + hot tail)."""
        from materializer.sparkconf import spark_conf
        from runtime.spark.confkeys import at_its_line, refuse_typos
        from runtime.spark.session import get_spark, register_source

        master, remote = self.config.get("spark.master"), self.config.get("spark.remote")
        archive = "make" if self.config.get("spark.class_archive") else "off"
        with at_its_line(self.config):  # a setting Spark refuses, at its line in the project file
            spark = get_spark(
                master, spark_conf(self.config), log_dir=self.logs_dir, remote=remote, class_archive=archive
            )
        if not remote:  # a misspelt spark.conf key (over Spark Connect the settings are the server's)
            refuse_typos(spark, self.config)
        register_source(spark, self.config)
        return spark

    def close(self) -> None:
        for part in ("store", "lake", "registry"):
            obj = self.__dict__.pop(part, None)
            if obj is not None and hasattr(obj, "close"):
                obj.close()

    # -- actions -----------------------------------------------------------------------------------
    def register_actions(
        self, paths: Sequence[str | os.PathLike], *, quick: bool = False
    ) -> list[ActionVersion]:
        """Register action files and folders: all or nothing. Spark parses each SQL unless ``quick``."""
        from registry.service import action_files

        for raw in paths:  # the wrong folder is a mistake, not "nothing to register"
            if Path(raw).is_dir() and not action_files([raw]):
                raise TidehouseError(
                    ErrorCode.SPEC_BAD_VALUE,
                    "the folder holds no action files (*.sql)",
                    location=Location(str(raw)),
                    hint="actions are .sql files with a /*--- header",
                )
        return self.registry.register_actions(list(paths), checks=self._checks(quick))

    def actions(self) -> list[ActionVersion]:
        """The latest version of every registered action."""
        return self.registry.list_actions()

    def action(self, ref: str) -> ActionVersion:
        """An action by ``NAME`` (latest) or ``NAME@N``."""
        parsed = Ref.parse(ref)
        return self.registry.get_action(parsed.name, parsed.version)

    def action_versions(self, name: str) -> list[ActionVersion]:
        return self.registry.action_versions(name)

    # -- flows -------------------------------------------------------------------------------------
    def register_flow(self, path: str | os.PathLike, *, quick: bool = False) -> FlowVersion:
        """Validate and register a flow file; the project's ``actions/`` first (as ``flow trigger PATH``): a
        table pins its action file as it is now. Spark checks both unless ``quick``, after the registry's."""
        from registry.local import local_actions

        checks = self._checks(quick)
        local = local_actions(shown_path(self.actions_dir), explicit=False)
        self.registry.validate_flow(path, local_actions=local)  # what the registry refuses starts no Spark
        self._register_project_actions(checks)
        return self.registry.register_flow(path, checks=checks)

    def flows(self) -> list[FlowVersion]:
        """The latest version of every registered flow."""
        return self.registry.list_flows()

    def flow(self, ref: str) -> FlowVersion:
        """A registered flow by ``NAME`` (latest) or ``NAME@N``."""
        parsed = Ref.parse(ref, "flow")
        return self.registry.get_flow(parsed.name, parsed.version)

    def flow_versions(self, name: str) -> list[FlowVersion]:
        return self.registry.flow_versions(name)

    def edited_actions(self, flow: str | FlowRef) -> list:
        """For a registered flow (NAME[@N]; a PATH: none, its run registers the files first), the tables whose
        action file in ``actions/`` is not the version it pins (:func:`registry.local.edited_actions`)."""
        from registry.local import edited_actions

        ref = flow if isinstance(flow, FlowRef) else FlowRef.parse(flow)
        if ref.is_path:
            return []
        version = self.registry.get_flow(ref.ref.name, ref.ref.version)
        return edited_actions(self.registry, version, shown_path(self.actions_dir))

    def edited_flow(self, flow: str | FlowRef) -> Path | None:
        """The file of a flow run by NAME when it holds another text than the registered one the run uses."""
        from registry.local import edited_flow

        ref = flow if isinstance(flow, FlowRef) else FlowRef.parse(flow)
        named = not ref.is_path and ref.ref.version is None
        return edited_flow(self.registry.get_flow(ref.ref.name)) if named else None

    def validate_flow(
        self,
        flow: str | os.PathLike | FlowRef,
        *,
        actions_dir: str | os.PathLike | None = None,
        quick: bool = False,
        alongside: Iterable[str | os.PathLike] = (),
    ) -> dict[str, Any]:
        """Check a flow file (with the unregistered actions of ``actions_dir``, default the project's) or a
        registered flow; raise every problem found (``TidehouseErrors``), else a summary of the flow. A file
        may read the tables of the flow files ``alongside`` (validated with it) as if they were registered."""
        from registry.local import flow_files_alongside, local_actions

        ref = flow if isinstance(flow, FlowRef) else FlowRef.parse(flow)
        if ref.is_path:
            folder = Path(actions_dir) if actions_dir else self.actions_dir
            local = local_actions(folder, explicit=actions_dir is not None)
            others = flow_files_alongside(ref.path, alongside)
            checks = self._checks(quick, alongside=others, local_actions=local)
            spec = self.registry.validate_flow(ref.path, local_actions=local, checks=checks, alongside=others)
            return {
                "ok": True,
                "flow": spec.flow,
                "path": str(ref.path),
                "tables": [q for q, _ in spec.tables()],
            }
        checks = self._checks(quick)
        version = self.registry.validate_registered_flow(ref.ref.name, ref.ref.version, checks=checks)
        return {"ok": True, "flow": version.name, "version": version.version, "tables": list(version.pins)}

    def _spec(self, flow: str | os.PathLike | FlowRef):
        """A flow's spec without Spark: a file parsed (not validated), or a registered version's."""
        ref = flow if isinstance(flow, FlowRef) else FlowRef.parse(flow)
        if ref.is_path:
            from registry.specs import parse_flow

            return parse_flow(ref.path)
        return self.registry.get_flow(ref.ref.name, ref.ref.version).spec

    # -- plan and run ------------------------------------------------------------------------------
    def plan(
        self,
        flow: str | os.PathLike | FlowRef,
        *,
        register: bool = False,
        spark=None,
        select: Iterable[str] = (),
        exclude: Iterable[str] = (),
        check: Callable[[FlowPlan], None] | None = None,
    ) -> FlowPlan:
        """The plan of a flow. A file's actions (the project's ``actions/``) are registered first, each SQL
        parsed by Spark; the flow itself only with ``register`` (``trigger`` does), once every table analyses
        and ``check`` (given the plan) passes (a flow that cannot run is not stored), else it is validated.
        ``select``/``exclude``: table selectors (:mod:`registry.selectors`); the plan of only the tables they
        select."""
        from materializer.analyze import build_plan
        from materializer.selection import select_tables, subset

        ref = flow if isinstance(flow, FlowRef) else FlowRef.parse(flow)
        spark = spark or self.spark()
        text = read_text(str(ref.path)) if ref.is_path else None  # read once: what is planned is stored
        plan = build_plan(self, self._resolve(ref, spark, text), spark)
        if check is not None:
            check(plan)
        if register and ref.is_path:
            version = self.registry.register_flow(ref.path, text=text).version
            plan = dataclasses.replace(plan, version=version)
        if select or exclude:
            plan = subset(plan, select_tables(plan, select, exclude))
        return plan

    def diff_flow(self, path: str | os.PathLike, *, spark=None) -> FlowDiff:
        """What registering a flow file changes (``tidehouse flow diff``): its plan (validated and analysed
        as :meth:`plan` does, with the project's actions) against the plan of the registered version that
        built the flow's data — the latest, unless newer versions were registered that have not run."""
        from materializer.analyze import build_plan
        from materializer.built import built_by
        from materializer.diff import diff_plans

        ref = FlowRef.parse(path)
        if not ref.is_path:
            raise TidehouseError(
                ErrorCode.SPEC_BAD_VALUE,
                f"flow diff compares a flow file with its registered version: {path} is not a file",
                location=Location(str(path)),
                hint="give the path of the flow's YAML file",
            )
        new = self.plan(ref, spark=spark)  # a bad file fails here, before Spark starts
        try:
            versions = self.registry.flow_versions(new.flow)  # oldest first
        except TidehouseError as exc:
            if exc.code is not ErrorCode.FLOW_UNKNOWN:
                raise
            versions = []
        plans = [lambda v=v: build_plan(self, _pinned(self.registry, v), spark) for v in reversed(versions)]
        old = built_by(plans, self.store.has_table)  # a newer version registered by `flow register` never ran
        latest = versions[-1].version if versions else None
        return diff_plans(old, new, str(path), self.registry.other_flows(new.flow), latest)

    def trigger(
        self,
        flow: str | os.PathLike | FlowRef,
        *,
        until_idle: bool = False,
        duration: float | str | None = None,
        full_refresh: Iterable[str] = (),
        spark=None,
        stop_event: threading.Event | None = None,
        on_status: Callable[[dict], None] | None = None,
        tiering: bool = True,
        plan: FlowPlan | None = None,
    ) -> RunReport:
        """Register (a file), plan and run a flow (see :class:`materializer.runner.FlowRunner` for the modes).

        The flow's run lock is taken before anything else, so a second trigger of a running flow is refused
        at once — before it starts Spark or registers a new version under the running one. ``plan``: run
        this plan (made by :meth:`plan` with ``register=True``) instead of planning again. ``full_refresh``:
        table selectors (``dws.users``, ``layer:ads``, ``tag:pii+``: :mod:`registry.selectors`); the
        selected tables and everything downstream of them are rebuilt. With the setting ``metrics.port``,
        the run's status figures are served to Prometheus while it runs.
        """
        from materializer.built import refuse_changed
        from materializer.lock import RunLock
        from materializer.metrics import FlowCollector
        from materializer.plan import source_path
        from materializer.runner import FlowRunner
        from materializer.selection import select_tables
        from materializer.sources import refuse_unread

        if until_idle and duration is not None:
            raise TidehouseError(
                ErrorCode.CONFIG_INVALID,
                "--until-idle and --duration exclude each other: an --until-idle run ends when it is drained",
                location=Location("--duration"),
                hint="give one of them",
            )
        duration = run_seconds(duration, "--duration")
        ref = flow if isinstance(flow, FlowRef) else FlowRef.parse(flow)
        spec = cache(lambda: self._spec(ref))  # parsed at most once, and only when a check below needs it
        # the lock's name without Spark or the registry: a file's ``flow:`` key, else ``NAME``
        name = plan.flow if plan is not None else spec().flow if ref.is_path else ref.ref.name
        selectors = list(full_refresh)
        if selectors and plan is None:  # a mistyped selector fails before Spark starts
            from registry.selectors import spec_tables

            spec_tables(spec(), selectors, option="--full-refresh")
        # a mistyped source folder, or files in subfolders no file source reads, would end the run with rows
        # unread: refused before Spark starts (not over Spark Connect: the paths are the server's)
        if until_idle and not self.config.get("spark.remote"):
            where = {
                n: (source_path(self.config.project_dir, s.path), s.options or {})
                for n, s in spec().sources.items()
            }
            refuse_unread(where, lambda n: spec().location_of(f"sources.{n}.path"))
        lock = RunLock(self.config.run_dir, name)
        lock.acquire()
        latest: dict[str, dict] = {}

        def keep(snap: dict) -> None:  # the snapshot the metrics serve: the one `flow status` reads
            latest["snapshot"] = snap
            if on_status:
                on_status(snap)

        try:
            with self.metrics_endpoint(FlowCollector(name, lambda: latest.get("snapshot"))):
                # TH405 before the file is registered: a refused file must not become the flow's latest
                refuse = partial(refuse_changed, has_table=self.store.has_table, full_refresh=selectors)
                plan = plan or self.plan(ref, register=True, spark=spark, check=refuse)
                rebuild = select_tables(plan, selectors, option="--full-refresh") if selectors else []
                runner = FlowRunner(self, plan, spark=spark, on_status=keep, lock=lock)
                return runner.run(
                    until_idle=until_idle,
                    duration=duration,
                    full_refresh=rebuild,
                    stop_event=stop_event,
                    tiering=tiering,
                )
        finally:
            lock.release()

    def status(self, name: str) -> dict[str, Any]:
        """Per-table figures of a registered flow, running or not (``tidehouse flow status``)."""
        from materializer.status import flow_status

        return flow_status(self, name)

    # -- the lake ----------------------------------------------------------------------------------
    def tier_tables(
        self,
        flow: str | None = None,
        table: str | None = None,
        *,
        select: Iterable[str] = (),
        exclude: Iterable[str] = (),
    ) -> dict[str, float]:
        """``{"layer.name": interval_s}`` to tier: a registered flow's hot tables (and their quarantine
        tables) at their own intervals — those that ``select``/``exclude`` select (table selectors, see
        :mod:`registry.selectors`) —, or every hot table, at the interval the latest version of its flow
        declares (else ``tiering.interval``); or only ``table``."""
        from materializer.plan import quarantine_name
        from registry.selectors import spec_tables

        if (select or exclude) and not flow:
            raise TidehouseError(
                ErrorCode.SELECTOR_INVALID,
                "table selectors resolve against a flow's graph: name the flow",
                location=Location(path="--select"),
                hint="tidehouse tier run --flow NAME --select ...",
            )
        store = self.store
        default = float(self.config.get("tiering.interval"))
        declared: dict[str, float] = {}
        for fv in [self.flow(flow)] if flow else self.registry.list_flows():
            every = [n for n, _ in fv.spec.tables()]
            for name in spec_tables(fv.spec, select, exclude) if select or exclude else every:  # + quarantine
                declared[name] = declared[quarantine_name(name)] = float(fv.spec.tiering_of(name, default))
        if flow:  # the flow's tables that exist (never triggered: none)
            wanted = {name: iv for name, iv in declared.items() if store.has_table(name)}
        else:
            wanted = {n: declared.get(n, default) for n in store.list_tables() if not is_internal_table(n)}
        if table:
            if table not in wanted:
                raise TidehouseError(
                    ErrorCode.TABLE_UNKNOWN,
                    f"no hot table {table}" + (f" in flow {flow}" if flow else ""),
                    location=Location(path=table),
                    hint="tables: " + (", ".join(sorted(wanted)) or "none"),
                )
            wanted = {table: wanted[table]}
        return wanted

    def tiering_service(
        self,
        tables: dict[str, float],
        *,
        on_cycle: Callable[[CycleResult], None] | None = None,
        on_error: Callable[[str, BaseException], None] | None = None,
    ) -> TieringService:
        """The tiering service of ``tables`` (``start()`` / ``stop()`` it, or ``run_all_now()``)."""
        from runtime.lake.scheduler import TieringService

        return TieringService(self, tables, on_cycle=on_cycle, on_error=on_error)

    def metrics_endpoint(
        self, collector=None, *, tiering: TieringService | None = None, flow: str | None = None
    ) -> MetricsEndpoint | contextlib.nullcontext:
        """The Prometheus endpoint (settings ``metrics.port``, ``metrics.host``) serving ``collector``, or a
        tiering service's figures; a no-op context when ``metrics.port`` is not set. ``stop()`` it, or use it
        as a context manager."""
        port = self.config.get("metrics.port")
        if port is None:
            return contextlib.nullcontext()
        from materializer.metrics import MetricsEndpoint, TieringCollector

        return MetricsEndpoint(
            collector or TieringCollector(tiering, flow), self.config.get("metrics.host"), port
        )

    def tier(
        self,
        flow: str | None = None,
        table: str | None = None,
        *,
        select: Iterable[str] = (),
        exclude: Iterable[str] = (),
    ) -> TierReport:
        """One tiering cycle of each table now (``tidehouse tier run``): each table's result or error
        (``report.raise_for_errors()`` raises ``TIERING_FAILED`` naming the failed ones)."""
        tables = self.tier_tables(flow, table, select=select, exclude=exclude)
        return self.tiering_service(tables).run_all_now()

    def query(self, sql: str) -> pa.Table:
        """``tidehouse query``: SQL (DuckDB dialect) over union reads of the tables it names."""
        from runtime.lake.union import union_query

        return union_query(self.store, self.lake, sql, declared=self._declared_tables)

    def _declared_tables(self) -> dict[str, str]:
        """Each table of the registered flows' latest versions -> its flow (none without a registry: a query
        needs none, this only words its error)."""
        with contextlib.suppress(TidehouseError):
            return {table: fv.name for fv in self.registry.list_flows() for table, _ in fv.spec.tables()}
        return {}

    # -- action tests ------------------------------------------------------------------------------
    def test(
        self,
        paths: Sequence[str | os.PathLike] = (),
        *,
        stream: bool = True,
        spark=None,
        on_progress: Callable[[str], None] | None = None,
    ) -> ActionTestReport:
        """Run action tests (``tidehouse test``): test files, folders or ``FILE::CASE`` (default: the
        project's ``actions/``), in Spark batch and (``stream``) through a streaming flow of a throw-away
        project. Raises the test files' problems (exit 2); returns the results."""
        from materializer.actiontest import run_action_tests
        from registry.specs.testfiles import load_action_tests

        cases = load_action_tests(list(paths) or [shown_path(self.actions_dir)])
        return run_action_tests(
            cases,
            spark=spark or self.spark(),
            scratch=lambda root: type(self).open(home=root / "home", project_dir=root / "project"),
            stream=stream,
            on_progress=on_progress,
        )

    # -- about -------------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """Versions, home, storage and catalog settings, with every secret masked (``tidehouse info``)."""
        config = self.config
        settings = config.masked()
        report = {
            "versions": _versions(),
            "home": str(config.home),
            "project": str(config.project_dir),
            "storage_root": config.storage_root,
            "checkpoints": config.checkpoint_root,
            "logs": str(self.logs_dir),
            "registry": settings["registry.url"] or "sqlite (embedded, under home)",
            "lake_catalog": {
                "name": config.get("lake.catalog_name"),
                **mask_catalog(config.lake_catalog_properties),
            },
            "settings": settings,
        }
        return redact(report)  # ${ENV} values may sit inside a URI or a path: hide them everywhere

    # -- helpers -----------------------------------------------------------------------------------
    def _checks(self, quick: bool, **alongside):
        """The Spark checks the registry runs after its own (None with ``quick``)."""
        if quick:
            return None
        from materializer.checks import EngineChecks

        return EngineChecks(self, **alongside)

    def _register_project_actions(self, checks=None) -> None:
        """Register the project's ``actions/`` as the files are now (an unchanged one keeps its version)."""
        if self.actions_dir.is_dir():
            self.registry.register_actions([shown_path(self.actions_dir)], checks=checks)

    def _resolve(self, ref: FlowRef, spark, text: str | None = None):
        """A flow with the action version of each table: a file (its project's actions registered first, each
        SQL parsed by ``spark``; the flow validated, from ``text`` when given) or a registered version (its
        pins)."""
        from materializer.analyze import ResolvedFlow
        from materializer.checks import EngineChecks

        registry = self.registry
        if not ref.is_path:
            return _pinned(registry, registry.get_flow(ref.ref.name, ref.ref.version))
        self._register_project_actions(EngineChecks(self, spark))
        spec = registry.validate_flow(ref.path, text=text)
        actions = {}
        for table, tspec in spec.tables():
            action = Ref.parse(tspec.action)
            actions[table] = registry.get_action(action.name, action.version)
        return ResolvedFlow(spec, None, actions)


def _pinned(registry, version):
    from materializer.analyze import ResolvedFlow

    actions = {}
    for table, tspec in version.spec.tables():
        action = Ref.parse(version.pins.get(table, tspec.action))
        actions[table] = registry.get_action(action.name, action.version)
    return ResolvedFlow(version.spec, version.version, actions)


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for dist in ("tidehouse", "pyspark", "pyarrow", "pyiceberg", "duckdb"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    return out


def lost_spark_server(exc: BaseException) -> TidehouseError | None:
    """The error of a Spark Connect server that stopped answering (``exc`` is the client's last failed
    call), after closing this process's sessions without it, or of this process's driver JVM that ended; None
    for any other exception."""
    from runtime.spark.session import lost_server_error, server_lost

    lost = lost_server_error(exc)
    if lost is not None:
        server_lost()
    return lost
