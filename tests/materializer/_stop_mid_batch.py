"""Run by test_mat_stop_mid_batch.py in its own process (so the JVM's stderr is this process's): a query
whose batch function (wrapped by ``guarded``, as the runner wraps every table's) is in a long Spark job when
the query is stopped. Prints the query's exception, the table's error and the log lines of the batch."""

from __future__ import annotations

import logging
import sys
import threading
import time
from types import SimpleNamespace

from pyspark.sql import SparkSession

from materializer.guard import guarded
from materializer.strategies import TableStats
from materializer.telemetry import PhaseClock

logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="LOG %(levelname)s %(message)s")
spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("OFF")
started = threading.Event()


def long_job(batch_df, batch_id) -> None:
    started.set()
    spark.range(10**11).selectExpr("sum(id % 7)").collect()  # minutes: the stop interrupts it


ctx = SimpleNamespace(
    stats=TableStats(),
    clock=PhaseClock(),
    handoff=None,
    flow=SimpleNamespace(flow="f"),
    table=SimpleNamespace(name="dwd.t", checkpoint=None),
)
query = spark.readStream.format("rate").load().writeStream.foreachBatch(guarded(long_job, ctx)).start()
if not started.wait(120):
    sys.exit("the batch never started")
time.sleep(2)  # inside the job
query.stop()
time.sleep(1)  # the stream thread's end reaches stderr
print(f"EXCEPTION {query.exception()}", flush=True)
print(f"ERROR {ctx.stats.error}", flush=True)
spark.stop()
