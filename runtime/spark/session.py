"""One SparkSession factory used everywhere (CLI, materializer, tests, benchmarks).

Defaults are tuned for hot latency on a small machine (2 cores): 2 shuffle partitions, no UI, Python workers
reused across tasks (a fresh worker costs seconds), a short polling delay for 0-interval triggers, and no
empty micro-batches. Logs are quiet from the first line: a log4j2 configuration is handed to the driver JVM
when it starts (``setLogLevel`` would come after the start-up WARN lines). Given a log folder (the project's
``<home>/logs``), Spark's WARN and above go to ``spark.log`` there (rolled at 10 MB, 5 kept) and nothing to
the terminal; without one, the terminal shows ERROR and above. The project file's ``spark.master`` and
``spark.conf`` override any default (a ``log4j2.configurationFile`` in ``spark.driver.extraJavaOptions``
wins). The driver JVM runs the serial collector, whose heap stays near its live data (G1's grows to the
heap's limit); a project's ``spark.driver.extraJavaOptions`` replaces that default. On a cluster master the
driver compiles with C1 only and the executors leave C2 for their hottest code (``CLUSTER_*_JAVA_OPTIONS``).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import re
import signal
import sys
import tempfile
import threading
import time
import warnings
import weakref
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.core.settings import default
from runtime.spark.classarchive import driver_options, dump_when_started
from runtime.spark.gateway import driver_ended, launch
from runtime.spark.launcher import LAUNCHER, spark_python
from runtime.spark.masters import connect_unreachable, unreachable
from runtime.spark.prefork import ENV as PREFORK_ENV
from runtime.spark.prefork import serve_this_driver
from runtime.spark.reasons import java_cause, java_summary

_LOCK = threading.Lock()
DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.streaming.stopTimeout": "30s",
    "spark.scheduler.mode": "FAIR",
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    "spark.python.worker.reuse": "true",
    # a 0-interval trigger with no new data sleeps this long before asking the sources again. Each poll of a
    # tidehouse source costs ~0.5 ms of CPU (JVM -> Python runner -> end_offsets): measured idle cost per
    # query 0.15 cores at 5ms, 0.05 at 50ms. 20ms adds ~10 ms mean latency and leaves the cores to the
    # other layers' queries.
    "spark.sql.streaming.pollingDelay": "20ms",
    # how long a Python worker may take to connect back to the JVM (Spark's default, 15 s, is missed by a
    # loaded 2-core machine: "Python worker failed to connect back", a transient failure the runner restarts)
    "spark.python.authenticate.socketTimeout": "120s",
    # filters reach the tidehouse source (keyed reads read one bucket, lake scans skip files); Spark still
    # applies every filter itself
    "spark.sql.python.filterPushdown.enabled": "true",
    # stateful queries (aggregations into primary-key tables): few state partitions, cheap maintenance
    "spark.sql.streaming.stateStore.maintenanceInterval": "30s",
    "spark.sql.streaming.minBatchesToRetain": "20",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
    # no limit in bytes (INT_MAX turns the check off): with one, Spark measures the Arrow batch it is filling
    # after every row it passes to a Python worker (mapInArrow: the executor path's writes) — 14% of an
    # executor's CPU in a JFR profile of the vs_sdp backlog. Batches stay bounded by maxRecordsPerBatch.
    "spark.sql.execution.arrow.maxBytesPerBatch": "2147483647",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    # The driver JVM's collector. G1 (Java's default) grows its heap to keep collections rare: on the vs_sdp
    # benchmark it committed 480-830 MiB of the 1 GiB heap for ~100 MiB of live data, plus ~70 MiB of its own
    # bookkeeping; the serial collector sizes the heap to the live data (docs/operations.md, "Memory"), and a
    # young collection of this heap takes a few ms on one core. A project's own
    # spark.driver.extraJavaOptions replaces this value (tidehouse's log4j option is still added to it).
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC",
}
# The driver JVM's options on a cluster master, where it plans and schedules and tasks run elsewhere: the
# serial collector, and the C1 compiler only. C2's compilations of the planning code were half of the
# driver JVM's CPU on the vs_sdp backlog with one standalone worker (2M rows: 21.4 -> 11.9 CPU s, the run
# 26.4 -> 25.0 s); in local mode the driver JVM runs the tasks too, which need C2's code. A project's own
# spark.driver.extraJavaOptions replaces either default.
CLUSTER_DRIVER_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
# The executors' JVM options on a cluster master: C2 compiles a method after 100,000 calls (or 500,000 loop
# iterations) instead of Java's 5,000-15,000 (and 40,000 for loops). The per-row code of a task passes that in
# moments; what stays with C1 is the per-task and per-batch code (deserializing tasks, planning pieces), which
# C2 compiled at a cost of seconds it never paid back in a flow's first minutes: on the scale-out backlog with
# one worker the executor's C2 threads took 8.7-13.0 CPU s, with these 3.0-4.1, its task threads the same,
# the cluster's CPU 27.3-33.1 -> 24.9-25.4 s (docs/benchmarks.md, "Scale-out"). A project's own
# spark.executor.extraJavaOptions replaces this default.
CLUSTER_EXECUTOR_JAVA_OPTIONS = (
    "-XX:Tier4InvocationThreshold=100000 -XX:Tier4MinInvocationThreshold=50000 "
    "-XX:Tier4CompileThreshold=120000 -XX:Tier4BackEdgeThreshold=500000"
)
# Streaming checkpoints on a local disk (the embedded default). Spark's default checkpoint file manager goes
# through Hadoop's FileContext, whose local file system, without Hadoop's native library (pip's pyspark ships
# none), forks `chmod` and `readlink` for each offset-log and commit-log file: measured here ~50 ms per log
# write on an idle machine and ~100 ms on 2 busy cores, twice per micro-batch of every query. The FileSystem
# manager over the raw local file system writes the same files with a create and a rename (atomic on a local
# disk): ~8 ms.
_CHECKPOINT_MANAGERS = (  # the class moved between Spark versions; the first one the Spark jar holds is used
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager",
)
# Both: the trigger of a query that waits for rows (runtime.spark.idlewait) lasts longer than its interval by
# design, and Spark's processing-time trigger would warn "Current batch is falling behind" at each one.
_LOG4J2 = """\
# Root at WARN (what Spark's Python shell expects, so it prints no "Setting default log level" banner);
# the console shows ERROR and above only.
status = error
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = error
logger.trigger.name = org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor
logger.trigger.level = error
"""
# With a log folder: WARN and above into <folder>/spark.log, nothing on the terminal.
_LOG4J2_FILE = """\
status = error
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = {log}
appender.file.filePattern = {log}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yyyy-MM-dd HH:mm:ss.SSS}} %p %c{{1}}: %m%n%ex
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 10MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 5
logger.trigger.name = org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor
logger.trigger.level = error
"""
SPARK_LOG = "spark.log"


def _log4j_file(log_dir: str | os.PathLike | None = None) -> Path:
    """The log4j2 configuration the driver JVM starts with: Spark's log into ``log_dir/spark.log``, else ERROR
    and above on the terminal."""
    if log_dir is not None:
        folder = Path(log_dir).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        path, text = folder / "log4j2.properties", _LOG4J2_FILE.format(log=(folder / SPARK_LOG).as_posix())
    else:
        uid = os.getuid() if hasattr(os, "getuid") else 0
        path, text = Path(tempfile.gettempdir()) / f"tidehouse-log4j2-{uid}.properties", _LOG4J2
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return path


def spark_jars() -> Path:
    """The jars folder of the Spark the driver runs: ``$SPARK_HOME/jars``, else pip's pyspark's."""
    import pyspark

    return Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent) / "jars"


@functools.cache
def local_checkpoint_conf() -> dict[str, str]:
    """Settings for checkpoints on a local disk (see ``_CHECKPOINT_MANAGERS``); empty if this Spark has no
    FileSystem checkpoint manager under a known name."""
    for jar in sorted(spark_jars().glob("spark-sql_*.jar")):
        with zipfile.ZipFile(jar) as archive:
            names = set(archive.namelist())
        for cls in _CHECKPOINT_MANAGERS:
            if cls.replace(".", "/") + ".class" in names:
                return {
                    "spark.sql.streaming.checkpointFileManagerClass": cls,
                    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
                }
    return {}


def session_conf(
    master: str,
    conf: Mapping[str, Any] | None = None,
    log_dir: str | os.PathLike | None = None,
    *,
    class_archive: str = "off",
) -> dict[str, str]:
    """The full configuration ``get_spark`` starts Spark with: defaults, :func:`local_checkpoint_conf`
    (checkpoints are always on a local or mounted disk: ``checkpoints.root`` refuses other schemes), then the
    project's ``conf``; Spark's log goes to ``log_dir`` if given. ``class_archive``: ``make`` starts the
    driver JVM from the class archive of :mod:`runtime.spark.classarchive` or makes it, ``use`` only starts
    from one (a long-lived process, whose claim would hold for long), ``off`` neither."""
    merged = {**DEFAULT_CONF, **local_checkpoint_conf(), **{str(k): str(v) for k, v in (conf or {}).items()}}
    if not master.startswith("local"):  # a cluster: executors must reach the driver by its real address
        for key in ("spark.driver.host", "spark.driver.bindAddress"):
            if key not in (conf or {}):
                merged.pop(key, None)
        if "spark.driver.extraJavaOptions" not in (conf or {}):
            merged["spark.driver.extraJavaOptions"] = CLUSTER_DRIVER_JAVA_OPTIONS
        merged.setdefault("spark.executor.extraJavaOptions", CLUSTER_EXECUTOR_JAVA_OPTIONS)
    quiet = f"-Dlog4j2.configurationFile=file:{_log4j_file(log_dir)}"
    user_opts = merged.get("spark.driver.extraJavaOptions", "")
    archive = ""
    if class_archive in ("make", "use"):
        extra = merged.get("spark.driver.extraClassPath", "")
        archive = driver_options(spark_jars(), user_opts, extra, make=class_archive == "make")
    if "log4j2.configurationFile" not in user_opts:
        user_opts = f"{user_opts} {quiet}"
    merged["spark.driver.extraJavaOptions"] = f"{user_opts} {archive}".strip()
    return merged


def get_spark(
    master: str = default("spark.master"),
    conf: Mapping[str, Any] | None = None,
    app_name: str = "tidehouse",
    log_dir: str | os.PathLike | None = None,
    remote: str | None = None,
    class_archive: str = "make",
):
    """Return the process's SparkSession, creating it on first use.

    ``PYSPARK_PYTHON`` is set to the running interpreter (Spark's Python workers time out otherwise) when
    unset or naming it (by any name in its folder: ``python`` for the ``python3`` a console script runs),
    started through ``tidehouse-python`` when that is installed for it (:mod:`runtime.spark.launcher`:
    the workers then import PySpark with its byte code, not from Spark's zip); logs
    are quiet (into ``log_dir/spark.log`` when given), and the ``tidehouse`` data source is registered. A
    session that already runs is returned as it is (Spark has one per process). With ``remote`` (a Spark
    Connect URL) the session is a Connect client's (:func:`connect_session`). ``class_archive`` is
    :func:`session_conf`'s.
    """
    if log_dir is not None:
        _quiet_query_context_loggers()
    if remote:
        return connect_session(remote, conf)
    with _LOCK:
        os.environ["PYSPARK_PYTHON"] = spark_python(os.environ.get("PYSPARK_PYTHON"))  # PySpark compiled
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        if master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas.*")
        try:
            from pyspark import SparkContext
            from pyspark.sql import SparkSession

            if SparkContext._active_spark_context is not None:  # its JVM runs: no start, no archive to claim
                class_archive = "off"
            elif (why := unreachable(master)) is not None:  # before Spark's minute of registration retries
                raise TidehouseError(
                    ErrorCode.SPARK_START,
                    f"could not reach the Spark master {master}: {why}",
                    hint="start the standalone master (spark-class org.apache.spark.deploy.master.Master) or "
                    "set spark.master to one that runs",
                )
            options = {"spark.master": master, "spark.app.name": app_name}
            options.update(session_conf(master, conf, log_dir, class_archive=class_archive))
            started = SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ
            if not started and os.path.basename(os.environ["PYSPARK_PYTHON"]) == LAUNCHER:
                serve_this_driver()  # its Python runners fork from a process that imported PySpark once
            if log_dir is not None and not started:
                launch(options, log_dir)  # the JVM's own output into log_dir, not onto the terminal
            builder = SparkSession.builder
            for key, value in options.items():
                builder = builder.config(key, value)
            try:
                with _sigint_kept():
                    spark = builder.getOrCreate()
            finally:
                os.environ.pop(PREFORK_ENV, None)  # the JVM has it; the programs this process starts do not
        except TidehouseError:
            raise
        except Exception as exc:  # Java missing, bad master URL, port clash...
            where = f"; Spark's log: {Path(log_dir) / SPARK_LOG}" if log_dir is not None else ""
            raise TidehouseError(
                ErrorCode.SPARK_START,
                f"could not start Spark: {java_summary(str(exc))}",
                hint=f"check that Java 17 is installed and spark.master is right{where}",
            ) from exc
        try:  # the session state takes the spark.sql.* settings when first used: a refused one fails here
            spark.conf.get("spark.sql.session.timeZone")
        except Exception as exc:  # noqa: BLE001 - Spark's IllegalArgumentException, through Py4J
            raise TidehouseError(
                ErrorCode.CONFIG_INVALID,
                f"spark.conf: Spark refuses a setting: {java_cause(str(exc))}",
                hint="fix or remove it under spark.conf in the project file",
            ) from None
        if class_archive == "make":  # the archive this process claimed, dumped from its JVM now
            gateway = getattr(spark.sparkContext._gateway, "proc", None)
            dump_when_started(getattr(gateway, "pid", None))
        if log_dir is None:  # with a log file, WARN lines belong in it
            spark.sparkContext.setLogLevel("ERROR")
        _quiet_accumulator_server(spark.sparkContext)
        _register_sources(spark)
        return spark


def _quiet_query_context_loggers() -> None:
    """PySpark logs each error of Spark's that has a query context (``[DIVIDE_BY_ZERO]`` in an action's SQL)
    as a JSON line on stderr, by loggers of its own, before the error reaches its caller: the command reports
    that error itself (a batch's log line, the run's error, a failed test case), so these copies are off."""
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)


def _quiet_accumulator_server(sc) -> None:
    """PySpark's accumulator server prints a traceback (``EOFError``) when its connection from the driver JVM
    ends because the JVM ended: the run's own error says so (:func:`lost_server_error`). Other errors of the
    server print as before."""
    server = getattr(sc, "_accumulatorServer", None)
    if server is None or getattr(server, "_tidehouse_quiet", False):
        return
    default = server.handle_error

    def handle_error(request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], (EOFError, ConnectionError)):
            default(request, client_address)

    server.handle_error, server._tidehouse_quiet = handle_error, True


@contextlib.contextmanager
def _sigint_kept():
    """PySpark's SparkContext replaces the SIGINT handler with its own (cancel every job, raise
    KeyboardInterrupt). A handler the program installed itself (``flow trigger``'s graceful stop on Ctrl-C,
    which PySpark's turned into an abort with exit 130 and no final report) is put back; where Python's own
    handler was, PySpark's stays, as in any PySpark program."""
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGINT) if main else None
    try:
        yield
    finally:
        if before is not None and before is not signal.default_int_handler:
            signal.signal(signal.SIGINT, before)


