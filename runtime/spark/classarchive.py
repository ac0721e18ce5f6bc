"""A class-data-sharing archive of the classes Spark's driver JVM loads, so it starts from mapped memory.

A driver JVM loads and verifies ~15,000 classes from Spark's jars at every start. Java's dynamic CDS archive
(``-XX:ArchiveClassesAtExit`` writes it when a JVM exits, ``-XX:SharedArchiveFile`` maps it at the next
start) skips that work: measured here (``local[2]``, a session and two small queries), the start took 4.1
instead of 6.1 s, the first queries 2.0 instead of 2.8 s, and the whole process 9.9 instead of 13.7 CPU s.

* *Where.* One archive per Java and Spark installation and driver options
  (:func:`archive_key`), in ``$XDG_CACHE_HOME/tidehouse/jvm`` (``~/.cache/tidehouse/jvm``): about 150 MB,
  shared by every project and process of the user. Deleting the folder costs one slower start.
* *Made by the first driver that finds none.* It claims the key (a file made with ``O_EXCL`` holding its
  pid) and starts its JVM with ``-XX:ArchiveClassesAtExit=<key>.<pid>.part``: that start is ~4 s slower
  (the JVM records what it loads) and its exit writes the archive in ~0.5 s. While a claim holds, other
  drivers start without an archive (never two dumps at once); a claim whose process is gone, or that is
  older than :data:`CLAIM_S` (a long-running flow), is taken over.
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

import contextlib
import hashlib
import os
import shutil
import time
from pathlib import Path

MAGIC = bytes.fromhex("a8ab0bf0")  # a dynamic archive's header magic, 0xf00baba8 little-endian
CLAIM_S = 900.0  # a claim older than this is taken over (its process may run a flow for hours)
TORN_S = 60.0  # a part without its header this long after its last write is torn (a dump takes ~0.5 s)
KEEP_S = 30 * 86400.0  # archives not used for this long are deleted when a new one is made
QUIET = "-Xlog:cds*=off -Xlog:class+path*=off"
_THEIRS = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-Xshare")


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
    one at its exit (with ``make``, when this process claims it); ``""`` when neither applies."""
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
        return f"-XX:ArchiveClassesAtExit={folder / f'{key}.{os.getpid()}.part'} {QUIET}"
    except OSError:
        return ""  # no cache folder: the JVM starts as without the archive (docs/operations.md)
