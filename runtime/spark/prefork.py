"""A fork server for the driver's short-lived Python processes: a streaming source runner starts in ms.

Spark starts a new Python process (``python -m pyspark.sql.streaming.python_streaming_source_runner``) for
every streaming query that reads a ``tidehouse`` table (its data-source planners run under
``pyspark.daemon``, which forks them). Each imports PySpark, PyArrow and NumPy before its first answer:
0.4 CPU s here, about a third of all the CPU of two ``--until-idle`` test files (90 runners, 68 of ~200
CPU s; docs/architecture.md, "The driver's runners").

So the driver starts one **fork server** beside its JVM (:func:`start`, from
:func:`runtime.spark.session.get_spark`): a process that has imported those modules once and waits on a Unix
socket. ``tidehouse-python`` (:mod:`runtime.spark.launcher`, Spark's ``PYSPARK_PYTHON``), asked to run one
of :data:`FORKED` with the server's socket in ``TIDEHOUSE_PREFORK``, sends it its environment, working
directory and standard streams (the pipes the JVM reads) instead of starting Python; the server forks a child
that takes them over and runs the module as ``__main__`` — the program Spark asked for, in the process state
a fresh interpreter would have. The launcher stays as the process the JVM started: it relays SIGTERM, SIGINT,
SIGHUP and SIGQUIT to the child and exits as the child did.

Crash cases: the launcher killed (SIGKILL) -> the server kills its child (the JVM saw its worker end); the
server's driver gone -> the server kills its children (their JVM went with the driver) and exits; the server
killed -> its children live on with their JVM sockets, and a launcher that cannot connect starts Python as
before and says so on stderr (Spark's log); the child killed -> the launcher exits by the same signal.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import sys

ENV = "TIDEHOUSE_PREFORK"  # the fork server's socket, in the driver's (and so its JVM's) environment
# the Python processes Spark starts on the driver with a command of their own (``createSimpleWorker``), one
# per streaming query that reads a Python data source; its planners run under pyspark.daemon, which forks
FORKED = ("pyspark.sql.streaming.python_streaming_source_runner",)
PRELOADED = ("runtime.spark.datasource",)  # what the tidehouse source's pickled class needs
RELAYED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
_LEN = struct.Struct("!i")


# -- the launcher's side ------------------------------------------------------------------------------------
def run_forked(path: str, module: str) -> int | None:
    """Run ``module`` in a child of the fork server at ``path`` with this process's environment, working
    directory and standard streams; the child's exit code (negative: the signal that ended it), or None when
    the server does not answer (the caller starts Python itself)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        # the signals this process ignores (the JVM starts its workers with SIGINT ignored) the child ignores
        ignored = [int(s) for s in RELAYED if signal.getsignal(s) == signal.SIG_IGN]
        request = {"module": module, "cwd": os.getcwd(), "env": dict(os.environ), "ignored": ignored}
        request = json.dumps(request).encode()
        socket.send_fds(sock, [_LEN.pack(len(request)) + request], [0, 1, 2])
        pid = _read_int(sock)
    except OSError as exc:
        sock.close()
        print(f"tidehouse-python: no fork server at {path} ({exc}); starting Python", file=sys.stderr)
        return None
    for signum in RELAYED:
        if signum not in ignored:
            signal.signal(signum, lambda signum, _frame: _relay(pid, signum))
    try:
        return _read_int(sock)
    except OSError:  # the server ended: the child runs on, and this process stays for as long
        return _wait_gone(pid)