def is_connect(session) -> bool:
    """Whether ``session`` is a Spark Connect client's (no JVM in this process)."""
    return getattr(session, "_jsparkSession", None) is None


def connect_session(url: str, conf: Mapping[str, Any] | None = None):
    """A Spark Connect session on ``url``, with the SQL settings tidehouse tunes (``DEFAULT_CONF``'s
    ``spark.sql.*``: the server's JVM settings are its own) and the project's ``conf``, each of which the
    server must accept: one it refuses (a static or unknown-to-the-server setting) is ``CONFIG_INVALID``."""
    with _LOCK:
        warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas.*")
        # a lost server is one TidehouseError (materializer.remote.lost_server_error), not these warnings
        warnings.filterwarnings("ignore", message=r".*\[RETRIES_EXCEEDED\].*")
        warnings.filterwarnings("ignore", message=".*StreamingQueryListenerBus Handler thread.*")
        warnings.filterwarnings("ignore", message=".*Failed to (add|remove) the listener.*")
        if (why := connect_unreachable(url)) is not None:  # before the client's minutes of retries
            raise TidehouseError(
                ErrorCode.SPARK_START,
                f"could not reach the Spark Connect server {url}: {why}",
                hint="check spark.remote and that the server runs (sbin/start-connect-server.sh)",
            )
        try:
            from pyspark.sql import SparkSession

            spark = SparkSession.builder.remote(url).getOrCreate()
            spark.version  # noqa: B018 - the first call reaches the server: an unreachable one fails here
        except Exception as exc:  # noqa: BLE001 - grpc's errors, the connect client's missing packages
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise TidehouseError(
                ErrorCode.SPARK_START,
                f"could not reach the Spark Connect server {url}: {first}",
                hint="check spark.remote, that the server runs (sbin/start-connect-server.sh), and that "
                "the connect extra is installed (pip install 'tidehouse[connect]')",
            ) from None
        ours = {k: v for k, v in DEFAULT_CONF.items() if k.startswith("spark.sql.")}
        for key, value in ours.items():
            with contextlib.suppress(Exception):  # a tuning default an older server lacks: its own value
                spark.conf.set(key, value)
        for key, value in (conf or {}).items():
            try:
                spark.conf.set(str(key), str(value))
            except Exception as exc:  # noqa: BLE001 - the server's refusal, as a Connect exception
                raise TidehouseError(
                    ErrorCode.CONFIG_INVALID,
                    f"spark.conf.{key}: the Spark Connect server {url} refuses it: "
                    f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                    hint="with spark.remote only session settings apply; set the server's own settings "
                    "where it starts (start-connect-server.sh --conf ...)",
                ) from None
        register_source(spark)
        _CONNECT_URLS.add(url)
        _remember(spark, {**ours, **{str(k): str(v) for k, v in (conf or {}).items()}})
        return spark


