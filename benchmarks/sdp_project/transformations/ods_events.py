"""ODS: land the raw JSON events as they arrive (a streaming table over the input directory)."""

from pyspark import pipelines as dp
from pyspark.sql import DataFrame

EVENT_SCHEMA = "user_id string, event_type string, item_id string, price double, ts timestamp"


@dp.table(name="ods_events", comment="Raw events, landed as they arrive.")
def ods_events() -> DataFrame:
    source = spark.conf.get("tidehouse.bench.input")  # noqa: F821 - `spark` is injected by spark-pipelines
    return spark.readStream.format("json").schema(EVENT_SCHEMA).load(source)  # noqa: F821
