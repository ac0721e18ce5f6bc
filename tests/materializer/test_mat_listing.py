"""Flows over a source folder that Tidehouse lists (materializer.sources, runtime.spark.filesource) give the
rows Spark's file source gives: the same files, spelled the same in the checkpoint, read by the same readers;
a checkpoint goes on from one listing to the other."""

from __future__ import annotations

import json
import logging
import random
import shutil

import pytest

from runtime.spark.filesource import spark_uri

pytestmark = pytest.mark.spark

FLOW = """flow: testflow
trigger: 100ms
sources:
  clicks:
    format: json
    path: data/clicks
    schema: "user_id string NOT NULL, event_type string, item_id string, price double, ts timestamp"
layers:
  ods:
    clicks: {action: t_ingest, inputs: {raw: clicks}}
  dwd:
    clean: {action: t_clean, inputs: {events: ods.clicks}}
"""
# names Spark's listing keeps, and names it skips (a plain subfolder's files are not read either, but an
# --until-idle run over them is refused: test_mat_missing_source; both listings skip them: test_filesource)
ODD = ["a b.json", "é%41.json", "q#^`|.json", "z.json"]
GLOB = ["x[1].json", "y{a,b}.json", "w*?.json"]  # names Spark's reader would take for patterns
SKIPPED = ["_tmp.json", ".part.json", "d.json._COPYING_", "_x/e.json", "_x/sub/f.json"]


def _lines(rng: random.Random, n: int, bad: bool) -> list[str]:
    from tests.materializer._flowkit import make_events

    return make_events(rng, n, bad=1 if bad else 0)


def _put(folder, name: str, lines: list[str]) -> None:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _set(project_dir, key: str, value) -> None:
    with (project_dir / "tidehouse.yaml").open("a") as f:
        f.write(f"  {key}: {json.dumps(value)}\n")


def _tables(project) -> tuple:
    from tests.materializer._flowkit import canon

    quarantine = project.store.scan("ods.clicks__quarantine").to_pylist()
    return (
        canon(project.store.scan("ods.clicks")),
        canon(project.store.scan("dwd.clean")),
        sorted((q["raw"], q["reason"]) for q in quarantine),
    )


def test_paths_are_spelled_in_the_log_as_sparks_file_source_spells_them(spark, tmp_path):
    """The log entries are what Spark's own source writes, so a checkpoint can go from one to the other: the
    paths of odd names, checked against Spark's log of the same folder."""
    folder = tmp_path / "in"
    names = [*ODD, *GLOB, "nb\u00a0sp.json", "é 😀.json", "sub/c.json"]
    for name in names:
        _put(folder, name, ["x"])
    query = (
        spark.readStream.format("text")
        .load(str(folder))
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start()
    )
    query.processAllAvailable()
    query.stop()
    lines = (tmp_path / "cp" / "sources" / "0" / "0").read_text(encoding="utf-8").splitlines()
    sparks = sorted(json.loads(line)["path"] for line in lines[1:])
    assert sparks == sorted(spark_uri(str(folder / n)) for n in names if "/" not in n)


def test_a_flow_gives_the_same_rows_with_either_listing(spark, project_dir, data_path, seed, caplog):
    """Odd file names, files and a folder Spark skips, and a malformed record (so Spark, not the Arrow
    reader, parses that batch, from the paths in the log): Tidehouse's listing and Spark's file source write
    the same tables and quarantine."""
    from runtime.project import Project
    from tests.materializer._flowkit import ACTIONS, write_project

    rng = random.Random(seed)
    path = write_project(
        project_dir, flow=FLOW, actions={k: ACTIONS[k] for k in ("t_ingest.sql", "t_clean.sql")}
    )
    folder = project_dir / "data" / "clicks"
    for name in ODD:
        _put(folder, name, _lines(rng, 5, bad=False))
    for name in SKIPPED:
        _put(folder, name, ['{"user_id": "skipped"}'])
    caplog.set_level(logging.INFO, logger="materializer.sources")
    # Tidehouse lists: the odd names (Arrow parses that batch), then a file with a malformed record (Spark)
    project = Project.open()
    project.trigger(path, until_idle=True, spark=spark)
    assert project.store.scan("ods.clicks").num_rows == 20
    _put(folder, "later.json", _lines(rng, 5, bad=True))
    report = project.trigger(path, until_idle=True, spark=spark)
    assert report.tables["ods.clicks"]["source_batches"] == {"spark": 1}
    listed = _tables(project)
    project.close()
    assert any("Tidehouse lists the source folder" in r.getMessage() for r in caplog.records)
    # Spark's file source lists the same folder into rebuilt tables
    caplog.clear()
    _set(project_dir, "list_sources", False)
    project = Project.open()
    project.trigger(path, until_idle=True, spark=spark, full_refresh=("ods.clicks", "dwd.clean"))
    sparks = _tables(project)
    project.close()
    assert any("materializer.list_sources is false" in r.getMessage() for r in caplog.records)
    assert listed == sparks
    log, _, quarantined = listed
    assert sum(log.values()) == 25 and len(quarantined) == 1
    assert "skipped" not in json.dumps([list(k) for k in log])


