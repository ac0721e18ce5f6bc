"""Tidehouse's listing of a source folder (runtime.spark.filesource): which files a micro-batch admits, the
file log it keeps in the checkpoint (Spark's format), and what it does after a restart or a crash."""

from __future__ import annotations

import json
import os
import time

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxFiles

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.spark import filesource
from runtime.spark.filelog import source_files
from runtime.spark.filesource import FileLog, FolderStream, has_partition_folders, spark_uri, uri_path


def _file(folder, name: str, size: int = 10, age_s: float = 0.0):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    when = time.time() - age_s
    os.utime(path, (when, when))
    return path


def _stream(tmp_path, max_files=None, max_bytes=None) -> FolderStream:
    return FolderStream(str(tmp_path / "in"), str(tmp_path / "cp" / "sources" / "0"), max_files, max_bytes)


def _files(stream: FolderStream, start: int, end: int) -> list[str]:
    parts = stream.partitions({"logOffset": start}, {"logOffset": end})
    return [os.path.basename(uri_path(row[0])) for p in parts for row in stream.read(p)]


def test_a_batch_takes_the_new_files_oldest_first_and_skips_what_spark_skips(tmp_path):
    inp = tmp_path / "in"
    _file(inp, "b.json", age_s=10)
    _file(inp, "a.json", age_s=20)
    _file(inp, "sub/c.json", age_s=5)  # a plain subfolder: Spark's file source does not read it
    for name in ("_temp.json", ".hidden.json", "d.json._COPYING_", "_x/e.json", ".y/f.json"):
        _file(inp, name)
    stream = _stream(tmp_path)
    assert stream.initialOffset() == {"logOffset": -1}
    assert stream.latestOffset({"logOffset": -1}, ReadAllAvailable()) == {"logOffset": 0}
    assert _files(stream, -1, 0) == ["a.json", "b.json"]
    assert stream.latestOffset({"logOffset": 0}, ReadAllAvailable()) == {"logOffset": 0}  # nothing new
    _file(inp, "g.json")
    assert stream.latestOffset({"logOffset": 0}, ReadAllAvailable()) == {"logOffset": 1}
    assert _files(stream, 0, 1) == ["g.json"]


def test_admission_takes_at_most_the_limit_but_at_least_one_file(tmp_path):
    inp = tmp_path / "in"
    for i in range(5):
        _file(inp, f"f{i}.json", size=100, age_s=50 - i)
    stream = _stream(tmp_path, max_files=2)
    assert stream.getDefaultReadLimit().max_files == 2
    ends = [stream.latestOffset({}, ReadMaxFiles(2))["logOffset"] for _ in range(4)]
    assert ends == [0, 1, 2, 2]
    assert [_files(stream, k - 1, k) for k in range(3)] == [
        ["f0.json", "f1.json"],
        ["f2.json", "f3.json"],
        ["f4.json"],
    ]
    other = _stream(tmp_path / "bytes")
    for i in range(3):
        _file(tmp_path / "bytes" / "in", f"g{i}.json", size=100, age_s=50 - i)
    assert other.latestOffset({}, ReadMaxBytes(250))["logOffset"] == 0
    assert _files(other, -1, 0) == ["g0.json", "g1.json"]
    assert other.latestOffset({}, ReadMaxBytes(50))["logOffset"] == 1  # one file larger than the cap
    assert _files(other, 0, 1) == ["g2.json"]


def test_a_file_older_than_the_age_is_new_only_in_the_first_batch(tmp_path):
    """Spark's maxFileAge (7 days, against the newest admitted file): a backlog is read whole at first; later
    a file that old is not new — unless a newer file of that name appears."""
    inp = tmp_path / "in"
    _file(inp, "old.json", age_s=30 * 86400)
    _file(inp, "new.json")
    stream = _stream(tmp_path)
    stream.latestOffset({}, ReadAllAvailable())
    assert sorted(_files(stream, -1, 0)) == ["new.json", "old.json"]
    _file(inp, "late-but-old.json", age_s=20 * 86400)
    assert stream.latestOffset({}, ReadAllAvailable())["logOffset"] == 0
    stream.old_checked -= filesource.OLD_RECHECK_S  # the old name is stat'ed again after a while
    _file(inp, "late-but-old.json")  # rewritten now
    assert stream.latestOffset({}, ReadAllAvailable())["logOffset"] == 1
    assert _files(stream, 0, 1) == ["late-but-old.json"]


def test_a_restart_admits_nothing_twice_and_keeps_what_a_crash_left_in_the_log(tmp_path):
    inp = tmp_path / "in"
    _file(inp, "a.json", age_s=3)
    first = _stream(tmp_path)
    first.latestOffset({}, ReadAllAvailable())  # log batch 0 written; say Spark died before its offset log
    _file(inp, "b.json")
    again = _stream(tmp_path)  # a new run: its runner rebuilds what was admitted from the log
    assert again.latestOffset({"logOffset": -1}, ReadAllAvailable()) == {"logOffset": 1}
    assert _files(again, -1, 1) == ["a.json", "b.json"]  # the micro-batch covers both log batches
    assert again.latestOffset({"logOffset": 1}, ReadAllAvailable()) == {"logOffset": 1}


