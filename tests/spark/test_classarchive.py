"""The driver JVM's class archive (runtime/spark/classarchive.py): who makes it, when a part becomes the
archive, what is never touched, and — in real JVMs — that the first start makes one the next start maps."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime.spark import classarchive as ca
from runtime.spark.session import session_conf, spark_jars


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.fixture
def jars(tmp_path) -> Path:
    folder = tmp_path / "jars"
    folder.mkdir()
    (folder / "spark-core.jar").write_bytes(b"jar")
    return folder


def _key(jars: Path, options: str = "") -> str:
    return ca.archive_key(ca.java_binary(), jars, options, "")


@pytest.fixture(autouse=True)
def _nothing_pending():
    yield
    ca._PENDING.clear()


CLAIMED = ("-XX:+RecordDynamicDumpInfo ", "-XX:ArchiveClassesAtExit=")


def test_the_first_start_claims_and_makes_it_at_exit_and_the_others_start_without(tmp_path, jars):
    folder = tmp_path / "cache"
    first = ca.driver_options(jars, "-XX:+UseSerialGC", folder=folder)
    key = _key(jars, "-XX:+UseSerialGC")
    assert first == f"-XX:+RecordDynamicDumpInfo {ca.QUIET}"  # jcmd dumps it once the session is up
    part = folder / f"{key}.{os.getpid()}.part"
    pending = {"jcmd": ca.java_binary().parent / "jcmd", "part": part, "archive": folder / f"{key}.jsa"}
    assert dict(ca._PENDING, claim=None) == dict(pending, claim=None)
    assert ca._PENDING["claim"] == folder / f"{key}.claim"
    assert (folder / f"{key}.claim").read_text() == str(os.getpid())
    assert ca.driver_options(jars, "-XX:+UseSerialGC", folder=folder) == ""  # claimed by a live process
    assert ca.driver_options(jars, "", folder=folder).startswith(CLAIMED)  # another key


def test_a_java_without_jcmd_dumps_at_the_jvms_exit(tmp_path, jars, monkeypatch):
    java = tmp_path / "jre" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("")
    monkeypatch.setattr(ca, "java_binary", lambda: java)
    folder = tmp_path / "cache"
    key = ca.archive_key(java, jars, "", "")
    part = folder / f"{key}.{os.getpid()}.part"
    assert ca.driver_options(jars, "", folder=folder) == f"-XX:ArchiveClassesAtExit={part} {ca.QUIET}"
    assert not ca._PENDING
    assert ca.dump_when_started(12345) is None  # nothing to dump from this process


def test_a_whole_part_of_a_finished_process_becomes_the_archive(tmp_path, jars):
    folder, key = tmp_path / "cache", _key(jars)
    folder.mkdir()
    pid = _dead_pid()
    (folder / f"{key}.claim").write_text(str(pid))
    (folder / f"{key}.{pid}.part").write_bytes(ca.MAGIC + b"rest of the archive")
    archive = folder / f"{key}.jsa"
    assert ca.driver_options(jars, "", folder=folder) == f"-XX:SharedArchiveFile={archive} {ca.QUIET}"
    assert archive.read_bytes().startswith(ca.MAGIC)
    assert sorted(p.name for p in folder.iterdir()) == [archive.name]  # the claim and the part are gone
    assert ca.driver_options(jars, "", folder=folder, make=False).startswith("-XX:SharedArchiveFile=")


def test_parts_being_written_or_torn(tmp_path, jars):
    folder, key = tmp_path / "cache", _key(jars)
    folder.mkdir()
    live = folder / f"{key}.{os.getppid()}.part"  # a running process's JVM: never touched
    live.write_bytes(ca.MAGIC + b"x")
    dead = _dead_pid()
    torn = folder / f"{key}.{dead}.part"  # its JVM may still be dumping (the header comes last)
    torn.write_bytes(b"\0\0\0\0 half")
    assert ca.driver_options(jars, "", folder=folder, make=False) == ""
    assert live.exists() and torn.exists()
    old = time.time() - ca.TORN_S - 1
    os.utime(torn, (old, old))  # nobody wrote it for longer than a dump takes: torn (killed mid-dump)
    assert ca.driver_options(jars, "", folder=folder, make=False) == ""
    assert live.exists() and not torn.exists()


def test_a_claim_whose_process_is_gone_or_that_is_old_is_taken_over(tmp_path, jars):
    folder, key = tmp_path / "cache", _key(jars)
    folder.mkdir()
    claim = folder / f"{key}.claim"
    claim.write_text(str(_dead_pid()))
    assert ca.driver_options(jars, "", folder=folder).startswith(CLAIMED)
    claim.write_text(str(os.getppid()))  # alive, but claimed longer ago than a flow should keep it
    old = time.time() - ca.CLAIM_S - 1
    os.utime(claim, (old, old))
    assert ca.driver_options(jars, "", folder=folder).startswith(CLAIMED)
    assert claim.read_text() == str(os.getpid())


def test_what_is_left_alone(tmp_path, jars):
    folder = tmp_path / "cache"
    theirs_all = (
        "-XX:SharedArchiveFile=/x.jsa",
        "-XX:ArchiveClassesAtExit=/y",
        "-XX:+RecordDynamicDumpInfo",
        "-Xshare:off",
    )
    for theirs in theirs_all:
        assert ca.driver_options(jars, f"-XX:+UseSerialGC {theirs}", folder=folder) == ""
    assert not folder.exists()
    assert ca.driver_options(jars, "", folder=folder, make=False) == ""  # use only: nothing made
    assert not folder.exists()
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert ca.driver_options(jars, "", folder=blocked / "cache") == ""  # no cache folder: start without


def test_the_key_names_the_jars_and_the_options(tmp_path, jars):
    key = _key(jars)
    assert _key(jars, "-XX:TieredStopAtLevel=1") != key
    assert ca.archive_key(ca.java_binary(), jars, "", "/extra.jar") != key
    (jars / "spark-core.jar").write_bytes(b"another jar")
    assert _key(jars) != key


def test_other_keys_files_unused_for_long_are_swept_when_an_archive_is_made(tmp_path, jars):
    folder = tmp_path / "cache"
    folder.mkdir()
    stale, recent = folder / "0ld.jsa", folder / "recent.jsa"
    stale.write_bytes(ca.MAGIC)
    recent.write_bytes(ca.MAGIC)
    old = time.time() - ca.KEEP_S - 1
    os.utime(stale, (old, old))
    assert ca.driver_options(jars, "", folder=folder).startswith(CLAIMED)
    assert not stale.exists() and recent.exists()


def test_session_conf_adds_the_options_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert "Archive" not in session_conf("local[2]")["spark.driver.extraJavaOptions"]
    made = session_conf("local[2]", class_archive="make")["spark.driver.extraJavaOptions"]
    assert made.startswith("-XX:+UseSerialGC -Dlog4j2.configurationFile=")
    assert "-XX:+RecordDynamicDumpInfo" in made and made.endswith(ca.QUIET)
    assert "Archive" not in session_conf("local[2]", class_archive="use")["spark.driver.extraJavaOptions"]


def test_a_process_whose_jvm_runs_claims_nothing(spark, tmp_path, monkeypatch):
    """``get_spark`` again in a process with a SparkContext starts no JVM: it must not claim the archive."""
    from runtime.spark.session import get_spark

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert get_spark("local[2]", class_archive="make") is not None
    assert not (tmp_path / "tidehouse").exists()


_START = """
import sys
from runtime.spark.session import get_spark
spark = get_spark("local[1]", class_archive="make")
spark.range(3).count()
pid = spark.sparkContext._gateway.proc.pid
print(pid, any(sys.argv[1] in line for line in open(f"/proc/{pid}/maps")))
"""


@pytest.mark.slow
def test_the_first_driver_makes_the_archive_the_next_one_maps(tmp_path):
    """Two real driver JVMs on a fresh cache: the first dumps the archive once its session is up (jcmd), the
    next maps it."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    folder = tmp_path / "tidehouse" / "jvm"

    def start() -> bool:
        out = subprocess.run(
            [sys.executable, "-c", _START, str(folder)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        assert "cds" not in out.stdout + out.stderr  # the JVM's CDS messages reach no terminal
        return out.stdout.split()[-1] == "True"

    assert not start()
    archives = list(folder.iterdir())  # the process waited for its dump at exit
    assert [p.suffix for p in archives] == [".jsa"] and archives[0].read_bytes()[:4] == ca.MAGIC, archives
    assert start()
    assert list(folder.iterdir()) == archives
    assert spark_jars().is_dir()


@pytest.mark.parametrize("when", ["timer", "exit"])
def test_the_claimer_dumps_once_after_its_start_or_at_its_exit(tmp_path, monkeypatch, when):
    """``jcmd <pid> VM.cds dynamic_dump PART`` (a stand-in that writes a whole archive), then PART becomes
    the archive and the claim goes; the timer and the exit never dump twice."""
    jcmd = tmp_path / "jcmd"
    calls = tmp_path / "calls"
    jcmd.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nprintf \'\\250\\253\\013\\360rest\' > "$4"\n')
    jcmd.chmod(0o755)
    part, archive, claim = tmp_path / "k.1.part", tmp_path / "k.jsa", tmp_path / "k.claim"
    claim.write_text("1")
    monkeypatch.setattr(ca, "DUMP_AFTER_S", 0.05 if when == "timer" else 60.0)
    monkeypatch.setattr(ca, "_DUMPS", [])
    ca._PENDING.update(jcmd=jcmd, part=part, archive=archive, claim=claim)
    timer = ca.dump_when_started(4242)
    if when == "timer":
        timer.join(timeout=30)
    ca._dump_at_exit()
    assert calls.read_text().split() == ["4242", "VM.cds", "dynamic_dump", str(part)]  # once
    assert archive.read_bytes().startswith(ca.MAGIC) and not part.exists() and not claim.exists()
    assert not ca._PENDING and ca.dump_when_started(4242) is None  # nothing claimed any more
