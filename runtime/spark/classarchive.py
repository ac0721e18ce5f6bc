"""A class-data-sharing archive of the classes Spark's driver JVM loads, so it starts from mapped memory.

A driver JVM loads and verifies ~15,000 classes from Spark's jars at every start. Java's dynamic CDS archive
(written by ``jcmd <pid> VM.cds dynamic_dump`` from a JVM started with ``-XX:+RecordDynamicDumpInfo``, or by
``-XX:ArchiveClassesAtExit`` when the JVM exits; mapped at the next start with ``-XX:SharedArchiveFile``)
skips that work: measured here (``local[2]``, a session and two small queries), with the archive dumped 5 s
after a session started the start took 4.7 instead of 6.1 s, the first queries 2.2 instead of 2.6 s, and the
whole process 11.4 instead of 14.0 CPU s (an archive dumped at a JVM's exit holds more: 4.1 s, 2.0 s, 9.9).

* *Where.* One archive per Java and Spark installation and driver options
  (:func:`archive_key`), in ``$XDG_CACHE_HOME/tidehouse/jvm`` (``~/.cache/tidehouse/jvm``): about 115 MB,
  shared by every project and process of the user. Deleting the folder costs one slower start.
* *Made by the first driver that finds none.* It claims the key (a file made with ``O_EXCL`` holding its
  pid) and starts its JVM recording what it loads (~5 s slower); 5 s after its session is up (or at its
  exit, if sooner) :func:`dump_when_started` runs ``jcmd VM.cds dynamic_dump <key>.<pid>.part`` (~4 s)
  and renames the part to the archive. So a process that runs for days, or is killed after those 5 s,
  still leaves the archive. A Java without ``jcmd`` (a JRE) dumps at the JVM's exit instead
  (``-XX:ArchiveClassesAtExit``). While a claim holds, other drivers start without an archive (never two
  dumps at once); a claim whose process is gone, or that is older than :data:`CLAIM_S`, is taken over.
* *Adopted by the next start.* Java writes the archive's header last, so a part whose first bytes are the
  archive magic is whole; it is renamed to ``<key>.jsa`` (atomic), a torn one (the JVM killed mid-dump) is
  deleted. The JVM checks the archive itself at start (its Java, its class path): one it refuses is ignored
  and the JVM starts as without it, which the key makes rare (it names the Java files, the jars and the
  options).
* *Silent by design.* The JVM's CDS messages (classes it skips, an archive it refuses) go nowhere
  (``-Xlog:cds*=off``): they are not the user's concern and would reach the terminal. A cache folder that
  cannot be made or written means starting without an archive (documented in docs/operations.md).

Set ``spark.class_archive: false`` to start without one; a project's own ``-XX:SharedArchiveFile``,
``-XX:ArchiveClassesAtExit`` or ``-Xshare`` option in ``spark.driver.extraJavaOptions`` is left alone.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

MAGIC = bytes.fromhex("a8ab0bf0")  # a dynamic archive's header magic, 0xf00baba8 little-endian
CLAIM_S = 900.0  # a claim older than this is taken over (its process may run a flow for hours)
TORN_S = 60.0  # a part without its header this long after its last write is torn (a dump takes ~0.5 s)
KEEP_S = 30 * 86400.0  # archives not used for this long are deleted when a new one is made
QUIET = "-Xlog:cds*=off -Xlog:class+path*=off"
_THEIRS = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-XX:+RecordDynamicDumpInfo", "-Xshare")


def archive_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tidehouse" / "jvm"


def java_binary() -> Path | None:
    """The ``java`` spark-submit runs: ``$JAVA_HOME/bin/java``, else the one on the ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return Path(found).resolve() if found and os.path.exists(found) else None


