"""A run killed while Spark wrote a query's first offset log entry leaves that write's temporary file and no
entry; Spark would refuse to start the query again (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY, seen in a CI
kill -9 test on 2026-11-29). The next run removes the leftover and is exact."""

from __future__ import annotations

import json
import logging
import random
import uuid
from pathlib import Path

import pytest

from runtime.spark.writer import clear_unstarted
from tests.materializer._flowkit import canon, make_events, oracle, write_batch

LEFTOVER = ".0.bfe47a6e-79fc-4e7b-80e9-63f2f052f675.tmp"  # as the killed run left it: empty


def _leave(checkpoint: Path) -> None:
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    (checkpoint / "offsets" / LEFTOVER).write_bytes(b"")
    (checkpoint / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}) + "\n")


def test_only_the_leftovers_of_a_first_entry_are_removed(tmp_path):
    _leave(tmp_path / "a")
    (tmp_path / "a" / "offsets" / f"{LEFTOVER}.crc").write_bytes(b"")
    assert clear_unstarted(tmp_path / "a") == [f"offsets/{LEFTOVER}", f"offsets/{LEFTOVER}.crc"]
    assert list((tmp_path / "a" / "offsets").iterdir()) == []
    _leave(tmp_path / "b")
    (tmp_path / "b" / "offsets" / "0").write_text("v1\n{}\n")  # batch 0 began: Spark resumes it
    assert clear_unstarted(tmp_path / "b") == []
    assert (tmp_path / "b" / "offsets" / LEFTOVER).exists()
    assert clear_unstarted(tmp_path / "c") == []  # no checkpoint yet


@pytest.mark.spark
def test_a_run_after_a_kill_during_the_first_offsets_write_is_exact(
    spark, project_dir, test_flow, seed, caplog
):
    from runtime.project import Project

    caplog.set_level(logging.WARNING, logger="materializer.runner")

    lines = make_events(random.Random(seed), 40)
    write_batch(project_dir, "part-0", lines)
    project = Project.open()
    try:
        plan = project.plan(test_flow, spark=spark)
        for t in plan.tables:
            _leave(Path(t.checkpoint))
        project.trigger(test_flow, until_idle=True, spark=spark)
        warned = [r for r in caplog.records if "unfinished first offsets" in r.getMessage()]
        assert sorted((r.flow, r.table) for r in warned) == sorted((plan.flow, t.name) for t in plan.tables)
        assert all(LEFTOVER in r.getMessage() for r in warned)
        for table, rows in oracle(lines).items():
            if not table.endswith("__quarantine"):
                assert canon(project.store.scan(table)) == rows, f"hot {table}"
    finally:
        project.close()
