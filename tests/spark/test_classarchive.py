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


def test_the_first_start_claims_and_makes_it_at_exit_and_the_others_start_without(tmp_path, jars):
    folder = tmp_path / "cache"
    first = ca.driver_options(jars, "-XX:+UseSerialGC", folder=folder)
    key = _key(jars, "-XX:+UseSerialGC")
    assert first == f"-XX:ArchiveClassesAtExit={folder / f'{key}.{os.getpid()}.part'} {ca.QUIET}"
    assert (folder / f"{key}.claim").read_text() == str(os.getpid())
    assert ca.driver_options(jars, "-XX:+UseSerialGC", folder=folder) == ""  # claimed by a live process
    assert ca.driver_options(jars, "", folder=folder).startswith("-XX:ArchiveClassesAtExit=")  # other key


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
    assert ca.driver_options(jars, "", folder=folder).startswith("-XX:ArchiveClassesAtExit=")
    claim.write_text(str(os.getppid()))  # alive, but claimed longer ago than a flow should keep it
    old = time.time() - ca.CLAIM_S - 1
    os.utime(claim, (old, old))
    assert ca.driver_options(jars, "", folder=folder).startswith("-XX:ArchiveClassesAtExit=")
    assert claim.read_text() == str(os.getpid())


def test_what_is_left_alone(tmp_path, jars):
    folder = tmp_path / "cache"
    for theirs in ("-XX:SharedArchiveFile=/x.jsa", "-XX:ArchiveClassesAtExit=/y.jsa", "-Xshare:off"):
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
    assert ca.driver_options(jars, "", folder=folder).startswith("-XX:ArchiveClassesAtExit=")
    assert not stale.exists() and recent.exists()


def test_session_conf_adds_the_options_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert "Archive" not in session_conf("local[2]")["spark.driver.extraJavaOptions"]
    made = session_conf("local[2]", class_archive="make")["spark.driver.extraJavaOptions"]
    assert made.startswith("-XX:+UseSerialGC -Dlog4j2.configurationFile=")
    assert "-XX:ArchiveClassesAtExit=" in made and made.endswith(ca.QUIET)
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
    """Two real driver JVMs on a fresh cache: the first writes a whole part as it exits, the next maps it."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    folder = tmp_path / "tidehouse" / "jvm"

    def start() -> tuple[int, bool]:
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
        pid, mapped = out.stdout.split()[-2:]
        return int(pid), mapped == "True"

    jvm, mapped = start()
    assert not mapped
    deadline = time.time() + 60  # the JVM writes the archive as it exits, after its Python process
    while time.time() < deadline and ca._alive(jvm):
        time.sleep(0.2)
    parts = list(folder.glob("*.part"))
    assert len(parts) == 1 and parts[0].read_bytes()[:4] == ca.MAGIC, sorted(folder.iterdir())
    _, mapped = start()
    assert mapped, sorted(folder.iterdir())
    assert [p.suffix for p in folder.iterdir()] == [".jsa"]
    assert spark_jars().is_dir()