def test_files_named_like_patterns_are_read_once_by_spark(spark, project_dir, data_path, seed):
    """A batch Spark parses (a malformed record in it) whose files have glob characters in their names: each
    record once. (Spark 4.3's own file source reads the batch's other files again for each such name:
    SPARK-58518, docs/architecture.md.)"""
    from runtime.project import Project
    from tests.materializer._flowkit import ACTIONS, write_project

    rng = random.Random(seed)
    path = write_project(
        project_dir, flow=FLOW, actions={k: ACTIONS[k] for k in ("t_ingest.sql", "t_clean.sql")}
    )
    folder = project_dir / "data" / "clicks"
    for name in [*GLOB, "plain.json"]:
        _put(folder, name, _lines(rng, 4, bad=False))
    _put(folder, "bad.json", _lines(rng, 4, bad=True))
    project = Project.open()
    report = project.trigger(path, until_idle=True, spark=spark)
    assert report.tables["ods.clicks"]["source_batches"] == {"spark": 1}
    assert project.store.scan("ods.clicks").num_rows == 20
    assert project.store.scan("ods.clicks__quarantine").num_rows == 1
    project.close()


def test_files_named_like_patterns_are_read_once_over_sparks_listing(
    spark, project_dir, data_path, seed, caplog
):
    """The same batch with Spark's file source listing the folder: Spark's source would read the batch's
    other files once more per such name (SPARK-58518); Tidehouse reads that batch's files by name."""
    from runtime.project import Project
    from tests.materializer._flowkit import ACTIONS, write_project

    rng = random.Random(seed)
    path = write_project(
        project_dir, flow=FLOW, actions={k: ACTIONS[k] for k in ("t_ingest.sql", "t_clean.sql")}
    )
    _set(project_dir, "list_sources", False)
    folder = project_dir / "data" / "clicks"
    for name in [*GLOB, "plain.json"]:
        _put(folder, name, _lines(rng, 4, bad=False))
    _put(folder, "bad.json", _lines(rng, 4, bad=True))
    project = Project.open()
    with caplog.at_level(logging.INFO, logger="materializer.sources"):
        report = project.trigger(path, until_idle=True, spark=spark)
    assert report.tables["ods.clicks"]["source_batches"] == {"spark": 1}
    assert project.store.scan("ods.clicks").num_rows == 20
    assert project.store.scan("ods.clicks__quarantine").num_rows == 1
    assert any("materializer.list_sources is false" in r.getMessage() for r in caplog.records)
    assert any("Spark reads batch 0 by file names" in r.getMessage() for r in caplog.records)
    project.close()


def test_a_pattern_name_spark_would_misread_and_tidehouse_cannot_read_is_an_error(spark, project_dir, seed):
    """Over Spark's listing of a folder with key=value folders (whose partition columns only Spark's
    streaming source adds), a batch with a file named like a pattern fails naming it — no rows read twice."""
    from runtime.core.errors import ErrorCode, TidehouseError
    from runtime.project import Project
    from tests.materializer._flowkit import ACTIONS, write_project

    rng = random.Random(seed)
    path = write_project(
        project_dir, flow=FLOW, actions={k: ACTIONS[k] for k in ("t_ingest.sql", "t_clean.sql")}
    )
    day = project_dir / "data" / "clicks" / "day=1"
    _put(day, "a.json", _lines(rng, 3, bad=False))
    _put(day, "x[1].json", _lines(rng, 3, bad=True))  # a malformed record: Spark parses the batch
    project = Project.open()
    try:
        with pytest.raises(TidehouseError) as err:
            project.trigger(path, until_idle=True, spark=spark)
        assert err.value.code is ErrorCode.SOURCE_INVALID, err.value.render()
        assert str(day / "x[1].json") in err.value.message and "SPARK-58518" in err.value.message
        assert "key=value folders" in err.value.message and "rename the file" in err.value.render()
        assert not project.store.has_table("ods.clicks") or project.store.scan("ods.clicks").num_rows == 0
    finally:
        project.close()
        shutil.rmtree(project_dir / "data")


