"""One SparkSession factory used everywhere (CLI, materializer, tests, benchmarks)."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Mapping

from runtime.errors import ErrorCode, TidehouseError

_LOCK = threading.Lock()
_DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.streaming.stopTimeout": "30s",
    "spark.scheduler.mode": "FAIR",
    "spark.driver.extraJavaOptions": "-Dlog4j2.level=ERROR",
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    "spark.python.worker.reuse": "true",
}


def get_spark(master: str = "local[*]", conf: Mapping[str, Any] | None = None, app_name: str = "tidehouse"):
    """Return the process's SparkSession, creating it on first use.

    ``PYSPARK_PYTHON`` is set to the running interpreter (Spark's Python workers time out otherwise), logs
    are quiet, and the ``tidehouse`` data source is registered.
    """
    with _LOCK:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        try:
            from pyspark.sql import SparkSession

            builder = SparkSession.builder.master(master).appName(app_name)
            for key, value in {**_DEFAULT_CONF, **{k: str(v) for k, v in (conf or {}).items()}}.items():
                builder = builder.config(key, value)
            spark = builder.getOrCreate()
        except Exception as exc:  # Java missing, bad master URL, port clash...
            raise TidehouseError(ErrorCode.SPARK_START, f"could not start Spark: {exc}",
                                 hint="check that Java 17 is installed and spark.master is right") from exc
        spark.sparkContext.setLogLevel("ERROR")
        _register_sources(spark)
        return spark


def _register_sources(spark) -> None:
    try:
        from runtime.spark.datasource import TidehouseDataSource
    except ImportError:  # the bridge is optional for callers that only run SQL
        return
    spark.dataSource.register(TidehouseDataSource)
