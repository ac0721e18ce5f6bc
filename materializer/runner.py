"""Execution: run a :class:`~materializer.plan.FlowPlan` — one streaming query per table, layer by layer.

The runner only runs a plan: it takes the flow's run lock (``home/run/<flow>.lock``; a second trigger of
the same flow is refused), applies ``--full-refresh``, creates missing hot tables, starts the tiering
service for the flow's tables, then starts the queries generation by generation (ODS first), each in the
Spark scheduler pool of its layer, with its own checkpoint and ``processingTime`` trigger. A status
snapshot is written to ``home/run/<flow>.status.json`` every couple of seconds.

Modes: until stopped (SIGINT/SIGTERM set ``stop_event``; queries and tiering stop gracefully), for a
``duration``, or ``until_idle``: each generation in order is drained with ``processAllAvailable()`` and
the passes repeat until no hot end offset moves (a drained generation's tables are tiered in the background
meanwhile), then a final tiering cycle makes every lake table equal its hot table. In that mode a table that
reads lookups (an ``append`` with primary-key inputs) starts only once every earlier generation has caught
up, so a backfill's lookups read complete dimensions.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from materializer.admission import rows_per_batch, source_options
from materializer.analyze import struct_of
from materializer.built import refuse_changed
from materializer.drain import Awake, drain
from materializer.executors import EXECUTOR_FUNCTIONS, check_executors, recompute_distributed
from materializer.failures import TRANSIENT, query_failure, stopped_elsewhere
from materializer.guard import guarded
from materializer.handoff import Handoff
from materializer.hotstream import Waiting, hot_stream
from materializer.incremental import joinlog
from materializer.jsonlines import JsonLinesReader, reader_of
from materializer.lock import RunLock
from materializer.plan import FlowPlan, TablePlan, data_path_of
from materializer.progress import ProgressListener
from materializer.remote import RemoteRun, run_folder
from materializer.sources import source_stream
from materializer.status import StatusMemory
from materializer.strategies import BATCH_FUNCTIONS, QueryContext, TableStats, recompute
from materializer.tables import quarantine_meta, table_meta
from runtime.core.errors import ErrorCode, TidehouseError
from runtime.lake.history import TableHistory
from runtime.spark.options import Place
from runtime.spark.session import is_connect, lost_server_error, new_session, server_lost, stop_session
from runtime.spark.writer import clear_unstarted

log = logging.getLogger(__name__)
STATUS_EVERY_S = 2.0
MAX_RESTARTS = 8  # with back-off 1, 2, 4, 8, 15, 15... s
MAX_IDLE_PASSES = 20


@dataclass
class RunReport:
    flow: str
    mode: str
    seconds: float
    tables: dict[str, dict] = field(default_factory=dict)
    tiering: dict[str, dict] = field(default_factory=dict)
    spark: str = ""  # where the queries ran: the master URL (or the Spark Connect URL)
    data_path: str = ""  # driver | executors


class FlowRunner:
    """Runs one flow plan in this process's SparkSession."""

    def __init__(
        self,
        project,
        plan: FlowPlan,
        *,
        spark=None,
        on_status: Callable[[dict], None] | None = None,
        lock: RunLock | None = None,
    ) -> None:
        self.project = project
        self.plan = plan
        self.spark = spark or project.spark()
        self.store = project.store
        self.history = TableHistory(self.store, project.lake)  # lake + hot tail: reads behind retention
        self.root = project.config.storage_root
        self.on_status = on_status
        self.stats: dict[str, TableStats] = {t.name: TableStats() for t in plan.tables}
        self.queries: dict[str, object] = {}
        self.contexts: dict[str, QueryContext] = {}
        self.status_memory = StatusMemory()
        self._status_failure: str | None = None
        self.tiering = None
        self.lock = lock or RunLock(project.config.run_dir, plan.flow)
        self.awake = Awake(Path(project.config.run_dir) / "awake" / plan.flow)
        self.status_path = Path(project.config.run_dir) / f"{plan.flow}.status.json"
        self.started = time.time()
        self._status_stop = threading.Event()
        self.state = "starting"
        self._restarts: dict[str, int] = {}
        self.progress = ProgressListener()  # late rows dropped by watermarks, from Spark's query progress
        self.connect = is_connect(self.spark)  # a Spark Connect client: batch functions run on the server
        self.remote: RemoteRun | None = None  # the heartbeat and the figures of a run over Spark Connect
        self._sessions: list = []  # the queries' sessions (one each: their temp views never clash)
        self.server_lost = False  # the Spark Connect server stopped answering during the run

    # -- preparation ------------------------------------------------------------------------------
    def full_refresh(self, tables: Iterable[str]) -> list[str]:
        """Rebuild the named tables and everything downstream of them: the hot table and the checkpoints
        are dropped, the lake table gets an empty snapshot (see :meth:`runtime.lake.catalog.Lake.reset`)."""
        tables = list(tables)
        if not tables:
            return []
        doomed = self.plan.graph().descendants(tables)
        for name in doomed:
            t = self.plan.table(name)
            metas = [table_meta(t)] + ([quarantine_meta(t.quarantine)] if t.quarantine else [])
            for meta in metas:
                if self.store.has_table(meta.name):  # a new incarnation: its readers are told, not fooled
                    self.store.drop_table(meta.name)
                self.project.lake.reset(meta)  # an empty snapshot at offsets 0: the lake table stays
            shutil.rmtree(Path(t.checkpoint).parent, ignore_errors=True)
            log.info("full refresh: dropped %s", name, extra={"flow": self.plan.flow, "table": name})
        return doomed

    def check_unchanged(self) -> None:
        """A table whose plan changed (new action version, new SQL, schema...) keeps data built by the old
        plan: refuse to mix them, and say how to rebuild."""
        refuse_changed(self.plan, self.store.has_table)

    def create_tables(self) -> None:
        for t in self.plan.tables:
            self.store.create_table(table_meta(t), exist_ok=True)
            if t.quarantine:
                self.store.create_table(quarantine_meta(t.quarantine), exist_ok=True)

    def create_lake_tables(self) -> None:
        """Create the lake tables up front, one at a time (tiering cycles then run in parallel)."""
        for t in self.plan.tables:
            for name in (t.name, t.quarantine):
                if name:
                    self.project.lake.ensure_table(self.store.get_table(name))

    # -- queries ----------------------------------------------------------------------------------
    def _waiting(self, t: TablePlan) -> Waiting | None:
        """How the only source of ``t``'s query waits for rows; over Connect it does not (its runner runs
        on the server, away from the awake files)."""
        return None if self.connect else Waiting(t.trigger, self.awake.path(t.name))

    def start_query(self, t: TablePlan):
        from pyspark.sql import functions as F

        ctx = self._context(t)
        config, waiting = self.project.config, self._waiting(t)
        session = new_session(self.spark)
        self._sessions.append(session)
        self.progress.watch(session)
        if t.strategy == "append":
            stream_input = next(i for i in t.inputs if i.kind in ("source", "log"))
            if stream_input.kind == "source":
                src = self.plan.source(stream_input.ref.split(":", 1)[1])
                options = source_options(src, self.project.config, self.data_path)
                stream, ctx.spark_files = source_stream(
                    session, src, options, t.checkpoint, t.name, config, waiting and waiting.options()
                )
            else:  # bound the batch: a cap per data path (max_rows_per_batch)
                stream = hot_stream(
                    session, config, stream_input.ref, max_rows=self.max_rows_per_batch, waiting=waiting
                )
        elif t.strategy == "aggregate":
            inp = t.inputs[0]
            users = [f"`{f.name}`" for f in struct_of(inp.ddl).fields]
            hot_stream(session, config, inp.ref).select(*users).createOrReplaceTempView(inp.name)
            stream = session.sql(t.sql, args=ctx.args)
        elif t.strategy in ("changelog", "agg_log"):
            stream = hot_stream(
                session, config, t.inputs[0].ref, max_rows=self.max_rows_per_batch, waiting=waiting
            )
        elif t.strategy == "join_log" and self.data_path == "executors" and joinlog.in_tasks(t):
            stream = joinlog.log_join_stream(session, config, t)  # the batch holds the log's rows (tasks)
        else:  # recompute: any change of any input triggers a micro-batch
            stream = None
            for inp in t.inputs:
                first = struct_of(inp.ddl).fields[0].name
                alone = waiting if len(t.inputs) == 1 else None
                part = hot_stream(session, config, inp.ref, [first], waiting=alone)
                part = part.select(F.lit(1).alias("changed"))
                stream = part if stream is None else stream.union(part)
        if self.remote is not None:  # over Spark Connect: a value the server runs (materializer.remote)
            fn = self.remote.batch(self.plan, t.name, ctx.place, ctx.spark_partitions)
        else:
            functions = EXECUTOR_FUNCTIONS if self.data_path == "executors" else BATCH_FUNCTIONS
            fn = guarded(functions[t.strategy](ctx), ctx)
        writer = (
            stream.writeStream.queryName(t.name)
            .option("checkpointLocation", t.checkpoint)
            .trigger(processingTime=f"{round(t.trigger * 1000)} milliseconds")
            .foreachBatch(fn)
        )
        if t.strategy == "aggregate":
            writer = writer.outputMode("update")
        Path(t.checkpoint).parent.mkdir(parents=True, exist_ok=True)
        if left := clear_unstarted(t.checkpoint):  # a run killed while Spark wrote the query's first offsets
            where = {"flow": self.plan.flow, "table": t.name}
            log.warning(
                "%s: removed an unfinished first offsets entry: %s", t.name, ", ".join(left), extra=where
            )
        self.awake.clear([t.name])  # one a killed run left
        sc = None if self.connect else self.spark.sparkContext  # Connect: the server schedules its jobs
        if sc is not None:
            sc.setLocalProperty("spark.scheduler.pool", t.layer)
        try:
            query = self._start(writer, t.name)
        finally:
            if sc is not None:
                sc.setLocalProperty("spark.scheduler.pool", None)
        self.queries[t.name] = query
        return query

    def _start(self, writer, name: str):
        """Start a query; a start that meets a transient failure (over Spark Connect a start launches the
        server's Python process of the batch function) is tried again with the restarts' back-off."""
        from pyspark.errors import PySparkException

        attempt = 0
        while True:
            attempt += 1
            try:
                return writer.start()
            except PySparkException as exc:  # refused by Spark when it starts (the plan should have known)
                first = str(exc).splitlines()[0]
                if attempt > MAX_RESTARTS or not any(marker in str(exc) for marker in TRANSIENT):
                    raise TidehouseError(
                        ErrorCode.QUERY_FAILED,
                        f"the query of table {name} could not start: {first}",
                        hint="report this: `tidehouse flow plan` accepted a table Spark refuses to run",
                    ) from exc
                log.warning("starting the query of %s again after: %s", name, first)
                time.sleep(min(2 ** (attempt - 1), 15))

    def _pull(self) -> None:
        """Over Spark Connect: the figures the server-side batches published since the last pull."""
        if self.remote is not None:
            self.remote.pull(self.stats)

    def _check_failed(self) -> None:
        self._pull()
        for name, query in list(self.queries.items()):
            if query.isActive:
                continue
            exc = query.exception()
            if exc is not None and self._restart_if_transient(name, exc):
                continue
            if exc is not None:
                raise self._failure(name, exc)
            raise stopped_elsewhere(name)

    def _drain(self, names: list[str]) -> None:
        """Wait until each query of ``names`` (one generation: independent tables) processed all its input;
        a transient failure restarts its query, which is drained again."""
        while names:
            with self.awake.during(names):  # a drain needs a trigger that finds nothing new: no waiting
                failed = drain(self.queries, names)
            names = []
            for name, exc in failed.items():
                if exc is None and not self.queries[name].isActive:  # drained at once: it had stopped
                    raise stopped_elsewhere(name)
                if exc is not None:
                    if not self._restart_if_transient(name, exc):
                        raise self._failure(name, exc) from exc
                    names.append(name)

    def _failure(self, name: str, exc) -> TidehouseError:
        """The error to raise for a failed query: the TidehouseError its batch raised (its code and location
        kept, the table named), else QUERY_FAILED with Spark's first line."""
        self._pull()
        return query_failure(name, self.stats[name], exc)

    def _restart_if_transient(self, name: str, exc) -> bool:
        """Restart a query that failed for a transient reason (e.g. a Python worker that could not start
        in time on a loaded machine). Safe: it resumes from its checkpoint, writes are idempotent."""
        self._pull()
        text = f"{exc}\n{self.stats[name].error or ''}"  # a batch function may have met it (toArrow...)
        if not any(marker in text for marker in TRANSIENT) or self.stats[name].failure is not None:
            return False  # a TidehouseError a batch raised on purpose is never retried
        self._restarts[name] = self._restarts.get(name, 0) + 1
        if self._restarts[name] > MAX_RESTARTS:
            return False
        log.warning(
            "restarting the query of %s after a transient failure (%d/%d): %s",
            name,
            self._restarts[name],
            MAX_RESTARTS,
            text.splitlines()[0],
            extra={"flow": self.plan.flow, "table": name},
        )
        time.sleep(min(2 ** (self._restarts[name] - 1), 15))
        self.stats[name].error = None
        self.start_query(self.plan.table(name))
        return True

    def reconcile(self, t: TablePlan) -> int:
        """A recomputation outside the query (until-idle): repairs a table whose last micro-batch was
        replayed after a crash against newer input, so the final state equals the batch result."""
        ctx = self._context(t)
        session = new_session(self.spark)
        writer = f"{t.writer_id}:reconcile"
        used = [(t.name, writer)] + ([(t.quarantine, f"{writer}:qe")] if t.quarantine else [])
        seq = self.store.next_seq(used)
        try:
            if self.data_path == "executors":
                return recompute_distributed(ctx, session, seq, writer=writer, origin=None)
            return recompute(ctx, session, seq, writer=writer, origin=None)
        finally:
            if ctx.handoff is not None:
                ctx.handoff.release()
            stop_session(session)

    def _context(self, t: TablePlan) -> QueryContext:
        """The batch functions' context of a table: one per run, shared by its query (restarts included)
        and by reconciles, so the run's figures count each row once."""
        if t.name not in self.contexts:
            self.contexts[t.name] = QueryContext(
                self.store,
                self.root,
                self.plan,
                t,
                self.stats[t.name],
                history=self.history,
                pool=t.layer,
                place=Place(
                    self.root, fsync=self.project.config.get("storage.fsync"), config=self.project.config
                ),
                spark_partitions=int(self.spark.conf.get("spark.sql.shuffle.partitions", "2")),
                handoff=self._handoff(t),
                json_reader=self._json_reader(t),
            )
        return self.contexts[t.name]

    def _lake_files(self):
        """On the executor path, Spark tasks write log tables' lake files (runtime.spark.tiering)."""
        from runtime.spark.tiering import SparkLakeFiles

        if self.data_path != "executors":
            return None
        config = self.project.config
        place = Place(self.root, fsync=config.get("storage.fsync"), config=config)
        return SparkLakeFiles(self.spark, place, min_rows=config.get("tiering.executor_rows"))

    def _json_reader(self, t: TablePlan) -> JsonLinesReader | None:
        """The Arrow reader of a table's JSON source (materializer.jsonlines); None: arrow_json is off."""
        if not self.project.config.get("materializer.arrow_json"):
            return None
        return reader_of(self.plan, t, self.spark)

    def _handoff(self, t: TablePlan) -> Handoff | None:
        """The driver path's hand-off of Arrow data to Spark (materializer.handoff), its folder emptied."""
        if self.data_path != "driver":
            return None
        config = self.project.config
        folder = config.home / "tmp" / "handoff" / t.name
        handoff = Handoff(folder, config.get("materializer.local_relation_rows"))
        handoff.clear()
        return handoff

    @property
    def spark_target(self) -> str:
        """Where the queries run: the master URL (asked once: a JVM that ended cannot say), or Connect's."""
        if self.connect:
            return self.project.config.get("spark.remote") or "spark connect"
        self._master = getattr(self, "_master", None) or self.spark.conf.get("spark.master", "local[*]")
        return self._master

    @property
    def max_rows_per_batch(self) -> int:
        return rows_per_batch(self.project.config, self.data_path)

    @property
    def data_path(self) -> str:
        """``driver`` or ``executors`` (docs/architecture.md, "Two data paths"): the setting
        ``materializer.data_path``, where ``auto`` is the driver for a ``local[...]`` master."""
        return data_path_of(
            self.project.config.get("materializer.data_path"), self.spark_target, self.connect
        )

    def _ends(self) -> dict[str, list[int]]:
        return {t.name: self.store.end_offsets(t.name) for t in self.plan.tables}

    # -- status -----------------------------------------------------------------------------------
    def snapshot(self) -> dict:
        from materializer.status import run_snapshot

        self._pull()
        return run_snapshot(self)

    def _status_loop(self) -> None:
        while not self._status_stop.wait(STATUS_EVERY_S):
            self.write_status()

    def write_status(self, notify: bool = True) -> dict:
        try:
            snap = self.snapshot()
        except Exception as exc:  # noqa: BLE001 - status must never kill the flow, but it must be seen
            text = f"{type(exc).__name__}: {exc}"
            if text != self._status_failure and lost_server_error(exc) is None:  # the run says that one
                log.warning(
                    "flow %s: the status snapshot failed (flow status shows the last one): %s",
                    self.plan.flow,
                    text,
                    extra={"flow": self.plan.flow},
                )
            self._status_failure = text
            return {}
        self._status_failure = None
        tmp = self.status_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(snap, indent=2, default=str), encoding="utf-8")
        os.replace(tmp, self.status_path)
        if self.on_status and notify:  # not for a run refused before its queries: no figure is its own
            self.on_status(snap)
        return snap

    # -- the run ----------------------------------------------------------------------------------
    def run(
        self,
        *,
        until_idle: bool = False,
        duration: float | None = None,
        full_refresh: Iterable[str] = (),
        stop_event: threading.Event | None = None,
        tiering: bool = True,
    ) -> RunReport:
        from runtime.lake.scheduler import TieringService

        stop_event = stop_event or threading.Event()
        mode = "until-idle" if until_idle else (f"duration {duration}s" if duration else "continuous")
        self.lock.acquire()
        status_thread = None
        try:
            if self.data_path == "executors":
                check_executors(self.spark)
            if self.connect:
                self.remote = RemoteRun(run_folder(self.project.config.checkpoint_root, self.plan.flow))
            self.full_refresh(full_refresh)
            self.check_unchanged()
            self.create_tables()
            tier_tables = {n: t.tiering_interval for t in self.plan.tables for n in t.lake_tables}
            if tiering:
                self.create_lake_tables()
                self.tiering = TieringService(self.project, tier_tables, files=self._lake_files())
                if not until_idle:
                    self.tiering.start()
            self.state = "running"
            status_thread = threading.Thread(target=self._status_loop, name="flow-status", daemon=True)
            status_thread.start()
            started: list[str] = []
            for gen in self.plan.generations:
                began = time.time()
                if until_idle and any(self._has_lookups(name) for name in gen):
                    self._drain(started)  # lookups of a backfill read complete upstream tables
                for name in gen:
                    self.start_query(self.plan.table(name))
                started += gen
                log.info(
                    "flow %s: started %s in %.1fs",
                    self.plan.flow,
                    ", ".join(gen),
                    time.time() - began,
                    extra={"flow": self.plan.flow},
                )
            if until_idle:
                self._until_idle(stop_event)
                if self.tiering is not None and not stop_event.is_set():
                    began = time.time()
                    self.tiering.run_all_now().raise_for_errors()  # the lake must equal the hot tables
                    log.info(
                        "flow %s: final tiering cycle in %.1fs",
                        self.plan.flow,
                        time.time() - began,
                        extra={"flow": self.plan.flow},
                    )
            else:
                deadline = time.time() + duration if duration else None
                while not stop_event.is_set():
                    self._check_failed()
                    left = None if deadline is None else deadline - time.time()
                    if left is not None and left <= 0:
                        break
                    stop_event.wait(min(0.5, left) if left is not None else 0.5)
            self.state = "stopped"
        except BaseException as exc:
            self.state = "failed"
            lost = self._lost_server(exc)
            if lost is not None:
                raise lost from None
            raise
        finally:
            if self.server_lost:  # nothing to stop or ask there: its queries died with it
                server_lost()
                if self.tiering is not None:
                    self.tiering.stop(wait=True)
            else:
                self._stop_all()
            self._status_stop.set()
            if status_thread is not None:
                status_thread.join(timeout=5)
            if not self.server_lost:
                self.progress.close()  # every progress event delivered: the last snapshot counts them all
            if self.remote is not None:
                self.remote.close(self.stats)
            for session in [] if self.server_lost else self._sessions:  # Connect: release them on the server
                stop_session(session)
            self._sessions.clear()
            self.write_status(notify=status_thread is not None)
            self.lock.release()
        report = RunReport(
            self.plan.flow,
            mode,
            time.time() - self.started,
            {
                n: {**s.to_dict(), "late_dropped": self.progress.late_dropped(n)}
                for n, s in self.stats.items()
            },
            self.tiering.summary() if self.tiering else {},
            spark=self.spark_target,
            data_path=self.data_path,
        )
        return report

    def _has_lookups(self, name: str) -> bool:
        t = self.plan.table(name)
        return t.strategy == "append" and any(i.kind == "primary_key" for i in t.inputs)

    def _until_idle(self, stop_event: threading.Event) -> None:
        previous = None
        for _ in range(MAX_IDLE_PASSES):
            began = time.time()
            for gen in self.plan.generations:
                if stop_event.is_set():  # SIGINT/SIGTERM: stop between drains, checkpoints are consistent
                    return
                self._drain(list(gen))
                for name in gen:
                    t = self.plan.table(name)
                    if t.strategy == "recompute":
                        self.reconcile(t)
                if self.tiering is not None:  # drained: its lake catches up while the next layers run
                    self.tiering.run_soon(n for name in gen for n in self.plan.table(name).lake_tables)
            ends = self._ends()
            log.info(
                "flow %s: until-idle pass in %.1fs",
                self.plan.flow,
                time.time() - began,
                extra={"flow": self.plan.flow},
            )
            if ends == previous:
                return
            previous = ends
        log.warning(
            "flow %s: still moving after %d until-idle passes (is a source still growing?); stopping",
            self.plan.flow,
            MAX_IDLE_PASSES,
            extra={"flow": self.plan.flow},
        )

    def _lost_server(self, exc: BaseException) -> TidehouseError | None:
        """The error for a run whose Connect server stopped answering or driver JVM ended, else None."""
        error = lost_server_error(exc)
        self.server_lost = error is not None
        return error

    def _stop_all(self) -> None:
        self.awake.set(self.queries)  # a stop waits for the trigger under way: end any wait for rows
        for name in reversed(list(self.queries)):
            try:
                self.queries[name].stop()
            except Exception as exc:  # noqa: BLE001 - stopping is best effort; checkpoints stay consistent
                log.warning(
                    "stopping the query of %s: %s", name, exc, extra={"flow": self.plan.flow, "table": name}
                )
        self.awake.clear(self.queries)
        if self.tiering is not None:
            self.tiering.stop(wait=True)
