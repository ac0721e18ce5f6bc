"""End to end: a 4-layer flow run --until-idle equals a batch oracle, hot and lake, and again with more
input."""

from __future__ import annotations

import random

import pytest

from tests.materializer._flowkit import canon, make_events, oracle, write_batch

pytestmark = pytest.mark.spark

TABLES = ["ods.clicks", "dwd.clicks", "dws.user_activity", "ads.low_users", "ads.top_users"]


def check_against_oracle(project, lines):
    expected = oracle(lines)
    store, lake = project.store, project.lake
    for table in TABLES:
        hot = canon(store.scan(table))
        assert hot == expected[table], f"hot {table}"
        lake_rows = canon(lake.load(table).scan().to_arrow())
        assert lake_rows == expected[table], f"lake {table}"
    assert store.scan("ods.clicks").num_rows == sum(expected["ods.clicks"].values())
    assert sum(store.end_offsets("ods.clicks__quarantine")) == expected["ods.clicks__quarantine"]


def test_until_idle_equals_oracle_and_resumes(spark, project_dir, data_path, test_flow, seed):
    from runtime.project import Project

    rng = random.Random(seed)
    first = make_events(rng, 60)
    write_batch(project_dir, "part-0", first)
    project = Project.open()
    assert project.config.get("materializer.data_path") == data_path
    report = project.trigger(test_flow, until_idle=True, spark=spark)
    assert report.tables["ods.clicks"]["quarantined"] == 2
    # the driver path's Arrow reader hands a batch with malformed records to Spark (materializer.jsonlines)
    readers = {"driver": {"spark": 1}, "executors": {"spark": 1}}
    assert report.tables["ods.clicks"]["source_batches"] == readers[data_path]
    check_against_oracle(project, first)
    ods_rows = project.store.scan("ods.clicks").num_rows
    assert ods_rows == sum(1 for line in first if not line.startswith("{this"))

    second = make_events(rng, 80, bad=0)
    write_batch(project_dir, "part-1", second)
    report = project.trigger("testflow", until_idle=True, spark=spark)
    assert report.tables["ods.clicks"]["source_batches"] == {"arrow": 1}  # well-formed: parsed by Arrow
    check_against_oracle(project, first + second)
    assert project.store.scan("ods.clicks").num_rows == sum(
        1 for line in first + second if not line.startswith("{this")
    )
    project.close()


def test_a_backlog_bigger_than_the_batch_cap_is_worked_off_in_several_batches(
    spark, project_dir, data_path, test_flow, seed
):
    """append and changelog queries bound each micro-batch by the cap of their data path —
    materializer.max_rows_per_batch on the driver path, materializer.executor_rows_per_batch on the
    executor path (the other cap is set far away to show it does not apply) — and the result is the same
    as in one batch."""
    from runtime.project import Project

    caps = {"driver": (7, 100_000), "executors": (100_000, 7)}[data_path]
    (project_dir / "tidehouse.yaml").write_text(
        f"materializer:\n  data_path: {data_path}\n  max_rows_per_batch: {caps[0]}\n"
        f"  executor_rows_per_batch: {caps[1]}\n"
    )
    lines = make_events(random.Random(seed), 60)
    write_batch(project_dir, "part-0", lines)
    project = Project.open()
    assert project.config.get("materializer.max_rows_per_batch") == caps[0]
    report = project.trigger(test_flow, until_idle=True, spark=spark)
    ods_rows = project.store.scan("ods.clicks").num_rows
    assert report.tables["ods.clicks"]["batches"] == 1  # a file source: not capped by this setting
    assert report.tables["dwd.clicks"]["batches"] >= -(-ods_rows // 7)
    check_against_oracle(project, lines)
    project.close()
