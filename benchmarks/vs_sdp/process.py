"""The processes of a system under test: their environment, their memory, stopping them, their logs."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

VENV_BIN = Path(sys.executable).parent


def _proc_stats() -> Iterator[tuple[int, list[str]]]:
    """(pid, the fields of /proc/<pid>/stat after the command name: state, ppid, pgrp, ...) of every process.
    A process that exits between the listing and the read is not there any more, so it is left out."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read().decode("utf-8", "replace")
        except OSError:  # exited meanwhile
            continue
        yield int(entry), stat.rsplit(")", 1)[1].split()  # the command name may hold spaces and ')'


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for pid, fields in _proc_stats():
        children.setdefault(int(fields[1]), []).append(pid)
    return children


_KCMP = {"x86_64": 312, "aarch64": 272}  # the kcmp(2) system call's number
_KCMP_VM = 1


def shares_memory(pid: int, other: int) -> bool:
    """Whether two processes share one address space (kcmp(2), KCMP_VM): a child made by vfork, or by
    posix_spawn's clone(CLONE_VM), until it execs. A JVM starts every subprocess (Hadoop's chmod of each
    checkpoint file it writes, ~10 a second) that way, and in /proc that child shows the JVM's whole resident
    set for the moment before its exec: summing it would count the JVM twice."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    number = _KCMP.get(os.uname().machine)
    if number is None:
        raise OSError(f"kcmp(2): no system call number known for {os.uname().machine}")
    result = libc.syscall(number, pid, other, _KCMP_VM, 0, 0)
    if result < 0:
        err = ctypes.get_errno()
        if err == errno.ESRCH:  # one of them has exited: nothing shared to count twice
            return False
        raise OSError(err, f"kcmp({pid}, {other}): {os.strerror(err)}")
    return result == 0


def tree_rss_bytes(root: int) -> int:
    """Resident memory of a process and all its descendants (Linux /proc), in bytes. A descendant that
    shares its parent's address space (:func:`shares_memory`) is the parent's memory, counted once."""
    children, total, todo, seen = _children_map(), 0, [root], set()
    parent: dict[int, int] = {}
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        for kid in children.get(pid, ()):
            parent[kid] = pid
            todo.append(kid)
        if pid in parent and shares_memory(pid, parent[pid]):
            continue
        try:
            with open(f"/proc/{pid}/statm") as fh:
                total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            continue
    return total


def spark_env() -> dict[str, str]:
    """The environment of a child process: this venv's Spark and Python, not a SPARK_HOME of the machine."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"  # spark-pipelines calls find-spark-home
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env.pop("SPARK_HOME", None)
    return env


def killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def group_members(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` that still run (not the zombies: a process whose parent
    exited waits for its new parent to reap it, which need not happen soon in a container)."""
    return [pid for pid, fields in _proc_stats() if int(fields[2]) == pgid and fields[0] != "Z"]


def terminate(proc: subprocess.Popen | None, grace: float, *, group: bool = False) -> None:
    """SIGTERM the process (``group``: its whole process group), wait up to ``grace`` s, then SIGKILL
    whatever is left of the group and wait (10 s at most) until none of it runs (a JVM child must not
    outlive the run and hold its ports).

    With ``group``, what is left after the process itself ended also gets the rest of ``grace`` to end on
    its own: a driver's JVM outlives its Python process by the time its shutdown hooks take, and a JVM
    killed in them leaves its temporary folders behind (an empty ``/tmp/artifacts-<uuid>`` for every
    Tidehouse run on a cluster)."""
    if proc is None:
        return
    deadline = time.monotonic() + grace
    if proc.poll() is None:
        if group:
            killpg(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    while group and group_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    gone = time.monotonic() + 10  # SIGKILL is delivered asynchronously: return once nothing of it runs
    while group_members(proc.pid) and time.monotonic() < gone:
        time.sleep(0.05)


def wait_port_free(port: int, timeout: float = 60.0) -> None:
    """Wait until nothing listens on localhost:``port`` (the Spark Connect server of the previous run)."""
    import socket

    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) != 0:
                return
        time.sleep(0.5)


def tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of a log (empty if it cannot be read)."""
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