def test_a_checkpoint_goes_on_from_sparks_listing_to_tidehouses_and_back(spark, project_dir, seed):
    """Run 1 lists with Spark, run 2 with Tidehouse, run 3 with Spark again, a new file before each: every
    record is in ODS once (each listing takes the other's log as the files already admitted)."""
    from runtime.project import Project
    from tests.materializer._flowkit import ACTIONS, write_project

    rng = random.Random(seed)
    path = write_project(
        project_dir, flow=FLOW, actions={k: ACTIONS[k] for k in ("t_ingest.sql", "t_clean.sql")}
    )
    folder = project_dir / "data" / "clicks"
    written = 0
    for run, listing in enumerate((False, True, False, True)):
        (project_dir / "tidehouse.yaml").write_text(f"materializer:\n  list_sources: {json.dumps(listing)}\n")
        _put(folder, f"run{run}.json", _lines(rng, 4 + run, bad=False))
        written += 4 + run
        project = Project.open()
        project.trigger(path, until_idle=True, spark=spark)
        assert project.store.scan("ods.clicks").num_rows == written, (run, listing)
        project.close()


def test_a_folder_with_partition_folders_is_listed_by_spark(spark, project_dir, seed, caplog):
    """Spark adds a key=value folder's partition columns: such a folder stays with Spark's file source."""
    from runtime.project import Project
    from tests.materializer._flowkit import ACTIONS, write_project

    rng = random.Random(seed)
    path = write_project(
        project_dir, flow=FLOW, actions={k: ACTIONS[k] for k in ("t_ingest.sql", "t_clean.sql")}
    )
    _put(project_dir / "data" / "clicks" / "day=1", "a.json", _lines(rng, 3, bad=False))
    with caplog.at_level(logging.INFO, logger="materializer.sources"):
        project = Project.open()
        project.trigger(path, until_idle=True, spark=spark)
    assert any("key=value folders" in r.getMessage() for r in caplog.records)
    assert project.store.scan("ods.clicks").num_rows == 3
    project.close()
    shutil.rmtree(project_dir / "data")


def test_sparks_listing_goes_on_after_tidehouses_compacted_its_log(spark, project_dir, home, seed):
    """One file per micro-batch (maxFilesPerTrigger: 1), 12 files: Tidehouse's log reaches a compaction
    (batch 9 is ``9.compact`` only, as Spark writes it); Spark's file source then restores from it and reads
    only the file that came after, and Tidehouse's listing again after Spark's."""
    from runtime.project import Project
    from tests.materializer._flowkit import ACTIONS, write_project

    rng = random.Random(seed)
    flow = FLOW.replace(
        "    path: data/clicks\n", "    path: data/clicks\n    options: {maxFilesPerTrigger: 1}\n"
    )
    path = write_project(
        project_dir, flow=flow, actions={k: ACTIONS[k] for k in ("t_ingest.sql", "t_clean.sql")}
    )
    folder = project_dir / "data" / "clicks"
    for i in range(12):
        _put(folder, f"f{i:02d}.json", _lines(rng, 2, bad=False))
    written = 24
    for run, listing in enumerate((True, False, True)):
        (project_dir / "tidehouse.yaml").write_text(f"materializer:\n  list_sources: {json.dumps(listing)}\n")
        if run:
            _put(folder, f"run{run}.json", _lines(rng, 3, bad=False))
            written += 3
        project = Project.open()
        report = project.trigger(path, until_idle=True, spark=spark)
        assert project.store.scan("ods.clicks").num_rows == written, (run, listing)
        assert report.tables["ods.clicks"]["batches"] == (12 if run == 0 else 1)
        project.close()
    logs = {p.name for p in home.glob("checkpoints/**/ods.clicks/*/sources/0/*")}
    assert "9.compact" in logs and "9" not in logs, sorted(logs)