def test_the_log_is_sparks_and_compacts_every_ten_batches(tmp_path):
    inp = tmp_path / "in"
    log = tmp_path / "cp" / "sources" / "0"
    stream = _stream(tmp_path)
    for k in range(25):
        _file(inp, f"f{k:02d}.json", age_s=100 - k)
        assert stream.latestOffset({}, ReadAllAvailable()) == {"logOffset": k}
    lines = (log / "3").read_text().splitlines()
    assert lines[0] == "v1"
    assert json.loads(lines[1]) == {
        "path": spark_uri(str(inp / "f03.json")),
        "timestamp": json.loads(lines[1])["timestamp"],
        "batchId": 3,
    }
    names = sorted(os.listdir(log))
    assert "19.compact" in names and "9.compact" not in names  # an older compact file is dropped
    assert "19" not in names and "9" not in names  # a compaction batch is its compact file only (Spark's)
    compact = (log / "19.compact").read_text().splitlines()
    assert len(compact) == 1 + 20  # every admitted file still within the age
    # filelog (what the batch functions read) finds a batch in its own file or in a compact file
    cp = tmp_path / "cp"
    (cp / "offsets").mkdir()
    for batch, offset in enumerate([4, 20, 24]):
        (cp / "offsets" / str(batch)).write_text(f'v1\n{{}}\n{{"logOffset": {offset}}}\n')
    (log / "12").unlink()  # as a compaction more than KEEP_BATCHES later does: 19.compact holds it
    assert [os.path.basename(f) for f in source_files(cp, 1)] == [f"f{k:02d}.json" for k in range(5, 21)]
    restarted = _stream(tmp_path)
    _file(inp, "last.json")
    assert restarted.latestOffset({}, ReadAllAvailable()) == {"logOffset": 25}
    assert _files(restarted, 24, 25) == ["last.json"]


def test_old_plain_log_files_are_pruned_behind_a_compaction(tmp_path, monkeypatch):
    monkeypatch.setattr(filesource, "KEEP_BATCHES", 10)
    inp = tmp_path / "in"
    stream = _stream(tmp_path)
    for k in range(30):
        _file(inp, f"f{k:02d}.json", age_s=100 - k)
        stream.latestOffset({}, ReadAllAvailable())
    names = set(os.listdir(tmp_path / "cp" / "sources" / "0"))
    assert names == {"29.compact", *(str(k) for k in range(20, 29))}
    assert _files(stream, 4, 6) == ["f05.json", "f06.json"]  # from the compact file


def test_a_killed_writers_temporary_files_are_pruned_behind_a_compaction(tmp_path, monkeypatch):
    monkeypatch.setattr(filesource, "KEEP_BATCHES", 10)
    inp, log = tmp_path / "in", tmp_path / "cp" / "sources" / "0"
    stream = _stream(tmp_path)
    for k in range(12):
        _file(inp, f"f{k:02d}.json", age_s=100 - k)
        stream.latestOffset({}, ReadAllAvailable())
    left = [".3.4242.tmp", ".9.compact.4242.tmp", ".25.4242.tmp", ".x.4242.tmp", "notes.tmp"]
    for name in left:  # as a writer killed between writing and linking leaves them
        (log / name).write_text("v1\n")
    for k in range(12, 20):
        _file(inp, f"f{k:02d}.json", age_s=100 - k)
        stream.latestOffset({}, ReadAllAvailable())
    names = set(os.listdir(log))
    assert "19.compact" in names and {".3.4242.tmp", ".9.compact.4242.tmp"}.isdisjoint(names)
    assert {".25.4242.tmp", ".x.4242.tmp", "notes.tmp"} <= names  # a batch not written yet; not ours
    assert _files(stream, 18, 19) == ["f19.json"]


def test_a_log_file_is_never_written_over(tmp_path):
    log = FileLog(tmp_path / "log")
    log.write(0, [{"path": "file:///a", "timestamp": 1, "batchId": 0}])
    with pytest.raises(TidehouseError) as err:
        log.write(0, [{"path": "file:///b", "timestamp": 2, "batchId": 0}])
    assert err.value.code == ErrorCode.FLOW_RUNNING
    assert "file:///a" in (tmp_path / "log" / "0").read_text()
    assert [p.name for p in (tmp_path / "log").iterdir()] == ["0"]  # no temporary file left


def test_a_log_it_cannot_read_is_an_error_not_a_guess(tmp_path):
    log = tmp_path / "cp" / "sources" / "0"
    log.mkdir(parents=True)
    (log / "0").write_text("v2\n{}\n")
    with pytest.raises(TidehouseError) as err:
        _stream(tmp_path).latestOffset({}, ReadAllAvailable())
    assert err.value.code == ErrorCode.STORAGE_CORRUPT and "v1" in str(err.value)