# Spark Connect sessions this process opened, stopped at exit: a session left to the garbage collector closes
# its gRPC channel in ``__del__`` during interpreter shutdown, which can wait forever (the process hangs
# after its work is done).
_CONNECT_SESSIONS: weakref.WeakSet = weakref.WeakSet()
_CONNECT_URLS: set[str] = set()  # the servers this process is a client of
_LOST = False  # server_lost() ran: this process closed its Connect sessions


# How many times a Spark Connect call is retried on an unreachable server: 6 backoffs of 50 ms x4 each, about
# 70 s in all (Spark's default, 15, waits 10 minutes before a run learns its server is gone).
CONNECT_RETRIES = 6


def _remember(session, conf: dict[str, str]) -> None:
    from pyspark.sql.connect.client.retries import DefaultPolicy

    session._tidehouse_conf = conf  # what a newSession() must set again: it starts from the server's defaults
    session.client.set_retry_policies([DefaultPolicy(max_retries=CONNECT_RETRIES)])
    if not _CONNECT_SESSIONS:
        atexit.register(_stop_connect_sessions)
    _CONNECT_SESSIONS.add(session)


def stop_session(session) -> None:
    """Release a Spark Connect session made by :func:`new_session` (the server drops its state); a
    classic session is left alone (it shares the process's SparkContext)."""
    if is_connect(session):
        if not session.is_stopped:  # a second close would wait again for calls in flight
            with contextlib.suppress(Exception):  # best effort: the server may be gone
                session.stop()
        _CONNECT_SESSIONS.discard(session)


