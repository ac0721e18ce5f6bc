"""The driver's fork server (runtime/spark/prefork.py): ``tidehouse-python`` hands the driver's short-lived
runners to it, and each runs as ``python -m module`` would — its streams, environment, working directory,
exit code and signals — in a child forked from a process that imported PySpark once."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from runtime.spark import prefork
from runtime.spark.launcher import forked_module

RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"
PROBE = textwrap.dedent(
    """
    import os, sys, time
    print("pid", os.getpid(), "ppid", os.getppid(), flush=True)
    print("name", __name__, "argv0", os.path.basename(sys.argv[0]))
    print("cwd", os.getcwd(), "path0", sys.path[0], "imports", sys.path[1])
    print("env", os.environ.get("PROBE_VALUE"), "stdin", sys.stdin.readline().strip())
    import signal
    print("sigint", "ignored" if signal.getsignal(signal.SIGINT) == signal.SIG_IGN else "handled")
    print("to stderr", file=sys.stderr)
    time.sleep(float(os.environ.get("PROBE_SLEEP", "0")))
    sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
    """
)
LAUNCH = (
    "import sys; from runtime.spark import prefork; prefork.exit_as(prefork.run_forked(sys.argv[1], 'probe'))"
)


@pytest.fixture
def server(tmp_path):
    """A fork server of this test (short socket path), and the folder of the probe module."""
    folder = tempfile.mkdtemp(prefix="th-pf-")
    process, path = prefork.start(folder)
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "probe.py").write_text(PROBE)
    yield process, path, modules
    process.kill()
    process.wait()


def _launch(path: str, modules: Path, cwd: Path, *, sigint: bool = True, **env: str) -> subprocess.Popen:
    """A launcher as the JVM starts one; ``sigint=False``: with SIGINT ignored, as PySpark starts the JVM
    (``sigint=True`` sets its default: a test run in the background of a shell starts with it ignored)."""
    environment = dict(os.environ, PYTHONPATH=str(modules), **env)
    command = [sys.executable, "-c", LAUNCH, path]
    disposition = signal.SIG_DFL if sigint else signal.SIG_IGN

    def set_sigint() -> None:
        signal.signal(signal.SIGINT, disposition)

    return subprocess.Popen(
        command, cwd=cwd, env=environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=set_sigint,
    )  # fmt: skip


def _fields(out: str) -> dict[str, str]:
    fields = {}
    for line in out.splitlines():
        words = line.split()
        fields.update(zip(words[::2], words[1::2]))
    return fields


def _gone(pid: int, within: float = 20.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with contextlib.suppress(ChildProcessError):  # a child of this process (a server) is reaped here
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    return False


def test_a_forked_module_runs_as_python_would_run_it(server, tmp_path):
    process, path, modules = server
    work = tmp_path / "work"
    work.mkdir()
    launcher = _launch(path, modules, work, PROBE_VALUE="from-the-launcher", PROBE_EXIT="7")
    out, err = launcher.communicate("a line on stdin\n", timeout=60)
    fields = _fields(out)
    assert launcher.returncode == 7, (out, err)
    assert fields["ppid"] == str(process.pid)  # forked by the server, not started by the launcher
    assert fields["pid"] != str(launcher.pid)
    assert fields["name"] == "__main__" and fields["argv0"] == "probe.py"
    assert fields["cwd"] == str(work) and fields["path0"] == str(work) and fields["imports"] == str(modules)
    assert fields["env"] == "from-the-launcher" and fields["stdin"] == "a"
    assert fields["sigint"] == "handled"
    assert err.strip() == "to stderr"


def test_a_launcher_started_with_sigint_ignored_has_a_child_that_ignores_it(server, tmp_path):
    process, path, modules = server
    launcher = _launch(path, modules, tmp_path, sigint=False, PROBE_SLEEP="600")
    launcher.stdin.write("\n")
    launcher.stdin.flush()
    child = int(launcher.stdout.readline().split()[1])
    fields = _fields("".join(launcher.stdout.readline() for _ in range(4)))
    assert fields["sigint"] == "ignored"  # a terminal's Ctrl-C reaches the driver, not Spark's runners
    launcher.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert launcher.poll() is None and process.poll() is None and not _gone(child, within=0.1)
    launcher.terminate()
    assert launcher.wait(timeout=30) == -signal.SIGTERM and _gone(child)


def test_signals_reach_the_child_and_a_killed_launcher_takes_its_child_along(server, tmp_path):
    process, path, modules = server
    launcher = _launch(path, modules, tmp_path, PROBE_SLEEP="600")
    launcher.stdin.write("\n")
    launcher.stdin.flush()
    child = int(launcher.stdout.readline().split()[1])
    launcher.send_signal(signal.SIGTERM)  # as the JVM stops a worker (Process.destroy)
    assert launcher.wait(timeout=30) == -signal.SIGTERM  # it ended as its child did: by the signal
    assert _gone(child)

    launcher = _launch(path, modules, tmp_path, PROBE_SLEEP="600")
    launcher.stdin.write("\n")
    launcher.stdin.flush()
    child = int(launcher.stdout.readline().split()[1])
    launcher.kill()
    launcher.wait(timeout=30)
    assert _gone(child), "the server did not kill the child of a launcher killed with SIGKILL"
    assert process.poll() is None  # and serves on


def test_without_a_server_the_launcher_says_so_and_python_runs_the_module(tmp_path, capfd):
    assert prefork.run_forked(str(tmp_path / "no.sock"), "probe") is None
    assert f"no fork server at {tmp_path / 'no.sock'}" in capfd.readouterr().err
    # the installed launcher, pointed at no server, runs a module of FORKED as Spark would: with Python
    launcher = Path(sys.executable).parent / "tidehouse-python"
    env = dict(os.environ, TIDEHOUSE_PREFORK=str(tmp_path / "no.sock"))
    env.pop("PYTHONPATH", None)
    out = subprocess.run(
        [str(launcher), "-m", RUNNER], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert "no fork server at" in out.stderr
    # started by Python, the runner then fails to connect to its JVM (none here), in its own code
    assert 'python_streaming_source_runner.py", line' in out.stderr, out.stderr[-2000:]


def test_the_server_and_its_children_end_with_the_process_that_started_it(tmp_path):
    """A driver killed with -9 (here: ending without its atexit handlers) leaves no server and no runner."""
    folder = tempfile.mkdtemp(prefix="th-pf-")
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "probe.py").write_text(PROBE)
    code = (
        "import os, subprocess, sys; from runtime.spark import prefork; "
        "process, path = prefork.start(sys.argv[1]); "
        "launcher = subprocess.Popen([sys.executable, '-c', sys.argv[2], path], stdin=subprocess.PIPE, "
        "stdout=subprocess.PIPE, text=True); launcher.stdin.write('\\n'); launcher.stdin.flush(); "
        "child = launcher.stdout.readline().split()[1]; print(process.pid, path, child, flush=True); "
        "os._exit(0)"
    )  # os._exit: no atexit handler, as after a kill -9
    env = dict(os.environ, PYTHONPATH=str(modules), PROBE_SLEEP="600")
    out = subprocess.run(
        [sys.executable, "-c", code, folder, LAUNCH], env=env, capture_output=True, text=True, timeout=120,
        check=True,
    )  # fmt: skip
    pid, path, child = out.stdout.split()
    assert _gone(int(pid)), "the fork server outlived its driver"
    assert _gone(int(child)), "a forked runner outlived the driver"
    assert not os.path.exists(path) and not os.path.exists(folder)


def test_only_the_drivers_runners_of_the_installed_pyspark_are_forked():
    assert forked_module(["-m", RUNNER], None, "/tmp/s.sock") == RUNNER
    assert forked_module(["-m", RUNNER], "/x", "/tmp/s.sock") == RUNNER
    assert forked_module(["-m", RUNNER], None, None) is None  # no server
    assert forked_module(["-m", "pyspark.daemon"], None, "/tmp/s.sock") is None  # forks its own workers
    planner = ["-m", "pyspark.daemon", "pyspark.sql.worker.plan_data_source_read"]
    assert forked_module(planner, None, "/tmp/s.sock") is None
    assert forked_module(["-m", RUNNER, "x"], None, "/tmp/s.sock") is None
    assert forked_module(["-c", "print(1)"], None, "/tmp/s.sock") is None
    zipped = os.pathsep.join(["/spark/python/lib/pyspark.zip", "/spark/python/lib/py4j.zip"])
    assert forked_module(["-m", RUNNER], zipped, "/tmp/s.sock") is None  # Spark's own PySpark runs


@pytest.mark.spark
def test_a_streaming_querys_source_runner_is_a_child_of_the_drivers_fork_server(spark, store, root, tmp_path):
    import pyarrow as pa

    from runtime.storage.api import TableMeta
    from tests.spark._sparkkit import read_stream, wait_for

    server = prefork._SERVER["process"]
    assert server.poll() is None and prefork.ENV not in os.environ  # the JVM has it, no other program
    store.create_table(TableMeta("dwd.events", pa.schema([("u", pa.string())])), exist_ok=True)
    store.write("dwd.events", pa.table({"u": ["a", "b"]}), writer="w", seq=1)
    query = (
        read_stream(spark, root, "dwd.events")
        .writeStream.format("memory")
        .queryName("prefork_probe")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: spark.sql("SELECT * FROM prefork_probe").count() == 2, what="the query's rows")
        children = [p for p in os.listdir("/proc") if p.isdigit() and _ppid(p) == server.pid]
        assert children, "no process forked by the fork server while a tidehouse stream runs"
        for child in children:  # its pages are the server's, without pandas (runtime/spark/worker_memory.py)
            maps = Path(f"/proc/{child}/maps").read_text()
            assert "pyarrow" in maps and "/pandas/" not in maps
    finally:
        query.stop()


def _ppid(pid: str) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2 :].split()[1])