def archive_key(java: Path, jars: Path, options: str, class_path: str) -> str:
    """What an archive is valid for: the Java (its launcher, libjvm and base archive), Spark's jars (names,
    sizes, times) and the driver's options and extra class path."""
    parts = [str(java), options, class_path]
    server = java.parent.parent / "lib" / "server"
    for path in (java, server / "libjvm.so", server / "classes.jsa", server / "classes_nocoops.jsa"):
        with contextlib.suppress(OSError):
            st = path.stat()
            parts.append(f"{path.name}:{st.st_size}:{st.st_mtime_ns}")
    with os.scandir(jars) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            st = entry.stat()
            parts.append(f"{entry.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _whole(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def _adopt(folder: Path, key: str, archive: Path) -> bool:
    """Rename a whole part of ``key`` whose process is gone to ``archive`` (then drop the claim and any
    other whole part); delete a torn one that nobody writes any more."""
    for part in sorted(folder.glob(f"{key}.*.part")):
        pid = part.name.split(".")[1]
        if pid.isdigit() and _alive(int(pid)):
            continue  # its JVM may still run
        try:
            whole, idle = _whole(part), time.time() - part.stat().st_mtime > TORN_S
        except FileNotFoundError:  # another process adopted or deleted it
            continue
        with contextlib.suppress(FileNotFoundError):
            if whole and not archive.exists():
                os.replace(part, archive)
                (folder / f"{key}.claim").unlink(missing_ok=True)
            elif whole or idle:  # a second archive, or a part its JVM left torn (killed mid-dump)
                part.unlink()
    return archive.exists()


def _claim(folder: Path, key: str) -> bool:
    """Take the right to make ``key``'s archive: no claim, or one whose process is gone or that is old."""
    claim = folder / f"{key}.claim"
    for _ in range(2):
        try:
            fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                owner = int(claim.read_text() or 0)
                stale = not _alive(owner) or time.time() - claim.stat().st_mtime > CLAIM_S
            except (OSError, ValueError):
                stale = True
            if not stale:
                return False
            with contextlib.suppress(FileNotFoundError):
                claim.unlink()
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(str(os.getpid()))
        return True
    return False


def _sweep(folder: Path, keep: str) -> None:
    """Delete other keys' archives, parts and claims not used for :data:`KEEP_S` (an old Spark's or
    Java's)."""
    cutoff = time.time() - KEEP_S
    for path in folder.iterdir():
        if not path.name.startswith(keep) and path.suffix in (".jsa", ".part", ".claim"):
            with contextlib.suppress(OSError):
                if path.stat().st_mtime < cutoff:
                    path.unlink()


def driver_options(
    jars: Path, options: str, class_path: str = "", *, make: bool = True, folder: Path | None = None
) -> str:
    """The options that start the driver JVM from the archive (touched, to mark it used), or that make
    one (with ``make``, when this process claims it: :func:`dump_when_started` then makes it); ``""`` when
    neither applies."""
    if any(flag in options for flag in _THEIRS):
        return ""
    java = java_binary()
    if java is None or not jars.is_dir():
        return ""  # spark-submit will say what is missing
    folder = folder or archive_dir()
    key = archive_key(java, jars, options, class_path)
    archive = folder / f"{key}.jsa"
    try:
        if archive.exists() or (folder.is_dir() and _adopt(folder, key, archive)):
            os.utime(archive)
            return f"-XX:SharedArchiveFile={archive} {QUIET}"
        if not make:
            return ""
        folder.mkdir(parents=True, exist_ok=True)
        if not _claim(folder, key):
            return ""
        _sweep(folder, key)
        part = folder / f"{key}.{os.getpid()}.part"
        jcmd = java.parent / "jcmd"
        if jcmd.exists():  # dump once the session is up (dump_when_started), whatever ends the process
            _PENDING.update(jcmd=jcmd, part=part, archive=archive, claim=folder / f"{key}.claim")
            return f"-XX:+RecordDynamicDumpInfo {QUIET}"
        return f"-XX:ArchiveClassesAtExit={part} {QUIET}"  # a Java without jcmd: at the JVM's exit
    except OSError:
        return ""  # no cache folder: the JVM starts as without the archive (docs/operations.md)


_PENDING: dict = {}  # what this process claimed to dump with jcmd: jcmd, part, archive, claim
_DUMPS: list[threading.Timer] = []
DUMP_AFTER_S = 5.0  # the first queries load many classes again; a process killed later still leaves it


def dump_when_started(jvm_pid: int | None) -> threading.Timer | None:
    """After the driver JVM this process claimed the archive for has started: :data:`DUMP_AFTER_S` later (or
    at the process's exit, if sooner) ``jcmd VM.cds dynamic_dump`` into the part, then the part becomes the
    archive. In a timer thread (the dump takes a few seconds; its JVM pauses only to write); at exit the
    process runs or waits for it, so a short command still leaves the archive. A dump that fails leaves the
    claim to go stale and the part to be deleted as torn."""
    pending = dict(_PENDING)
    _PENDING.clear()
    if not pending or jvm_pid is None:
        return None
    ran = threading.Lock()

    def dump() -> None:
        if not ran.acquire(blocking=False):
            return  # the timer and the exit both got here: once is enough
        part, archive = pending["part"], pending["archive"]
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(
                [str(pending["jcmd"]), str(jvm_pid), "VM.cds", "dynamic_dump", str(part)],
                capture_output=True,
                timeout=120,
                check=False,
            )
            if done.returncode == 0 and _whole(part):
                os.replace(part, archive)
                pending["claim"].unlink(missing_ok=True)

    timer = threading.Timer(DUMP_AFTER_S, dump)
    timer.daemon = True
    timer.name = "tidehouse-class-archive"
    timer.dump = dump  # type: ignore[attr-defined]  # what the exit runs when the timer has not yet
    timer.start()
    if not _DUMPS:
        atexit.register(_dump_at_exit)
    _DUMPS.append(timer)
    return timer


def _dump_at_exit() -> None:
    for timer in _DUMPS:
        timer.cancel()
        if timer.is_alive():
            timer.join(timeout=120)  # its dump runs
        timer.dump()  # type: ignore[attr-defined]  # a no-op when the timer ran it
