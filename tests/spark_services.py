"""Spark servers for tests, from the pyspark install: a standalone cluster and a Spark Connect server.

Session fixtures (registered for every test by ``tests/conftest.py``):

* ``spark_cluster`` -> :class:`StandaloneCluster`: a master and 2 workers (1 core, 2 GiB each) on free
  127.0.0.1 ports (``spark-class org.apache.spark.deploy.master.Master`` / ``...deploy.worker.Worker``);
  ``.url`` (``spark://127.0.0.1:PORT``), ``.kill_worker(i)`` (``kill -9`` of the worker and everything it
  started: its executor and the executor's Python workers), ``.restart_worker(i)``, ``.alive_workers()``.
* ``connect_server`` -> :class:`ConnectServer`: ``sbin/start-connect-server.sh`` in the foreground
  (``SPARK_NO_DAEMONIZE``) on a free port, its Spark on ``local[2]``; ``.url`` (``sc://127.0.0.1:PORT``).

Every process gets ``PYTHONPATH`` with this checkout first, so the executors' Python workers import the code
under test, and ``PYSPARK_PYTHON`` = the running interpreter (through ``tidehouse-python``). A server that
cannot start is a **failure** naming its log, never a skip. All run as children with a parent-death signal
(Linux) and are stopped by the fixtures (SIGTERM, then SIGKILL of their process groups).

Outside pytest (benchmarks): ``with StandaloneCluster.running(dir, workers=2) as cluster: ...``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.spark.launcher import worker_python
from tests.services import ServiceError, _death_signal, _tail, free_ports

REPO = Path(__file__).resolve().parent.parent


def spark_home() -> Path:
    import pyspark

    return Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)


def server_env(workdir: Path) -> dict[str, str]:
    """The environment Spark's servers (and the executors and Python workers they start) run with."""
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(workdir / "logs"),
        SPARK_PID_DIR=str(workdir / "pids"),
        SPARK_NO_DAEMONIZE="1",
        PYSPARK_PYTHON=worker_python(sys.executable),  # a Connect server's Python workers: docs/operations.md
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
    )
    return env


def _spawn(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own process group: kill -9 takes its children too
            preexec_fn=_death_signal(signal.SIGKILL),
        )


