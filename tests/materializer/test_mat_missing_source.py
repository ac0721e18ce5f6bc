"""A flow source whose local folder does not exist (a mistyped path): an ``--until-idle`` run is refused
before Spark starts, at the source's ``path`` in the flow file — it created the folder, read nothing from it
and ended with exit 0 as if drained. A run without ``--until-idle`` creates the folder, says so in its log,
and reads the files that arrive there.

Files in a plain subfolder of a source folder are not read by a Spark file source (only those in
``key=value`` folders, or any with ``recursiveFileLookup``): an ``--until-idle`` run over such a folder ended
with exit 0 and their rows missing. It is refused the same way; a long-running run says so in its log."""

from __future__ import annotations

import logging
import random
import shutil

import pytest

from materializer.sources import missing_folder, unread_subfolders
from tests.materializer._flowkit import canon, make_events, oracle, write_batch


def test_only_a_local_folder_that_does_not_exist_is_missing(tmp_path):
    assert missing_folder(str(tmp_path / "nope"))
    assert missing_folder((tmp_path / "nope").as_uri()) and not missing_folder(tmp_path.as_uri())
    assert not missing_folder(str(tmp_path))
    assert not missing_folder(None) and not missing_folder("")
    assert not missing_folder(str(tmp_path / "*" / "events"))  # a glob pattern: Spark matches it
    assert not missing_folder("s3a://bucket/events")  # a URI: Spark's file system resolves it


def _refused_at_the_path(test_flow, run_cli, message: str) -> None:
    """``flow trigger --until-idle`` exits 2 with ``message`` at the source's ``path``, before it registered
    anything."""
    from runtime.project import Project

    line = test_flow.read_text().splitlines().index("    path: data/clicks") + 1
    code, out, err = run_cli("flow", "trigger", "flows/testflow.yaml", "--until-idle")
    assert code == 2, out + err
    assert err.startswith(f"error: flows/testflow.yaml:{line}:11: sources.clicks.path: {message}"), err
    assert err.rstrip().endswith("[TH404]") and "Traceback" not in err
    project = Project.open()
    try:
        assert project.registry.list_flows() == []
    finally:
        project.close()


def test_until_idle_over_a_missing_source_folder_is_refused_at_its_path(project_dir, test_flow, run_cli):
    folder = project_dir / "data" / "clicks"
    shutil.rmtree(folder)
    _refused_at_the_path(
        test_flow,
        run_cli,
        f"source clicks: the folder {folder} does not exist, so an --until-idle run would read nothing "
        "from it (",
    )
    assert not folder.exists()


def _file(path, text="{}\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_subfolders_whose_files_no_file_source_reads(tmp_path):
    root = tmp_path / "events"
    _file(root / "part-0.json")
    assert unread_subfolders(str(root), {}) == []
    (root / "empty" / "deeper").mkdir(parents=True)  # no file below it: nothing is missed
    _file(root / "only_hidden" / ".part-1.json")  # a name Spark's listing skips anyway
    _file(root / "dt=2026-11-30" / "part-2.json")  # a partition folder: Spark reads it
    _file(root / "_archive" / "part-3.json")  # a folder Spark's listing skips: kept out on purpose
    _file(root / ".git" / "HEAD")
    assert unread_subfolders(str(root), {}) == []
    _file(root / "day2" / "part-4.json")
    _file(root / "day1" / "hour0" / "part-5.json")
    assert unread_subfolders(str(root), {}) == ["day1", "day2"]
    assert unread_subfolders(root.as_uri(), {"recursiveFileLookup": "false"}) == ["day1", "day2"]
    assert unread_subfolders(str(root), {"RECURSIVEFILELOOKUP": "True"}) == []  # Spark's options: any case
    assert unread_subfolders(str(root / "*"), {}) == []  # a glob pattern: Spark matches it
    assert unread_subfolders("s3a://bucket/events", {}) == []
    assert unread_subfolders(str(tmp_path / "nope"), {}) == []  # missing_folder's case
    assert unread_subfolders(str(root / "part-0.json"), {}) == []


def test_until_idle_over_files_in_subfolders_is_refused_at_the_path(project_dir, test_flow, run_cli):
    folder = project_dir / "data" / "clicks"
    for day in ("2026-11-28", "2026-11-29", "2026-11-30", "2026-12-01", "2026-12-02"):
        _file(folder / day / "part-0.json")
    _refused_at_the_path(
        test_flow,
        run_cli,
        f"source clicks: the folder {folder} has subfolders whose files a Spark file source does not read "
        "(2026-11-28, 2026-11-29, 2026-11-30 and 2 more), so an --until-idle run would end without them (set "
        "the source's option recursiveFileLookup: true",
    )


def test_the_checks_before_spark_parse_the_flow_file_once(project_dir, test_flow, monkeypatch):
    """The lock's name, the --full-refresh selectors and the source folders all come from one parse."""
    import registry.specs
    from runtime.core.errors import TidehouseError
    from runtime.project import Project

    shutil.rmtree(project_dir / "data" / "clicks")
    parse, parsed = registry.specs.parse_flow, []
    monkeypatch.setattr(registry.specs, "parse_flow", lambda path: parsed.append(path) or parse(path))
    project = Project.open()
    try:
        with pytest.raises(TidehouseError, match="does not exist"):
            project.trigger(test_flow, until_idle=True, full_refresh=["layer:ads"])
    finally:
        project.close()
    assert parsed == [test_flow]


@pytest.mark.spark
def test_a_long_running_trigger_creates_the_folder_and_reads_what_arrives(
    spark, project_dir, test_flow, caplog, seed
):
    from runtime.project import Project

    folder = project_dir / "data" / "clicks"
    shutil.rmtree(folder)
    caplog.set_level(logging.WARNING, logger="materializer.sources")
    project = Project.open()
    try:
        project.trigger(test_flow, duration=1.0, spark=spark)
        assert folder.is_dir()
        [warned] = [r for r in caplog.records if "does not exist" in r.getMessage()]
        assert warned.table == "ods.clicks" and str(folder) in warned.getMessage()
        lines = make_events(random.Random(seed), 30)
        write_batch(project_dir, "part-0", lines)
        project.trigger("testflow", until_idle=True, spark=spark)
        for table, rows in oracle(lines).items():
            if not table.endswith("__quarantine"):
                assert canon(project.store.scan(table)) == rows, table
    finally:
        project.close()


@pytest.mark.spark
def test_a_long_running_query_over_files_in_subfolders_says_so(spark, project_dir, test_flow, caplog):
    from materializer.plan import SourcePlan
    from materializer.sources import source_stream
    from runtime.project import Project

    folder = project_dir / "data" / "clicks"
    _file(folder / "late" / "part-0.json")
    src = SourcePlan("clicks", "json", str(folder), "user_id string")
    caplog.set_level(logging.WARNING, logger="materializer.sources")
    project = Project.open()
    try:
        source_stream(spark, src, {}, str(project_dir / "ckpt"), "ods.clicks", project.config)
        [record] = [r for r in caplog.records if "subfolders" in r.getMessage()]
        assert record.table == "ods.clicks"
        assert record.getMessage() == (
            f"source clicks: the files in the subfolders late of {folder} are not read (a Spark file source "
            "reads them only with the option recursiveFileLookup: true)"
        )
        caplog.clear()
        options = {"recursiveFileLookup": "true"}
        source_stream(spark, src, options, str(project_dir / "ckpt2"), "ods.clicks", project.config)
        assert [r for r in caplog.records if "subfolders" in r.getMessage()] == []
    finally:
        project.close()