_CLOSED = ("NO_ACTIVE_SESSION", "Channel closed", "closed channel")


def lost_server_error(exc: BaseException) -> TidehouseError | None:
    """The error for a call whose Spark Connect server stopped answering (the client's retries, about
    70 s, ran out), or whose driver JVM (this process's Py4J server) ended, or None when ``exc`` is
    something else: a failed query, or a Connect error of a process that is no Connect client."""
    chain: list[BaseException] = []
    while exc is not None and exc not in chain:  # the cause of e.g. a query that could not start
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    # a dying JVM closes its sockets before its parent can see it exit: give a refused call a moment
    ended = driver_ended(wait=5.0 if any(_gateway_refused(e) for e in chain) else 0.0)
    if ended is not None:  # killed (the kernel's out-of-memory killer sends signal 9) or crashed
        return TidehouseError(
            ErrorCode.SPARK_START,
            f"Spark's driver JVM ended during the run ({ended})",
            hint="signal 9 without a kill of your own is most often the kernel's out-of-memory killer "
            "(dmesg): give the driver more memory or smaller batches (spark.driver.memory, "
            "materializer.max_rows_per_batch); the next `tidehouse flow trigger` resumes every query from "
            "its checkpoint",
        )
    text = "\n".join(str(e) for e in chain)
    unreachable = any(mark in text for mark in ("UNAVAILABLE", "Connection refused"))
    # a call after server_lost() closed the sessions: a new one, or one in flight whose gRPC channel closed
    closed = _LOST and any(mark in text for mark in _CLOSED)
    if not _CONNECT_URLS or not (unreachable or closed):
        return None
    detail = re.search(r'details = "([^"]*)"', text)
    if detail:
        reason = detail.group(1)
    elif unreachable:
        reason = text.splitlines()[0]
    else:
        reason = "it stopped answering and this process closed its sessions there"
    return TidehouseError(
        ErrorCode.SPARK_START,
        f"lost the Spark Connect server {', '.join(sorted(_CONNECT_URLS))}: {reason}",
        hint="start the server again; the next `tidehouse flow trigger` resumes every query from its "
        "checkpoint (a batch the server was writing is written once)",
    )