def test_a_partition_folder_is_an_error_while_listing_and_found_before(tmp_path):
    inp = tmp_path / "in"
    _file(inp, "a.json")
    assert not has_partition_folders(str(inp))
    _file(inp, "_hidden/x.json")  # Spark skips it
    assert not has_partition_folders(str(inp))
    _file(inp, "_part=1/x.json")  # not hidden for Spark ("=" in it): a partition folder
    assert has_partition_folders(str(inp))
    with pytest.raises(TidehouseError) as err:
        _stream(tmp_path).latestOffset({}, ReadAllAvailable())
    assert err.value.code == ErrorCode.SOURCE_INVALID and "_part=1" in str(err.value)


def test_a_missing_folder_is_an_error(tmp_path):
    with pytest.raises(TidehouseError) as err:
        _stream(tmp_path).latestOffset({}, ReadAllAvailable())
    assert err.value.code == ErrorCode.SOURCE_INVALID and "does not exist" in str(err.value)


@pytest.mark.parametrize(
    "name, uri",
    [
        ("plain-1.json", "file:///d/plain-1.json"),
        ("a b.json", "file:///d/a%20b.json"),
        ("x[1].json", "file:///d/x%5B1%5D.json"),
        ("é%41.json", "file:///d/é%2541.json"),
        ("y{a,b}*?.json", "file:///d/y%7Ba,b%7D*%3F.json"),
        ('q#"<>^`|\\.json', "file:///d/q%23%22%3C%3E%5E%60%7C%5C.json"),
        ("nb\u00a0sp.json", "file:///d/nb%C2%A0sp.json"),
    ],
)
def test_paths_are_spelled_as_sparks_log_spells_them(name, uri):
    assert spark_uri(f"/d/{name}") == uri
    assert uri_path(uri) == f"/d/{name}"


def test_a_folder_no_name_came_to_is_not_listed_again(tmp_path, monkeypatch):
    """The folder's modification time changes when a name is added, removed or renamed: while it is what it
    was at the last listing (and settled: 2 s old), a trigger lists nothing — unless the last listing left
    new files for the next batch, or old names are due to be stat'ed again."""
    inp = tmp_path / "in"
    for i in range(3):
        _file(inp, f"f{i}.json", age_s=30 - i)
    past = time.time() - 10
    os.utime(inp, (past, past))
    listings = []
    real = filesource.list_files
    monkeypatch.setattr(filesource, "list_files", lambda root: listings.append(root) or real(root))
    stream = _stream(tmp_path, max_files=2)
    ends = [stream.latestOffset({}, ReadMaxFiles(2))["logOffset"] for _ in range(4)]
    assert ends == [0, 1, 1, 1] and len(listings) == 2  # the second listing took the file the first left
    _file(inp, "g.json")  # a new name: the folder's time moves
    assert stream.latestOffset({}, ReadMaxFiles(2))["logOffset"] == 2 and len(listings) == 3
    assert _files(stream, 1, 2) == ["g.json"]
    stream.old_checked -= filesource.OLD_RECHECK_S
    past = time.time() - 10
    os.utime(inp, (past, past))
    stream.latestOffset({}, ReadMaxFiles(2))
    assert len(listings) == 4  # due to stat old names again


def test_a_trigger_that_waits_answers_when_a_file_comes_or_at_once_while_awake(tmp_path):
    """``idleWaitMs``: a folder that did not change is watched (its modification time, every ``pollMs``)
    until a name comes, the wait is over, or the awake file exists (runtime.spark.idlewait)."""
    import threading

    inp = tmp_path / "in"
    _file(inp, "a.json", age_s=30)
    past = time.time() - 10
    os.utime(inp, (past, past))
    awake = tmp_path / "awake"
    stream = FolderStream(
        str(inp), str(tmp_path / "cp" / "sources" / "0"), None, None, 30_000, 20, str(awake)
    )
    assert stream.latestOffset({}, ReadAllAvailable())["logOffset"] == 0  # a.json: no wait
    later = threading.Timer(0.5, lambda: _file(inp, "b.json"))
    began = time.monotonic()
    later.start()
    assert stream.latestOffset({}, ReadAllAvailable())["logOffset"] == 1  # b.json, when it came
    assert 0.4 < time.monotonic() - began < 20
    assert _files(stream, 0, 1) == ["b.json"]
    past = time.time() - 10
    os.utime(inp, (past, past))
    awake.touch()
    began = time.monotonic()
    assert stream.latestOffset({}, ReadAllAvailable())["logOffset"] == 1
    assert time.monotonic() - began < 10  # awake: no wait
    awake.unlink()
    stream.idle_wait_ms = 300
    began = time.monotonic()
    assert stream.latestOffset({}, ReadAllAvailable())["logOffset"] == 1
    assert time.monotonic() - began >= 0.3  # nothing came: it waited its 300 ms
