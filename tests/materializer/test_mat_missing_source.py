"""A flow source whose local folder does not exist (a mistyped path): an ``--until-idle`` run is refused
before Spark starts, at the source's ``path`` in the flow file — it created the folder, read nothing from it
and ended with exit 0 as if drained. A run without ``--until-idle`` creates the folder, says so in its log,
and reads the files that arrive there."""

from __future__ import annotations

import logging
import random
import shutil

import pytest

from materializer.sources import missing_folder
from tests.materializer._flowkit import canon, make_events, oracle, write_batch


def test_only_a_local_folder_that_does_not_exist_is_missing(tmp_path):
    assert missing_folder(str(tmp_path / "nope"))
    assert missing_folder((tmp_path / "nope").as_uri()) and not missing_folder(tmp_path.as_uri())
    assert not missing_folder(str(tmp_path))
    assert not missing_folder(None) and not missing_folder("")
    assert not missing_folder(str(tmp_path / "*" / "events"))  # a glob pattern: Spark matches it
    assert not missing_folder("s3a://bucket/events")  # a URI: Spark's file system resolves it


def test_until_idle_over_a_missing_source_folder_is_refused_at_its_path(project_dir, test_flow, run_cli):
    from runtime.project import Project

    folder = project_dir / "data" / "clicks"
    shutil.rmtree(folder)
    line = test_flow.read_text().splitlines().index("    path: data/clicks") + 1
    code, out, err = run_cli("flow", "trigger", "flows/testflow.yaml", "--until-idle")
    assert code == 2, out + err
    assert err.startswith(
        f"error: flows/testflow.yaml:{line}:11: sources.clicks.path: source clicks: the folder {folder} does "
        "not exist, so an --until-idle run would read nothing from it ("
    ), err
    assert err.rstrip().endswith("[TH404]") and "Traceback" not in err
    assert not folder.exists()
    project = Project.open()
    try:
        assert project.registry.list_flows() == []  # refused before it registered anything
    finally:
        project.close()


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