def _kill_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _stop_group(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    if proc.poll() is None:
        _kill_group(proc, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
    _kill_group(proc, signal.SIGKILL)  # and whatever the group still holds (executors, Python workers)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


class StandaloneCluster:
    """A running Spark standalone master with its workers, all on 127.0.0.1."""

    def __init__(
        self, workdir: Path, port: int, ui_port: int, master: subprocess.Popen, cores: int, memory: str
    ) -> None:
        self.workdir, self.port, self.ui_port, self.master = workdir, port, ui_port, master
        self.cores, self.memory = cores, memory
        self.url = f"spark://127.0.0.1:{port}"
        self.workers: list[subprocess.Popen | None] = []
        self.env = server_env(workdir)

    @classmethod
    def start(
        cls, workdir: Path, *, workers: int = 2, cores: int = 1, memory: str = "2g", timeout: float = 120.0
    ) -> StandaloneCluster:
        workdir.mkdir(parents=True, exist_ok=True)
        port, ui_port = free_ports(2)
        env = server_env(workdir)
        master = _spawn(
            [
                str(spark_home() / "bin" / "spark-class"),
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui_port),
            ],
            workdir / "master.log",
            env,
        )
        cluster = cls(workdir, port, ui_port, master, cores, memory)
        try:
            cluster._wait(lambda s: s is not None, timeout, "the master")
            for _ in range(workers):
                cluster.workers.append(None)
                cluster.restart_worker(len(cluster.workers) - 1, timeout=timeout)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _status(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def alive_workers(self) -> int:
        status = self._status()
        return 0 if status is None else int(status.get("aliveworkers", 0))

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready(self._status()):
                return
            if self.master.poll() is not None:
                break
            time.sleep(0.5)
        raise ServiceError(
            f"Spark standalone: {what} did not come up within {timeout:.0f} s; logs under {self.workdir}:\n"
            + _tail(self.workdir / "master.log")
        )

    def restart_worker(self, i: int, *, timeout: float = 120.0) -> None:
        """Start worker ``i`` (again) and wait until the master counts it alive."""
        before = self.alive_workers()
        ui = free_ports(1)[0]
        self.workers[i] = _spawn(
            [
                str(spark_home() / "bin" / "spark-class"),
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                "--host",
                "127.0.0.1",
                "--cores",
                str(self.cores),
                "--memory",
                self.memory,
                "--webui-port",
                str(ui),
                "--work-dir",
                str(self.workdir / f"worker-{i}"),
            ],
            self.workdir / f"worker-{i}.log",
            self.env,
        )
        self._wait(lambda s: s is not None and s.get("aliveworkers", 0) > before, timeout, f"worker {i}")

    def kill_worker(self, i: int) -> None:
        """``kill -9`` worker ``i``, its executor and their Python workers (a lost machine)."""
        proc = self.workers[i]
        if proc is not None:
            _kill_group(proc, signal.SIGKILL)
            proc.wait(30)
            self.workers[i] = None

    def stop(self) -> None:
        for proc in [*self.workers, self.master]:
            if proc is not None:
                _stop_group(proc)

    @classmethod
    @contextlib.contextmanager
    def running(cls, workdir: Path | None = None, **kwargs) -> Iterator[StandaloneCluster]:
        folder = workdir or Path(tempfile.mkdtemp(prefix="tidehouse-spark-"))
        cluster = cls.start(folder, **kwargs)
        try:
            yield cluster
        finally:
            cluster.stop()
            if workdir is None:
                shutil.rmtree(folder, ignore_errors=True)


class ConnectServer:
    """A running Spark Connect server (``sbin/start-connect-server.sh``, not daemonized)."""

    def __init__(self, workdir: Path, port: int, proc: subprocess.Popen) -> None:
        self.workdir, self.port, self.proc = workdir, port, proc
        self.url = f"sc://127.0.0.1:{port}"

    @classmethod
    def start(
        cls,
        workdir: Path,
        *,
        master: str = "local[2]",
        conf: dict[str, str] | None = None,
        port: int | None = None,
        timeout: float = 180.0,
    ) -> ConnectServer:
        """A server on ``port`` (a free one when None) whose Spark runs on ``master`` with ``conf``."""
        from runtime.spark.session import session_conf

        workdir.mkdir(parents=True, exist_ok=True)
        port = port or free_ports(1)[0]
        env = server_env(workdir)
        extra = {**(conf or {}), "spark.connect.grpc.binding.port": str(port)}
        conf = session_conf(master, extra, workdir / "logs")
        conf["spark.connect.grpc.binding.address"] = "127.0.0.1"
        cmd = [str(spark_home() / "sbin" / "start-connect-server.sh"), "--master", master]
        for key, value in conf.items():
            cmd += ["--conf", f"{key}={value}"]
        proc = _spawn(cmd, workdir / "connect.log", env)  # appends: a restarted server's log follows
        server = cls(workdir, port, proc)
        try:
            server._wait_ready(timeout)
        except BaseException:
            server.stop()
            raise
        return server

    def _wait_ready(self, timeout: float) -> None:
        import socket

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            with socket.socket() as s:
                s.settimeout(1)
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.5)
        raise ServiceError(
            f"Spark Connect server did not listen on {self.port} within {timeout:.0f} s:\n"
            + _tail(self.workdir / "connect.log")
        )

    def stop(self) -> None:
        _stop_group(self.proc)

    def kill(self) -> None:
        """``kill -9`` of the server (its JVM is the flow's Spark driver) and its Python workers."""
        _kill_group(self.proc, signal.SIGKILL)
        self.proc.wait(timeout=60)

    @classmethod
    @contextlib.contextmanager
    def running(cls, workdir: Path | None = None, **kwargs) -> Iterator[ConnectServer]:
        folder = workdir or Path(tempfile.mkdtemp(prefix="tidehouse-connect-"))
        server = cls.start(folder, **kwargs)
        try:
            yield server
        finally:
            server.stop()
            if workdir is None:
                shutil.rmtree(folder, ignore_errors=True)


# -- fixtures --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory) -> Iterator[StandaloneCluster]:
    """A standalone master + 2 workers for the test session; fails (never skips) when it cannot start."""
    try:
        cluster = StandaloneCluster.start(tmp_path_factory.mktemp("spark-cluster"))
    except ServiceError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory) -> Iterator[ConnectServer]:
    """A Spark Connect server for the whole test session; fails (never skips) when it cannot start."""
    try:
        server = ConnectServer.start(tmp_path_factory.mktemp("spark-connect"))
    except ServiceError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()
