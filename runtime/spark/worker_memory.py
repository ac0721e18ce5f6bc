"""Spark's data-source processes run without pandas.

pyarrow imports pandas (installed, as PySpark requires) as soon as it converts a Python value: ``pa.array``
and ``pa.table`` ask whether the value is a pandas object, and Arrow's C++ sequence converter imports pandas
for its null and timestamp types. That costs ~55 MiB of resident memory per process (pandas' extension
modules; measured in docs/operations.md, "Memory"). Spark runs the ``tidehouse`` data source's methods in
Python processes of their own: one ``python_streaming_source_runner`` per streaming query that reads it, and
pooled workers that look sources up, create them, push filters down and plan reads. Those processes run this
package's data-source code and nothing else (no user action, no UDF), and that code never uses pandas, so
:func:`keep_pandas_out` makes pandas unimportable there: pyarrow then works without it, and anything that did
need pandas would fail with an ImportError naming this module instead of loading it.

Spark's task workers (``pyspark.worker``: reads of the source's partitions, ``mapInArrow``, user actions)
are left alone: user code there may use pandas.
"""

from __future__ import annotations

import importlib.abc
import sys

# The Python modules Spark starts (``python -m <module>``, or ``python -m pyspark.daemon <module>`` for a
# worker its daemon forks) that only call a data source's own methods.
SOURCE_PROCESSES = frozenset(
    {
        "pyspark.sql.streaming.python_streaming_source_runner",
        "pyspark.sql.worker.lookup_data_sources",
        "pyspark.sql.worker.create_data_source",
        "pyspark.sql.worker.data_source_pushdown_filters",
        "pyspark.sql.worker.plan_data_source_read",
    }
)


def spark_worker_module() -> str | None:
    """The Spark worker module this process runs (``pyspark.worker``, ``pyspark.sql.worker....``), or None
    when it was not started as one (the driver, a test, the CLI)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    # a worker forked by Spark's daemon (or one set by spark.python.daemon.module that says it is one, as
    # materializer.daemon does): the daemon's argument names its module
    if name == "pyspark.daemon" or getattr(sys.modules.get("__main__"), "SPARK_DAEMON", False):
        return sys.argv[1] if len(sys.argv) > 1 else "pyspark.worker"
    return name


class _NoPandasFinder(importlib.abc.MetaPathFinder):
    """Refuses ``pandas`` and its submodules; first on ``sys.meta_path``."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "pandas":
            raise ModuleNotFoundError(
                f"{name} is not importable in Spark's {spark_worker_module()} process: tidehouse keeps "
                "pandas out of the data-source processes to save memory (runtime/spark/worker_memory.py)",
                name=name,
            )
        return None


def keep_pandas_out() -> bool:
    """In a data-source process (:data:`SOURCE_PROCESSES`) that has not imported pandas, make it
    unimportable for the rest of the process's life. Returns whether it did."""
    if spark_worker_module() not in SOURCE_PROCESSES:
        return False
    return refuse_pandas()


def refuse_pandas() -> bool:
    """Make pandas unimportable in this process unless it is imported already (also in a runner forked by
    the driver's fork server, runtime/spark/prefork.py). Returns whether it did."""
    if "pandas" in sys.modules:
        return False
    if not any(isinstance(finder, _NoPandasFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _NoPandasFinder())
    return True
