"""Figures of batches run by a Spark Connect server reach the client's table figures once each (no Spark)."""

from __future__ import annotations

import json
import os
import time

import pytest

from materializer import remote
from materializer.strategies import TableStats
from runtime.core.errors import ErrorCode, TidehouseError


def _publish(folder, table: str, instance: str, **figures) -> None:
    """What a server-side batch function writes after each batch: its cumulative figures."""
    (folder / f"{table}.{instance}.json").write_text(json.dumps(figures))


@pytest.fixture
def run(tmp_path):
    run = remote.RemoteRun(tmp_path / "_connect" / "f" / "run-1")
    yield run
    run._stop.set()


def test_each_instance_adds_what_it_did_since_the_last_pull(run):
    stats = {"dwd.t": TableStats(), "ads.u": TableStats()}
    _publish(run.folder, "dwd.t", "101-a", batches=2, rows_in=30, rows_out=20, phase_seconds={"sql": 0.5})
    run.pull(stats)
    assert (stats["dwd.t"].batches, stats["dwd.t"].rows_in, stats["dwd.t"].rows_out) == (2, 30, 20)
    # the same instance's next batch (cumulative figures), and a restarted query's new instance
    _publish(run.folder, "dwd.t", "101-a", batches=3, rows_in=45, rows_out=28, phase_seconds={"sql": 0.7})
    newest = {**TableStats(batches=1, rows_in=5, rows_out=5).to_dict(), "last_batch_id": 7}
    newest.update(last_batch_time=9.0, last_origin_ts=8.5, last_rows_out=0)  # taken as they are, not added
    _publish(run.folder, "dwd.t", "202-b", **newest)
    run.pull(stats)
    run.pull(stats)  # nothing new: nothing added twice
    t = stats["dwd.t"]
    assert (t.batches, t.rows_in, t.rows_out) == (4, 50, 33)
    assert t.phase_seconds == pytest.approx({"sql": 0.7})
    assert (t.last_batch_id, t.last_batch_time, t.last_origin_ts, t.last_rows_out) == (7, 9.0, 8.5, 0)
    assert stats["ads.u"].batches == 0


def test_a_batch_error_comes_back_with_its_code(run):
    stats = {"dwd.t": TableStats()}
    _publish(
        run.folder,
        "dwd.t",
        "101-a",
        batches=1,
        error="table dwd.t: offset 3 was deleted [TH308]",
        error_code=ErrorCode.STORAGE_RANGE.value,
        error_message="offset 3 was deleted",
        error_hint=None,
    )
    run.pull(stats)
    assert stats["dwd.t"].failure.code is ErrorCode.STORAGE_RANGE
    assert stats["dwd.t"].error.endswith("[TH308]")


def test_a_server_side_batch_refuses_to_run_for_a_client_that_is_gone(run, monkeypatch):
    batch = remote.RemoteBatch(
        plan=None, table="dwd.t", place=None, folder=str(run.folder), spark_partitions=2
    )
    batch._check_client()  # a fresh heartbeat: runs
    old = time.time() - remote.CLIENT_TIMEOUT_S - 5
    os.utime(run.folder / remote.HEARTBEAT, (old, old))
    batch._ctx = object()  # it ran before: its client stopped answering
    with pytest.raises(TidehouseError) as err:
        batch._check_client()
    assert err.value.code is ErrorCode.QUERY_FAILED and "stopped answering" in err.value.message


def test_a_server_that_does_not_see_the_run_folder_is_a_config_error(tmp_path):
    batch = remote.RemoteBatch(
        plan=None, table="dwd.t", place=None, folder=str(tmp_path / "x"), spark_partitions=2
    )
    with pytest.raises(TidehouseError) as err:
        batch._check_client()
    assert err.value.code is ErrorCode.CONFIG_INVALID and err.value.location.path == "checkpoints.root"


def test_a_new_run_removes_the_folders_of_killed_clients_only(tmp_path):
    base = tmp_path / "_connect" / "f"
    dead, alive = base / "run-dead", base / "run-alive"
    for folder in (dead, alive):
        folder.mkdir(parents=True)
        (folder / remote.HEARTBEAT).touch()
    old = time.time() - 3 * remote.CLIENT_TIMEOUT_S
    os.utime(dead / remote.HEARTBEAT, (old, old))
    run = remote.RemoteRun(base / "run-new")
    try:
        assert sorted(p.name for p in base.iterdir()) == ["run-alive", "run-new"]
    finally:
        run.close({})
    assert not (base / "run-new").exists()  # the run's own folder goes at its end
