"""A source Spark cannot make a stream of is refused when the flow is planned (validate, plan, trigger), at
its line in the flow file. A mistyped format with a declared schema passed `flow validate` and failed `flow
trigger` with an internal error (TH900, exit 1) and a 170-line Java stack; a connector whose jars are not on
the class path (kafka) was told to declare a schema."""

from __future__ import annotations

import pytest

from tests.materializer._flowkit import ACTIONS, write_project

FLOW = """\
flow: formats
sources:
  clicks:
    format: {fmt}
{more}layers:
  ods:
    clicks: {{action: t_ingest, inputs: {{raw: clicks}}}}
"""


def _refusal(spark, project_dir, fmt: str, more: str = ""):
    from runtime.core.errors import TidehouseError
    from runtime.project import Project

    path = write_project(
        project_dir, FLOW.format(fmt=fmt, more=more), {"t_ingest.sql": ACTIONS["t_ingest.sql"]}
    )
    project = Project.open()
    try:
        with pytest.raises(TidehouseError) as info:
            project.plan(path, spark=spark)
    finally:
        project.close()
    error = info.value
    assert error.code.value == "TH404" and error.location.file == str(path)
    return error


@pytest.mark.spark
def test_a_format_spark_has_no_source_for_is_refused_at_its_line(spark, project_dir):
    error = _refusal(spark, project_dir, "jsn", '    path: data/clicks\n    schema: "user_id string"\n')
    assert (error.location.line, error.location.col, error.location.path) == (4, 13, "sources.clicks.format")
    assert error.message.startswith(
        "source clicks: Spark has no source of format 'jsn': [DATA_SOURCE_NOT_FOUND] Failed to find the data "
        "source: jsn."
    )
    assert error.hint == "did you mean 'json'?"
    # Kafka's connector is not in pip's pyspark: its jars go on the class path, a schema would not help
    error = _refusal(
        spark, project_dir, "kafka", "    options: {subscribe: t, kafka.bootstrap.servers: 'h:1'}\n"
    )
    assert error.location.path == "sources.clicks.format"
    assert "[KAFKA_DATA_SOURCE_NOT_ENABLED]" in error.message and "spark.jars" in error.hint


@pytest.mark.spark
def test_what_spark_says_of_a_source_it_cannot_read_is_the_error(spark, project_dir):
    error = _refusal(spark, project_dir, "rate", '    schema: "value bigint"\n')
    assert (error.location.line, error.location.path) == (4, "sources.clicks")
    assert error.message == (
        "source clicks: Spark cannot read format 'rate' with the declared schema and these options: "
        "UnsupportedOperationException: RateStreamProvider source does not support user-specified schema."
    )
    error = _refusal(spark, project_dir, "parquet", "    path: data/nope\n")  # no schema to infer from
    assert error.message.startswith("source clicks: Spark cannot read format 'parquet' without a schema: ")
    assert error.hint == "declare the source's schema: as a Spark DDL string"