def _gateway_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is a call to the driver JVM that found no one answering: py4j's network error, its
    Py4JError itself (not its Py4JJavaError: the JVM sent no answer, so no Java exception), or a refused
    connection raised in py4j (not a catalog's)."""
    if type(exc).__name__ in ("Py4JNetworkError", "Py4JError"):
        return True
    return "Answer from Java side is empty" in str(exc) or (
        isinstance(exc, ConnectionError) and _through_py4j(exc)
    )


def _through_py4j(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if "py4j" in Path(tb.tb_frame.f_code.co_filename).parts:
            return True
        tb = tb.tb_next
    return False


def server_lost() -> None:
    """The Spark Connect server is gone: this process's sessions close without asking it to release them
    (each request would wait out its retries), all at once (a close may wait 10 s for calls in flight). A
    call still in flight elsewhere (a tiering cycle) then fails with ``NO_ACTIVE_SESSION``, or with gRPC's
    closed channel, which :func:`lost_server_error` reads as the lost server too."""
    global _LOST
    _LOST = True
    sessions = list(_CONNECT_SESSIONS)
    for session in sessions:
        session.release_session_on_close = False
    _stop_connect_sessions()


def _stop_connect_sessions() -> None:
    threads = [
        threading.Thread(target=stop_session, args=(session,), daemon=True)
        for session in list(_CONNECT_SESSIONS)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 15
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))


def _register_sources(spark) -> None:
    register_source(spark)


def new_session(spark):
    """A session of its own (its temp views never clash with another query's) that knows ``tidehouse``."""
    session = spark.newSession()
    if is_connect(spark):  # a Connect newSession() starts from the server's defaults, not this session's
        conf = getattr(spark, "_tidehouse_conf", {})
        for key, value in conf.items():
            session.conf.set(key, value)
        _remember(session, conf)
    register_source(session)
    return session


def register_source(session, config=None) -> None:
    """Register the ``tidehouse`` data source with ``session`` (bound to a project's ``config`` when given:
    its home and project directory become the source's default options), and check it can be found there;
    on a classic session also ``tidehouse_files``, the listing of flow sources' folders
    (:mod:`runtime.spark.filesource`).

    ``session.dataSource.register`` cannot do it for a session made by ``newSession()``: Spark checks
    for an existing source in the *active* session (which has it, and refuses with
    ``DATA_SOURCE_ALREADY_EXISTS``) but looks sources up in the session's own registry (which lacks it, so a
    query built there fails with ``DATA_SOURCE_NOT_FOUND``). So the source goes into the session's own
    registry directly.
    """
    from runtime.spark.datasource import TidehouseDataSource
    from runtime.spark.filesource import NAME as FILES
    from runtime.spark.filesource import FolderSource
    from runtime.spark.options import NAME

    source_cls = (
        TidehouseDataSource
        if config is None
        else TidehouseDataSource.bound(str(config.home), str(config.project_dir))
    )
    if is_connect(session):  # Spark Connect: registration is per session on the server
        session.dataSource.register(source_cls)
        return
    jsession = session._jsparkSession
    manager = jsession.sessionState().dataSourceManager()
    _register(session, manager, NAME, source_cls, again=config is not None)
    _register(session, manager, FILES, FolderSource)  # flow sources Tidehouse lists (classic sessions)


def _register(session, manager, name: str, source_cls, *, again: bool = False) -> None:
    """Put a Python data source into ``session``'s own registry (``again``: even when one is there)."""
    if again or not manager.dataSourceExists(name):
        from pyspark.sql.udf import _wrap_function

        source = (
            session._jvm.org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource(
                _wrap_function(session.sparkContext, source_cls)
            )
        )
        manager.registerDataSource(name, source)
    if not manager.dataSourceExists(name):
        raise TidehouseError(
            ErrorCode.SPARK_START,
            f"the {name} data source could not be registered with a Spark session",
            hint="report this with your Spark version (tidehouse info)",
        )