def _relay(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _wait_gone(pid: int) -> int:
    """Poll until ``pid`` (not this process's child: its exit code cannot be known) is gone; then 0 — the JVM
    hears how its runner ended over its own socket, not from this code."""
    import time

    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return 0
        time.sleep(0.2)


def exit_as(code: int) -> None:
    """End this process as the child ended: with its exit code, or killed by its signal."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


def _read_int(sock: socket.socket) -> int:
    data = b""
    while len(data) < _LEN.size:
        chunk = sock.recv(_LEN.size - len(data))
        if not chunk:
            raise ConnectionResetError("the fork server closed the connection")
        data += chunk
    return _LEN.unpack(data)[0]


# -- the server -----------------------------------------------------------------------------------------
_SERVER: dict[str, object] = {}  # this process's fork server: "process", "path"


def serve_this_driver() -> str | None:
    """This process's fork server, started once, named in the environment its JVM will inherit (the caller
    removes it once the JVM runs: no other program this process starts is to use it): its socket, or None
    when it could not start (a warning in the log; the launcher then starts Python for each runner, as Spark
    would). Stopped when this process exits."""
    import atexit
    import logging
    import shutil
    import tempfile

    process = _SERVER.get("process")
    if process is not None and process.poll() is None:
        os.environ[ENV] = _SERVER["path"]
        return _SERVER["path"]
    folder = tempfile.mkdtemp(prefix="tidehouse-prefork-")  # short: a Unix socket's path is <= 107 bytes
    try:
        process, path = start(folder)
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(ENV, None)
        logging.getLogger(__name__).warning("no fork server for Spark's Python runners: %s", exc)
        return None
    _SERVER.update(process=process, path=path)
    os.environ[ENV] = path

    def stop() -> None:
        process.kill()
        process.wait()
        shutil.rmtree(folder, ignore_errors=True)

    atexit.register(stop)
    return path


def start(folder: str) -> tuple[object, str]:
    """Start a fork server with its socket in ``folder`` (a short path: a Unix socket's is at most 107
    bytes); ``(process, socket path)`` once it listens."""
    import subprocess
    import time

    path = os.path.join(folder, "prefork.sock")
    command = [sys.executable, "-m", "runtime.spark.prefork", path]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise OSError(f"the fork server did not start (exit {process.poll()})")
        time.sleep(0.02)
    return process, path


def serve(path: str) -> None:
    """Import :data:`FORKED` and :data:`PRELOADED`, listen at ``path``, fork a child per request; end when
    the process that started this one does."""
    import importlib

    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for the driver (the JVM ignores it)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(64)  # launchers may connect now: their requests wait while the modules load
    os.rename(path + ".new", path)  # the socket appears only once it listens
    for name in (*FORKED, *PRELOADED):
        with contextlib.suppress(ImportError):  # one another PySpark lacks: a request imports it in the child
            importlib.import_module(name)
    base = _base_path()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket | None] = {}  # child pid -> its launcher's connection (None: gone)
    try:
        while os.getppid() == parent:
            waiting = [c for c in children.values() if c is not None]
            ready, _, _ = select.select([listener, wake_r, *waiting], [], [], 1.0)
            if wake_r in ready:
                os.read(wake_r, 512)
            for pid, conn in list(children.items()):
                if conn in ready and not _alive(conn):  # its launcher is gone (killed): so goes its child
                    conn.close()
                    children[pid] = None
                    _relay(pid, signal.SIGKILL)
            _reap(children)
            if listener in ready:
                conn, _ = listener.accept()
                try:
                    request, fds = _receive(conn)
                except (OSError, ValueError):
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    for other in children.values():
                        if other is not None:
                            other.close()
                    conn.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    _child(request, fds, base)  # never returns
                for fd in fds:
                    os.close(fd)
                children[pid] = conn
                with contextlib.suppress(OSError):  # a launcher gone meanwhile: found at the next select
                    conn.sendall(_LEN.pack(pid))
    finally:  # the driver is gone, and with it the JVM its children served (a SIGKILL ends none of them)
        for pid in list(children):
            _relay(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.unlink(path)
            os.rmdir(os.path.dirname(path))  # the driver's folder for it, left behind by a driver's kill -9


def _alive(conn: socket.socket) -> bool:
    """Whether a readable launcher's connection is still open (a launcher sends nothing after its request)."""
    try:
        return bool(conn.recv(1))
    except OSError:
        return False


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    if len(fds) != 3 or len(data) < _LEN.size:
        for fd in fds:
            os.close(fd)
        raise ValueError("a request without its three streams")
    size = _LEN.unpack(data[: _LEN.size])[0]
    data = data[_LEN.size :]
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionResetError("the launcher closed the connection")
        data += chunk
    return json.loads(data), fds


def _reap(children: dict[int, socket.socket | None]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(_LEN.pack(os.waitstatus_to_exitcode(status)))
            conn.close()


def _base_path() -> list[str]:
    """This interpreter's own ``sys.path``: without ``-m``'s working directory and ``PYTHONPATH``."""
    own = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]
    return [e for e in sys.path[1:] if e not in own]


def _child(request: dict, fds: list[int], base: list[str]) -> None:
    """In the forked child: become ``python -m module`` with the launcher's streams, environment and working
    directory."""
    import runpy

    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for signum in RELAYED:  # as Python starts with the launcher's dispositions
            default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
            signal.signal(signum, signal.SIG_IGN if signum in request["ignored"] else default)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        extra = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]
        sys.path[:] = [request["cwd"], *extra, *[e for e in base if e not in extra]]
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own streams, for its whole life
        sys.stdout = open(1, "w", closefd=False, buffering=1)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115
        sys.argv = [request["module"]]
        from runtime.spark.worker_memory import SOURCE_PROCESSES, refuse_pandas

        if request["module"] in SOURCE_PROCESSES:  # as the module's own imports would have done (datasource)
            refuse_pandas()
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - as Python would: the traceback on stderr, exit 1
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing left to tell
                stream.flush()
        os._exit(code & 0xFF)


if __name__ == "__main__":
    # one thread in the process that forks (a child has only the forking one): no BLAS thread pool, no
    # background thread of Arrow's jemalloc (which then purges in the allocating threads)
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    os.environ["JE_ARROW_MALLOC_CONF"] = "background_thread:false"
    serve(sys.argv[1])
