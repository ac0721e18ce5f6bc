"""Spark's Python daemon for the materializer's tasks: the modules they run imported once, before it forks.

Spark starts a daemon per executor and worker environment (``python -m <spark.python.daemon.module> <worker
module>``) and forks a process from it for every Python worker it needs. With ``pyspark.daemon`` each forked
worker then imports what its task's pickled function names (:mod:`materializer.routing` and with it
pyiceberg, SQLAlchemy, numpy, pyarrow's modules, and PySpark's own worker modules, compiled from
``pyspark.zip`` every time since a zip holds no byte code). py-spy on the scale-out benchmark's executor put
those imports at 19% of its Python workers' samples (docs/architecture.md, "The executors' Python
workers"). This daemon imports :data:`TASK_MODULES` first and freezes them out of the garbage collector
(``gc.freeze()``: without it the workers' collections walk the inherited objects, copying the shared
pages, and the preload costs more CPU than it saves), so the workers it forks for ``pyspark.worker`` start
with them loaded; for any other worker module it preloads nothing and is ``pyspark.daemon``.

``spark.python.daemon.module: materializer.daemon`` is set by the façade on a cluster master
(:func:`materializer.sparkconf.spark_conf`); a Spark Connect server takes it as its own ``--conf``
(docs/operations.md).

Spark puts its ``pyspark.zip`` first on the workers' ``PYTHONPATH``, so they run the JVM's own PySpark. A zip
holds no byte code: every module is compiled again in every process that imports it (1.1 s of the preload's
3.5 s here). When a directory later on the path holds the same PySpark version (pip's ``pyspark`` package,
whose zip Spark's is), the daemon moves the zip behind it before it loads anything, and PySpark comes from
there with its cached byte code (:func:`runtime.spark.launcher.installed_pyspark_first`); otherwise the path
stays Spark's. (Started through ``tidehouse-python``, :mod:`runtime.spark.launcher`, the zip is gone already.)

Forking after these imports: none of them starts a Python thread (tested). The native threads they start,
jemalloc's background purger in Arrow and numpy's OpenBLAS pool, are handled by those libraries' at-fork
handlers, as in every process that forks after importing pyarrow or numpy (``multiprocessing``'s default on
Linux before Python 3.14).
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import time

from runtime.spark.launcher import installed_pyspark_first

# what the materializer's tasks unpickle and run, in the order their own imports would load them
TASK_MODULES = (
    "pyspark.worker",
    "pyspark.sql.pandas.serializers",
    "pyspark.sql.worker.plan_data_source_read",
    "runtime.spark.datasource",
    "runtime.spark.tiering",
    "runtime.lake.apply",
    "pyiceberg.catalog.sql",
    "pyiceberg.catalog.rest",
    "materializer.routing",
    "materializer.ingest",
)
TASK_WORKER = "pyspark.worker"
TASK_DAEMON = "materializer.daemon"  # spark.python.daemon.module's value (this module)
SPARK_DAEMON = True  # runtime.spark.worker_memory: the worker module is this process's argument


def preload(worker_module: str) -> tuple[str, ...]:
    """Import the modules the workers forked for ``worker_module`` will run; returns their names. An import
    that fails is raised: the daemon then fails to start and Spark reports its error with the task's."""
    if worker_module != TASK_WORKER:
        return ()
    for name in TASK_MODULES:
        importlib.import_module(name)
    return TASK_MODULES


def worker_module(argv: list[str]) -> str:
    """The worker module Spark named for this daemon (``pyspark.worker`` when it named none)."""
    return argv[1] if len(argv) > 1 else TASK_WORKER


def _origin(name: str) -> str:
    """Where module ``name`` was loaded from: the ``sys.path`` entry above its package."""
    where = getattr(sys.modules.get(name), "__file__", None)
    return os.path.dirname(os.path.dirname(where)) if where else "?"


def main(argv: list[str]) -> None:
    """Preload, freeze what is loaded, then serve Spark as ``pyspark.daemon`` does."""
    began = time.monotonic()
    sys.path[:] = installed_pyspark_first(sys.path)
    loaded = preload(worker_module(argv))
    gc.freeze()  # the forked workers' collections skip the preloaded objects (and leave their pages shared)
    if loaded:  # into the executor's stderr log: which daemon forks the task workers
        print(
            f"{TASK_DAEMON}: {len(loaded)} task modules loaded in {time.monotonic() - began:.2f} s before "
            f"forking {worker_module(argv)} workers (pyspark from {_origin('pyspark')})",
            file=sys.stderr,
            flush=True,
        )
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main(sys.argv)
