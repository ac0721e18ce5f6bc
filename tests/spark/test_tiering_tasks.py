"""Tiering on the executor data path: Spark tasks write a log table's lake data files, the driver commits
them (runtime.spark.tiering). The lake must equal what a cycle written by the driver makes, each hot offset
once; a range the driver cannot account for is an error, never a commit."""

from __future__ import annotations

import pytest

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.lake.state import lake_offsets
from runtime.lake.tiering import lake_table, tier_table
from runtime.spark.options import Place
from runtime.spark.tiering import SparkLakeFiles, pieces
from runtime.storage.api import TableMeta
from tests.lake._lakekit import CLICKS, clicks, rows_of

pytestmark = pytest.mark.spark


@pytest.fixture
def project(tmp_path, monkeypatch):
    from runtime.project import Project

    (tmp_path / "tidehouse.yaml").write_text("storage:\n  fsync: false\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TIDEHOUSE_HOME", raising=False)
    project = Project.open()
    for name in ("ods.by_tasks", "ods.by_driver"):
        project.store.create_table(TableMeta(name, CLICKS, buckets=3, bucket_key=("user_id",)))
    yield project
    project.close()


def _place(project) -> Place:
    return Place(project.config.storage_root, fsync=False, config=project.config)


def _lake(project, name: str):
    return project.lake.load(name).scan().to_arrow()


def test_pieces_cover_each_bucket_range_once():
    assert pieces([0, 5, 9], [7, 5, 10], 3) == [(0, 0, 3), (0, 3, 6), (0, 6, 7), (2, 9, 10)]
    assert pieces([4], [4], 3) == []


def test_tasks_write_the_lake_files_the_driver_would(spark, project):
    store = project.store
    files = SparkLakeFiles(spark, _place(project), min_rows=0, piece_rows=17)
    for seq, n in enumerate([60, 0, 45]):
        for name in ("ods.by_tasks", "ods.by_driver"):
            if n:
                store.write(name, clicks(n, start=1000 * seq), writer="w", seq=seq)
        by_tasks = tier_table(store, project.lake, "ods.by_tasks", files=files)
        by_driver = tier_table(store, project.lake, "ods.by_driver")
        assert (by_tasks.committed, by_tasks.rows) == (by_driver.committed, by_driver.rows) == (bool(n), n)
        assert by_tasks.offsets_after == by_driver.offsets_after
    lake = _lake(project, "ods.by_tasks")
    # the same rows and system columns (but the write time, __ts: each table was written on its own)
    assert rows_of(lake.drop_columns(["__ts"])) == rows_of(
        _lake(project, "ods.by_driver").drop_columns(["__ts"])
    )
    assert rows_of(lake.select(CLICKS.names)) == rows_of(store.scan("ods.by_tasks"))
    pairs = sorted(zip(lake.column("__bucket").to_pylist(), lake.column("__offset").to_pylist()))
    ends = store.end_offsets("ods.by_tasks")
    assert pairs == [(b, o) for b in range(3) for o in range(ends[b])]  # every hot offset once
    table = project.lake.load("ods.by_tasks")
    assert lake_offsets(table, 3)[0] == ends
    snapshot = table.current_snapshot()
    assert snapshot.summary["tidehouse.rows"] == "45"
    # pieces of at most 17 rows: more files than buckets, each naming one bucket
    paths = [t.file for t in table.scan().plan_files()]
    assert len(paths) > 3
    assert all(f.record_count <= 17 for f in paths)


def test_a_small_range_is_left_to_the_driver(spark, project):
    store = project.store
    store.write("ods.by_tasks", clicks(30), writer="w", seq=0)
    files = SparkLakeFiles(spark, _place(project), min_rows=31)
    meta = store.get_table("ods.by_tasks")
    assert files(meta, lake_table(project.lake, meta), [0, 0, 0], store.end_offsets(meta.name)) is None
    store.write("ods.by_tasks", clicks(1, start=99), writer="w", seq=1)
    result = tier_table(store, project.lake, "ods.by_tasks", files=files)
    assert result.rows == 31 and rows_of(_lake(project, "ods.by_tasks").select(CLICKS.names)) == rows_of(
        store.scan("ods.by_tasks")
    )


def test_files_the_driver_cannot_read_or_count_are_never_committed(spark, project):
    store = project.store
    store.write("ods.by_tasks", clicks(40), writer="w", seq=0)
    tasks = SparkLakeFiles(spark, _place(project), min_rows=0, piece_rows=10)

    def one_lost(meta, table, start, end):
        written = tasks(meta, table, start, end)
        project.lake.load(meta.name).io.delete(written[0].file_path)
        return written

    def one_missing(meta, table, start, end):
        return tasks(meta, table, start, end)[1:]

    for files, code in ((one_lost, ErrorCode.LAKE_CATALOG), (one_missing, ErrorCode.STORAGE_CORRUPT)):
        with pytest.raises(TidehouseError) as caught:
            tier_table(store, project.lake, "ods.by_tasks", files=files)
        assert caught.value.code == code, caught.value
        assert project.lake.load("ods.by_tasks").current_snapshot() is None  # nothing committed
    result = tier_table(store, project.lake, "ods.by_tasks", files=tasks)  # the next cycle: the whole range
    assert result.rows == 40 and rows_of(_lake(project, "ods.by_tasks").select(CLICKS.names)) == rows_of(
        store.scan("ods.by_tasks")
    )
