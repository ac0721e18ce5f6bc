"""Side by side with Spark Declarative Pipelines: the same 4-layer flow, freshness per layer (issue 8).

One generator writes JSON event files at a steady rate into a directory. The same four layers —
land raw (ODS) → clean (DWD) → spend per user (DWS) → the 100 biggest spenders (ADS) — run as

* an idiomatic SDP pipeline (``benchmarks/sdp_project``: streaming tables for ODS/DWD, materialized views for
  DWS/ADS), driven the way its users keep it fresh: ``spark-pipelines run`` in a loop with no pause, and on
  a 60 s schedule;
* a Tidehouse flow (``benchmarks/vs_sdp_flow``) under ``tidehouse flow trigger`` with tiering every 5 s and
  every 30 s.

Probes are marker events (a unique ``user_id`` with a large price) written at known times; per layer we
record when the marker's effect first becomes visible to an outside reader — SDP: a batch read of the
warehouse's committed Parquet files; Tidehouse: the hot table through the store, and the lake table
through pyiceberg. The systems run one after the other on the same input rate (the machine has 2 cores).

    .venv/bin/pip install -e '.[bench]' && .venv/bin/python benchmarks/vs_sdp.py          # full, < 20 min
    .venv/bin/python benchmarks/vs_sdp.py --quick                                          # smoke, ~3 min

Writes the ``vs_sdp`` section of docs/benchmarks.md and docs/img/vs_sdp.png; docs/vs_sdp.md explains the
settings.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence
from urllib.parse import unquote, urlparse

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: make `benchmarks` and the runtime importable
    sys.path.insert(0, str(REPO))

LAYERS = ("ODS", "DWD", "DWS", "ADS")
SDP_TABLES = {"ODS": "ods_events", "DWD": "dwd_events", "DWS": "dws_user_spend", "ADS": "ads_top_spenders"}
SDP_STREAMING = {"ODS", "DWD"}  # streaming tables (file sink with a commit log); the others are views
TH_TABLES = {"ODS": "ods.events", "DWD": "dwd.events", "DWS": "dws.user_spend", "ADS": "ads.top_spenders"}
PROBE_PREFIX = "zz-probe-"  # sorts after every generated user id, so lake min/max statistics prune it
# A probe's price is PROBE_PRICE + its number: each new probe user becomes the top spender (rank 1 of the
# ADS top 100) and stays in the top 100 for the next 99 probes, long enough for any tiering cycle to see it.
PROBE_PRICE = 1_000_000.0
IMG = REPO / "docs" / "img" / "vs_sdp.png"


# ---------------------------------------------------------------------------------------------------------
# statistics
# ---------------------------------------------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Summary:
    n: int
    p50: float
    p95: float
    max: float
    unseen: int = 0  # probes never seen: counted at the time the run ended (a lower bound of their delay)

    @classmethod
    def of(cls, delays: Sequence[float], unseen: Sequence[float] = ()) -> "Summary":
        values = [*delays, *unseen]
        top = max(values) if values else math.nan
        return cls(len(values), percentile(values, 50), percentile(values, 95), top, len(unseen))


def delay_slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of delay over time, in seconds of delay per minute of input.

    ``points`` are ``(written_at, delay)``. A system that keeps up has a slope near 0 (its delay saw-tooths
    around a level); one that falls behind has a positive slope.
    """
    if len(points) < 2:
        return 0.0
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0
    return 60.0 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


def keeps_up(points: Sequence[tuple[float, float]], *, tolerance_s: float = 2.0) -> bool:
    """True if the delay did not grow over the window: the fitted growth across the whole window stays
    within ``tolerance_s`` or half the median delay, whichever is larger (a saw-tooth cut at the window's
    edges fits a small slope of its own; a system falling behind grows by more than its median)."""
    if len(points) < 3:
        return True
    span_min = (max(p[0] for p in points) - min(p[0] for p in points)) / 60.0
    growth = delay_slope(points) * span_min
    return growth <= max(tolerance_s, 0.5 * percentile([p[1] for p in points], 50))


# ---------------------------------------------------------------------------------------------------------
# memory of a process tree
# ---------------------------------------------------------------------------------------------------------
def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    return children


def tree_rss_bytes(root: int) -> int:
    """Resident memory of a process and all its descendants (Linux /proc), in bytes."""
    children, total, todo, seen = _children_map(), 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/statm") as fh:
                total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            continue
        todo.extend(children.get(pid, ()))
    return total


# ---------------------------------------------------------------------------------------------------------
# input: one generator for both systems
# ---------------------------------------------------------------------------------------------------------
class Generator:
    """Writes event files into ``directory`` at ``rate`` rows/s (one file every ``file_interval`` s) and,
    while probing, one marker file every ``probe_interval`` s on average.

    Probe spacing is jittered uniformly in ±25% of the interval (seeded): with a fixed spacing that is a
    multiple of the file interval and of a processing-time trigger, every probe would land at the same phase
    of both, and the delay would carry a bias that changes from run to run.

    Files are written under a hidden name and renamed, so readers never see a partial file; the moment of
    the rename is a marker's ``written_at``. Rows come from a pool rendered once (the generator must stay
    cheap on 2 cores); each file stamps the current time into ``ts``. About 2% of rows are malformed (an
    unknown event type or a negative price) so the clean layer has work to do.
    """

    def __init__(self, directory: Path, rate: int, *, file_interval: float = 0.5, seed: int = 8,
                 users: int = 20_000, pool: int = 50_000) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.rate, self.file_interval = rate, file_interval
        rnd = random.Random(seed)
        self._jitter = random.Random(seed + 1)
        types = ["click", "view", "add_to_cart", "CLICK", "View"]
        lines = []
        for _ in range(pool):
            bad = rnd.random() < 0.02
            event = "bogus" if bad and rnd.random() < 0.5 else rnd.choice(types)
            price = -1.0 if bad and event != "bogus" else round(rnd.uniform(0.5, 500.0), 2)
            lines.append(json.dumps({"user_id": f"u{rnd.randrange(users):06d}", "event_type": event,
                                     "item_id": f"i{rnd.randrange(5000)}", "price": price, "ts": "@TS@"}))
        self._pool, self._cursor, self._seq = lines, 0, 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._probe_until = 0.0
        self._next_probe = 0.0
        self.probe_interval = 4.0
        self.probes: dict[str, float] = {}  # marker id -> written_at (measured)
        self.warmups: dict[str, float] = {}  # markers that only wait for a system to be up (not measured)
        self.bursts: dict[str, float] = {}  # markers written right after a burst (catch-up measurement)
        self.rows_written = 0
        self._lock = threading.Lock()  # guards the marker dicts
        self._write_lock = threading.Lock()  # one writer at a time: the generator thread or a burst

    def _write(self, stem: str, body: str) -> float:
        tmp = self.directory / f".{stem}.tmp"
        tmp.write_text(body, encoding="utf-8")
        os.replace(tmp, self.directory / f"{stem}.json")
        return time.time()

    def write_batch(self, rows: int) -> None:
        if rows <= 0:
            return
        with self._write_lock:
            self._write_batch(rows)

    def _write_batch(self, rows: int) -> None:
        chunk = []
        while len(chunk) < rows:
            take = self._pool[self._cursor:self._cursor + rows - len(chunk)]
            chunk.extend(take)
            self._cursor = (self._cursor + len(take)) % len(self._pool)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z"
        self._seq += 1
        self._write(f"data-{self._seq:08d}", "\n".join(chunk).replace("@TS@", stamp) + "\n")
        self.rows_written += rows

    def write_probe(self, name: str, *, kind: str = "probe") -> str:
        """Write one marker file; ``kind`` is ``probe`` (measured), ``warmup`` or ``burst``."""
        marker = f"{PROBE_PREFIX}{name}"
        with self._write_lock:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z"
            self._seq += 1
            row = {"user_id": marker, "event_type": "click", "item_id": "probe",
                   "price": PROBE_PRICE + self._seq, "ts": stamp}
            written = self._write(f"probe-{self._seq:08d}", json.dumps(row) + "\n")
        with self._lock:
            {"probe": self.probes, "warmup": self.warmups, "burst": self.bursts}[kind][marker] = written
        return marker

    def write_burst(self, rows: int, *, file_rows: int = 50_000) -> None:
        """Write ``rows`` extra rows at once, in files of ``file_rows`` (a backlog, as after an outage); the
        steady input keeps flowing around it."""
        while rows > 0:
            self.write_batch(min(rows, file_rows))
            rows -= file_rows

    def probe_window(self, seconds: float, interval: float) -> None:
        """Write a probe every ``interval`` s for the next ``seconds`` s (from the generator's thread)."""
        self.probe_interval = interval
        self._next_probe = time.time()
        self._probe_until = time.time() + seconds

    def probe_gap(self) -> float:
        """Seconds until the next probe: ``probe_interval`` jittered by ±25%."""
        return self.probe_interval * self._jitter.uniform(0.75, 1.25)

    def probing(self) -> bool:
        return time.time() < self._probe_until

    def pending(self) -> dict[str, float]:
        with self._lock:
            return {**self.warmups, **self.bursts, **self.probes}

    def new_phase(self) -> None:
        """Forget the markers of an earlier phase (the data keeps flowing)."""
        with self._lock:
            self.probes, self.warmups, self.bursts = {}, {}, {}
        self._probe_until = 0.0

    def measured(self) -> dict[str, float]:
        with self._lock:
            return dict(self.probes)

    def start(self) -> "Generator":
        self._thread = threading.Thread(target=self._run, name="generator", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        next_file, carry, probe_no = time.time(), 0.0, 0
        while not self._stop.is_set():
            now = time.time()
            if self.probing() and now >= self._next_probe:
                probe_no += 1
                self.write_probe(f"{self._seq:08d}-{probe_no:04d}")
                self._next_probe += self.probe_gap()
            if now >= next_file:
                carry += self.rate * self.file_interval
                rows = int(carry)
                carry -= rows
                self.write_batch(rows)
                next_file += self.file_interval
                if next_file < now - 5 * self.file_interval:  # fell far behind: do not burst to catch up
                    next_file = now
            self._stop.wait(max(0.0, min(next_file, self._next_probe if self.probing() else next_file)
                                - time.time()))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


# ---------------------------------------------------------------------------------------------------------
# readers: which markers does a table show right now?
# ---------------------------------------------------------------------------------------------------------
Reader = Callable[[set[str]], set[str]]  # wanted markers -> the ones visible now


def _markers_in(column, wanted: set[str]) -> set[str]:
    import pyarrow.compute as pc

    if not wanted or len(column) == 0:
        return set()
    hits = pc.filter(column, pc.is_in(column, value_set=__import__("pyarrow").array(sorted(wanted))))
    return set(hits.to_pylist())


def _read_user_ids(path: str):
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=["user_id"]).column("user_id")


class SdpTableReader:
    """A batch read of one SDP table in the Spark warehouse, as any outside reader would do it.

    A streaming table is a file-sink directory: only files listed in its ``_spark_metadata`` commit log are
    committed. A materialized view is rewritten by each run: its committed files are the ``part-*`` files
    (the job commit moves them out of ``_temporary``). Every Parquet file is immutable, so each is read once
    and the markers it holds are remembered.
    """

    def __init__(self, table_dir: Path, streaming: bool) -> None:
        self.table_dir, self.streaming = Path(table_dir), streaming
        self._read: dict[str, set[str]] = {}
        self._logs_done: set[str] = set()
        self._committed: set[str] = set()

    def _files(self) -> list[str]:
        if self.streaming:
            log = self.table_dir / "_spark_metadata"
            if not log.is_dir():
                return []
            for entry in sorted(os.listdir(log)):
                if entry.startswith(".") or entry in self._logs_done:
                    continue
                try:
                    lines = (log / entry).read_text(encoding="utf-8").splitlines()[1:]
                except (OSError, UnicodeDecodeError):
                    continue
                for line in lines:
                    item = json.loads(line)
                    if item.get("action", "add") == "add":
                        self._committed.add(unquote(urlparse(item["path"]).path))
                self._logs_done.add(entry)
            return sorted(self._committed)
        try:
            names = os.listdir(self.table_dir)
        except OSError:
            return []
        return [str(self.table_dir / n) for n in names if n.startswith("part-") and n.endswith(".parquet")]

    def __call__(self, wanted: set[str]) -> set[str]:
        found: set[str] = set()
        current = self._files()
        for path in current:
            if path not in self._read:
                try:
                    ids = _read_user_ids(path)
                except (OSError, ValueError):  # an overwritten view file vanished: read it next time
                    continue
                self._read[path] = _markers_in(ids, wanted)
        for path in current:
            found |= self._read.get(path, set())
        if not self.streaming:  # forget files of older view versions
            live = set(current)
            self._read = {p: v for p, v in self._read.items() if p in live}
        return found & wanted


class HotReader:
    """Reads a Tidehouse hot table's log (or changelog) incrementally through the store."""

    def __init__(self, store, table: str) -> None:
        self.store, self.table = store, table
        self._next: list[int] = []

    def __call__(self, wanted: set[str]) -> set[str]:
        from runtime.errors import TidehouseError

        try:
            ends = self.store.end_offsets(self.table)
        except TidehouseError:  # not created yet
            return set()
        self._next += [0] * (len(ends) - len(self._next))
        found: set[str] = set()
        for bucket, end in enumerate(ends):
            if end > self._next[bucket]:
                batches = self.store.read(self.table, bucket, self._next[bucket], end, columns=["user_id"])
                for batch in batches:
                    found |= _markers_in(batch.column("user_id"), wanted)
                self._next[bucket] = end
        return found


class LakeReader:
    """Reads a Tidehouse lake table with plain pyiceberg whenever it has a new snapshot."""

    def __init__(self, lake, table: str) -> None:
        self.lake, self.table = lake, table
        self._iceberg = None
        self._snapshot = None
        self._seen: set[str] = set()

    def __call__(self, wanted: set[str]) -> set[str]:
        from pyiceberg.expressions import In

        from runtime.errors import TidehouseError

        try:
            if self._iceberg is None:
                self._iceberg = self.lake.load(self.table)
            else:
                self._iceberg.refresh()
        except TidehouseError:
            return set()
        snapshot = self._iceberg.current_snapshot()
        pending = wanted - self._seen
        if snapshot is None or not pending or snapshot.snapshot_id == self._snapshot:
            return self._seen & wanted
        self._snapshot = snapshot.snapshot_id
        ids = self._iceberg.scan(row_filter=In("user_id", pending), selected_fields=("user_id",)).to_arrow()
        self._seen |= _markers_in(ids.column("user_id"), pending)
        return self._seen & wanted


# ---------------------------------------------------------------------------------------------------------
# probes: poll every reader, record first visibility
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Observation:
    """First-visibility times of markers in one (system, layer, tier) series."""

    label: str
    seen: dict[str, float] = field(default_factory=dict)

    def delays(self, probes: dict[str, float]) -> list[float]:
        return [self.seen[m] - t for m, t in probes.items() if m in self.seen]

    def points(self, probes: dict[str, float]) -> list[tuple[float, float]]:
        return sorted((t, self.seen[m] - t) for m, t in probes.items() if m in self.seen)


class Prober:
    """Polls every reader every ``interval`` s in one thread; a marker's visibility time is the end of the
    read that first returned it (an upper bound, off by at most one poll plus one read).

    It also samples the resident memory of the system's process tree (``pids()`` gives the current roots)."""

    def __init__(self, generator: Generator, readers: dict[str, Reader], pids: Callable[[], Iterable[int]],
                 interval: float = 0.25) -> None:
        self.generator, self.readers, self.pids, self.interval = generator, readers, pids, interval
        self.observations = {label: Observation(label) for label in readers}
        self.peak_rss = 0
        self.loads: list[float] = []  # 1-minute load average, sampled every second
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="prober", daemon=True)

    def start(self) -> "Prober":
        self._thread.start()
        return self

    def _run(self) -> None:
        last_mem = 0.0
        while not self._stop.is_set():
            probes = self.generator.pending()
            for label, reader in self.readers.items():
                obs = self.observations[label]
                wanted = set(probes) - set(obs.seen)
                if not wanted:
                    continue
                try:
                    visible = reader(wanted)
                except Exception as exc:  # a reader racing a writer: note it, try again next poll
                    self.errors.append(f"{label}: {type(exc).__name__}: {exc}")
                    continue
                now = time.time()
                for marker in visible - set(obs.seen):
                    obs.seen[marker] = now
            if time.time() - last_mem >= 1.0:
                last_mem = time.time()
                self.peak_rss = max(self.peak_rss, sum(tree_rss_bytes(p) for p in self.pids()))
                self.loads.append(os.getloadavg()[0])
            self._stop.wait(self.interval)

    def all_seen(self, markers: Iterable[str]) -> bool:
        markers = set(markers)
        return all(markers <= set(o.seen) for o in self.observations.values())

    def wait_seen(self, markers: Iterable[str], timeout: float,
                  alive: Callable[[], bool] = lambda: True) -> bool:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.all_seen(markers):
                return True
            if not alive():
                return False
            time.sleep(0.2)
        return self.all_seen(markers)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


# ---------------------------------------------------------------------------------------------------------
# the two systems
# ---------------------------------------------------------------------------------------------------------
VENV_BIN = Path(sys.executable).parent


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"  # spark-pipelines calls find-spark-home
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env.pop("SPARK_HOME", None)
    return env


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _terminate(proc: subprocess.Popen | None, grace: float, *, group: bool = False) -> None:
    """SIGTERM the process (``group``: its whole process group), wait up to ``grace`` s, then SIGKILL
    whatever is left of the group (a JVM child must not outlive the run and hold its ports)."""
    if proc is None:
        return
    if proc.poll() is None:
        if group:
            _killpg(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    _killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _wait_port_free(port: int, timeout: float = 60.0) -> None:
    """Wait until nothing listens on localhost:``port`` (the Spark Connect server of the previous run)."""
    import socket

    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) != 0:
                return
        time.sleep(0.5)


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# Spark settings both systems share (Tidehouse gets them from runtime.spark.session's defaults): a 2-core
# machine wants 2 shuffle partitions, not 200; no UI; UTC.
SDP_SERVER_CONF = {
    "spark.sql.catalogImplementation": "hive",  # tables must outlive one run: embedded Derby metastore
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.default.parallelism": "2",
}
SDP_PIPELINE_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
}


class Sdp:
    """The SDP pipeline under ``workdir/sdp``, run by the real ``spark-pipelines`` CLI."""

    def __init__(self, workdir: Path, input_dir: Path) -> None:
        import yaml

        self.project = workdir / "sdp"
        shutil.copytree(REPO / "benchmarks" / "sdp_project", self.project,
                        ignore=shutil.ignore_patterns("__pycache__", "spark-warehouse", "metastore_db"))
        spec_path = self.project / "spark-pipeline.yml"
        spec = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
        spec["storage"] = (workdir / "sdp-storage").as_uri()
        spec["configuration"] = {**spec.get("configuration", {}), **SDP_PIPELINE_CONF,
                                 "tidehouse.bench.input": str(input_dir)}
        spec_path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
        self.log = workdir / "sdp.log"
        self.warehouse = self.project / "spark-warehouse"
        self.runs: list[tuple[float, float]] = []
        self.running_since: float | None = None  # start of the run in progress
        self.proc: subprocess.Popen | None = None
        self.failure: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def command(self) -> list[str]:
        conf = [arg for k, v in SDP_SERVER_CONF.items() for arg in ("--conf", f"{k}={v}")]
        # --remote local[2]: the Spark Connect server spark-pipelines starts gets both cores, like Tidehouse's
        # local[2] (spark-pipelines' default, `local`, is a single worker thread)
        return [str(VENV_BIN / "spark-pipelines"), "--remote", "local[2]", *conf, "run"]

    def readers(self) -> dict[str, Reader]:
        return {f"{layer} SDP": SdpTableReader(self.warehouse / SDP_TABLES[layer], layer in SDP_STREAMING)
                for layer in LAYERS}

    def run_once(self) -> None:
        _wait_port_free(15002)  # the Spark Connect port every spark-pipelines run binds
        start = self.running_since = time.time()
        with open(self.log, "a", encoding="utf-8") as log:
            log.write(f"\n===== run at {time.strftime('%H:%M:%S')} =====\n")
            log.flush()
            self.proc = subprocess.Popen(self.command(), cwd=self.project, env=_env(), stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
            rc = self.proc.wait()
        _terminate(self.proc, 0)  # reap anything the run left behind in its process group
        try:
            if self._stop.is_set():
                return  # stopped on purpose mid-run
            if rc != 0:
                raise RuntimeError(f"spark-pipelines run exited {rc}; the end of {self.log}:\n{_tail(self.log)}")
            self.runs.append((start, time.time()))
        finally:
            self.running_since = None  # after the run is in `runs`: settled() must not see it missing

    def _drive(self, period: float | None) -> None:
        origin = time.time()
        try:
            while not self._stop.is_set():
                self.run_once()
                if period:  # cron-like: the next tick of the schedule; ticks during a run are skipped
                    next_tick = origin + math.ceil((time.time() - origin) / period) * period
                    self._stop.wait(max(0.0, next_tick - time.time()))
        except Exception as exc:
            self.failure = str(exc)

    def start(self, period: float | None = None) -> None:
        """Run the pipeline back to back (``period=None``) or at every ``period`` s tick, in a thread."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._drive, args=(period,), name="sdp", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self.failure is None

    def settled(self, since: float) -> bool:
        """True once every run that started before ``since`` has ended (and is in ``runs``)."""
        started = self.running_since
        return started is None or started > since

    def pids(self) -> list[int]:
        proc = self.proc
        return [proc.pid] if proc is not None and proc.poll() is None else []

    def stop(self) -> None:
        self._stop.set()
        _terminate(self.proc, grace=20, group=True)
        if self._thread is not None:
            self._thread.join()


class Tidehouse:
    """The Tidehouse flow under ``workdir/th-<T>``, run by ``tidehouse flow trigger``."""

    def __init__(self, workdir: Path, input_dir: Path, tiering_s: float) -> None:
        import yaml

        base = workdir / f"th-{tiering_s:g}s"
        self.project, self.home = base / "project", base / "home"
        shutil.copytree(REPO / "benchmarks" / "vs_sdp_flow", self.project,
                        ignore=shutil.ignore_patterns("__pycache__", ".tidehouse"))
        # the flow uses the shipped standard library of actions (ingest, clean_clicks, sum_by_key, top_n)
        shutil.copytree(REPO / "actions", self.project / "actions", dirs_exist_ok=True)
        self.flow_path = self.project / "flows" / "vs_sdp.yaml"
        flow = yaml.safe_load(self.flow_path.read_text(encoding="utf-8"))
        flow["sources"]["events"]["path"] = str(input_dir)
        flow["tiering"] = {"interval": f"{tiering_s:g}s"}
        self.flow_path.write_text(yaml.safe_dump(flow, sort_keys=False), encoding="utf-8")
        self.tiering_s = tiering_s
        self.log = base / "tidehouse.log"
        self.proc: subprocess.Popen | None = None
        self._project = None
        self.restarts, self.max_restarts = 0, 1
        self.notes: list[str] = []
        self._duration, self._started = 0.0, 0.0

    def command(self, duration: float) -> list[str]:
        return [str(VENV_BIN / "tidehouse"), "--home", str(self.home), "flow", "trigger", str(self.flow_path),
                "--duration", f"{duration:.0f}"]

    def readers(self) -> dict[str, Reader]:
        from runtime.project import Project

        self._project = Project.open(home=self.home, project_dir=self.project)
        readers: dict[str, Reader] = {}
        for layer in LAYERS:
            readers[f"{layer} hot"] = HotReader(self._project.store, TH_TABLES[layer])
        for layer in LAYERS:
            readers[f"{layer} lake"] = LakeReader(self._project.lake, TH_TABLES[layer])
        return readers

    def start(self, duration: float) -> None:
        self._duration, self._started = duration, time.time()
        with open(self.log, "a", encoding="utf-8") as log:
            self.proc = subprocess.Popen(self.command(duration), cwd=self.project, env=_env(), stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def alive(self) -> bool:
        """True while the flow runs. A flow that failed is triggered again once (it resumes where it stopped,
        as a supervisor would restart it); the restart and its cause are reported with the run."""
        if self.proc is not None and self.proc.poll() not in (None, 0) and self.restarts < self.max_restarts:
            cause = next((ln for ln in reversed(_tail(self.log, 80).splitlines()) if ln.startswith("error:")),
                         f"exit code {self.proc.returncode}")
            self.notes.append(f"flow trigger failed after {time.time() - self._started:.0f} s and was "
                              f"triggered again: {cause}")
            print(f"[tidehouse] {self.notes[-1]}", flush=True)
            self.restarts += 1
            self.start(self._duration)
        return self.proc is not None and self.proc.poll() is None

    @property
    def failure(self) -> str | None:
        if self.proc is not None and self.proc.poll() not in (None, 0):
            return (f"tidehouse flow trigger exited {self.proc.returncode}; the end of {self.log}:\n"
                    f"{_tail(self.log)}")
        return None

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.alive() else []

    def settled(self, since: float) -> bool:
        return True  # one long-running process: nothing to wait for

    def stop(self) -> None:
        _terminate(self.proc, grace=60)
        if self._project is not None:
            self._project.close()


# ---------------------------------------------------------------------------------------------------------
# one measured phase: start a system, warm up, probe, drain, stop
# ---------------------------------------------------------------------------------------------------------
@dataclass
class CatchUp:
    """A burst of ``rows`` written from ``began`` on, a marker right after it at ``written``, and when that
    marker was first visible in the ADS table (``seen``; None if not within the wait)."""

    rows: int
    began: float
    written: float
    seen: float | None
    peak_rss: int = 0  # resident memory of the system during the catch-up

    def to_json(self) -> dict:
        return {"rows": self.rows, "began": self.began, "written": self.written, "seen": self.seen,
                "peak_rss": self.peak_rss}


@dataclass
class Phase:
    name: str  # e.g. "SDP loop", "Tidehouse T=5s"
    rate: int
    probes: dict[str, float]
    observations: dict[str, Observation]
    peak_rss: int
    rows: int
    seconds: float
    runs: list[tuple[float, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    load: float | None = None  # mean 1-minute load average of the machine during the run
    ended: float = 0.0  # epoch seconds when measuring stopped
    catchup: CatchUp | None = None

    def summary(self, label: str) -> Summary:
        """Delays of one series; a probe never seen counts with the time it waited until the run ended, so
        percentiles are never flattered by dropping the slowest probes."""
        seen = self.observations[label].seen
        end = self.ended or max((t for o in self.observations.values() for t in o.seen.values()), default=0.0)
        unseen = [end - t for m, t in self.probes.items() if m not in seen]
        return Summary.of(self.observations[label].delays(self.probes), unseen)

    def lag(self, layer: str) -> Summary:
        """How far a Tidehouse lake table was behind its hot table: per probe, lake visibility minus hot
        visibility (the brief's "lake delay", bounded by one tiering cycle at any depth)."""
        hot, lake = self.observations[f"{layer} hot"].seen, self.observations[f"{layer} lake"].seen
        return Summary.of([lake[m] - hot[m] for m in self.probes if m in hot and m in lake])

    def to_json(self) -> dict:
        return {"name": self.name, "rate": self.rate, "probes": self.probes, "peak_rss": self.peak_rss,
                "rows": self.rows, "seconds": self.seconds, "runs": self.runs, "errors": self.errors,
                "load": self.load, "ended": self.ended,
                "catchup": self.catchup.to_json() if self.catchup else None,
                "seen": {label: obs.seen for label, obs in self.observations.items()}}

    @classmethod
    def from_json(cls, d: dict) -> "Phase":
        obs = {label: Observation(label, dict(seen)) for label, seen in d["seen"].items()}
        catchup = CatchUp(**d["catchup"]) if d.get("catchup") else None
        return cls(d["name"], d["rate"], d["probes"], obs, d["peak_rss"], d["rows"], d["seconds"],
                   [tuple(r) for r in d["runs"]], d["errors"], d.get("load"), d.get("ended", 0.0), catchup)

    def keeps_up(self, label: str) -> bool | None:
        points = self.observations[label].points(self.probes)
        return keeps_up(points) if len(points) >= 3 else None

    def slope(self, label: str) -> float:
        return delay_slope(self.observations[label].points(self.probes))

    @property
    def ads(self) -> str:
        """The label of this run's ADS delay series (SDP's table, or Tidehouse's hot table)."""
        return "ADS SDP" if self.name.startswith("SDP") else "ADS hot"

    def steady_runs(self) -> list[tuple[float, float]]:
        """The runs (SDP) that ended before the catch-up burst."""
        return [(s, e) for s, e in self.runs if not self.ended or e <= self.ended]

    def catchup_cost(self) -> tuple[float, float] | None:
        """Seconds of work the burst added before its marker reached ADS, and ± how far the steady run's own
        variation could move that figure; None if not measured.

        Tidehouse (one long-running process): the marker's ADS delay counted from the start of the burst,
        minus the run's median ADS hot delay; ± its steady p95 - p50. SDP (triggered runs): the summed
        excess over the median duration of the steady runs (warm-up run excluded) of every run that
        overlapped the burst, from the one in progress when the burst began to the one that made the marker
        visible; ± half the spread of the steady runs' durations per overlapping run. Both count the time
        the burst took to write as work (conservative).
        """
        c = self.catchup
        if c is None or c.seen is None:
            return None
        if self.name.startswith("SDP"):
            steady = [e - s for s, e in self.steady_runs()[1:]]  # the first run is the warm-up
            if not steady:
                return None
            typical = percentile(steady, 50)
            overlapping = [e - s for s, e in self.runs if e > c.began and s < c.seen]
            return (sum(d - typical for d in overlapping),
                    len(overlapping) * (max(steady) - min(steady)) / 2)
        steady = self.summary(self.ads)
        return (c.seen - c.began) - steady.p50, steady.p95 - steady.p50

    def catchup_rate(self) -> tuple[float, float, float] | None:
        """Rows per second the system worked off while behind — the burst's rows over the time they cost —
        and the low and high ends of its range (``inf`` when the cost may be zero). As long as the input
        rate stays below it, a backlog shrinks, so it estimates the highest input rate the system holds
        without a growing delay (from above: big batches are cheaper per row than the small batches of a
        steady stream)."""
        measured = self.catchup_cost()
        if measured is None or self.catchup is None:
            return None
        rows, (cost, noise) = self.catchup.rows, measured

        def rate(seconds: float) -> float:
            return rows / seconds if seconds > 0 else math.inf

        return rate(cost), rate(cost + noise), rate(cost - noise)


def run_phase(name: str, system, generator: Generator, *, start: Callable[[], None], window: float,
              probe_interval: float, drain: float, warmup: float | None, poll: float,
              settle: float = 0.0, burst: int = 0, burst_wait: float = 300.0) -> Phase:
    """Measure one system in one mode. ``warmup``: seconds to wait for a first marker to reach every table
    (the system's start-up and first run are not measured), then ``settle`` s more; None to skip both (the
    tables are already live). ``burst``: after the probes, write that many rows at once and a marker after
    them, and wait up to ``burst_wait`` s for the marker to reach ADS (the catch-up measurement)."""
    began = time.time()
    generator.new_phase()
    rows_before = generator.rows_written
    prober = Prober(generator, system.readers(), system.pids, interval=poll).start()
    ended, catchup, steady_rss, steady_rows = 0.0, None, 0, 0
    start()
    try:
        if warmup is not None:
            marker = generator.write_probe(f"warmup-{int(began)}", kind="warmup")
            print(f"[{name}] waiting for the system to come up (warm-up marker through every table)...",
                  flush=True)
            if not prober.wait_seen([marker], warmup, alive=system.alive):
                seen = {k: marker in o.seen for k, o in prober.observations.items()}
                raise RuntimeError(f"[{name}] the warm-up marker did not reach every table within "
                                   f"{warmup:.0f} s: {system.failure or 'no failure reported'}; seen: {seen}")
            time.sleep(settle)  # let the backlog that built up during start-up drain before measuring
        print(f"[{name}] probing for {window:.0f} s (one marker every {probe_interval:g} s)...", flush=True)
        generator.probe_window(window, probe_interval)
        deadline = time.time() + window
        while time.time() < deadline and system.alive():
            time.sleep(0.5)
        time.sleep(0.1)
        if not prober.wait_seen(generator.measured(), drain, alive=system.alive):
            print(f"[{name}] not every marker was visible everywhere within the {drain:.0f} s drain",
                  flush=True)
        if system.failure:
            raise RuntimeError(f"[{name}] {system.failure}")
        # the steady run ends here; the catch-up follows
        ended, steady_rss, steady_rows = time.time(), prober.peak_rss, generator.rows_written - rows_before
        if burst:
            catchup = measure_catchup(name, system, generator, prober, burst, burst_wait)
    finally:
        ended = ended or time.time()
        system.stop()
        prober.stop()
    phase = Phase(name, generator.rate, generator.measured(), prober.observations, steady_rss,
                  steady_rows, ended - began,
                  runs=list(getattr(system, "runs", [])),
                  errors=list(getattr(system, "notes", [])) + prober.errors[-5:],
                  load=sum(prober.loads) / len(prober.loads) if prober.loads else None, ended=ended,
                  catchup=catchup)
    for label in phase.observations:
        s = phase.summary(label)
        print(f"[{name}] {label:10s} n={s.n}/{len(phase.probes)} p50={s.p50:.2f}s p95={s.p95:.2f}s "
              f"max={s.max:.2f}s", flush=True)
    if catchup is not None:
        cost, rate = phase.catchup_cost(), phase.catchup_rate()
        print(f"[{name}] catch-up: {catchup.rows:,} rows cost "
              + ("(marker not seen)" if cost is None or rate is None
                 else f"{cost[0]:.1f} ± {cost[1]:.1f} s -> {_rate_cell(rate)} rows/s"), flush=True)
    return phase


def measure_catchup(name: str, system, generator: Generator, prober: Prober, rows: int,
                    wait: float) -> CatchUp:
    """Write a burst of ``rows`` while the steady input keeps flowing, then a marker; wait until the marker
    is visible in ADS (SDP: and until the run that showed it has ended, so its duration is known)."""
    ads = "ADS SDP" if "ADS SDP" in prober.observations else "ADS hot"
    print(f"[{name}] catch-up: a burst of {rows:,} rows, then a marker...", flush=True)
    began = time.time()
    generator.write_burst(rows)
    marker = generator.write_probe(f"burst-{int(began)}", kind="burst")
    written = generator.bursts[marker]
    deadline = time.time() + wait
    seen = prober.observations[ads].seen
    while marker not in seen and time.time() < deadline and system.alive():
        time.sleep(0.2)
    at = seen.get(marker)
    if at is not None:
        while not system.settled(at) and time.time() < deadline + 120 and system.alive():
            time.sleep(0.2)
    return CatchUp(rows, began, written, at, prober.peak_rss)


# ---------------------------------------------------------------------------------------------------------
# report: one table in docs/benchmarks.md, one plot
# ---------------------------------------------------------------------------------------------------------
def _cell(s: Summary | None) -> str:
    if s is None or s.n == 0:
        return "—"
    cell = f"{s.p50:.1f} / {s.p95:.1f} / {s.max:.1f}"
    return cell if not s.unseen else f"≥ {cell} ({s.unseen} never seen)"


def _rate_cell(rate: tuple[float, float, float]) -> str:
    """``rows/s (low–high)`` of a catch-up rate; ∞ where the cost is within the noise."""
    def num(v: float) -> str:
        return "∞" if math.isinf(v) else f"{v:,.0f}"
    mid, low, high = rate
    return f"{num(mid)} ({num(low)}–{num(high)})"


def _ratio(a: Summary | None, b: Summary | None) -> str:
    if a is None or b is None or not a.n or not b.n or b.p50 <= 0:
        return "—"
    return f"{a.p50 / b.p50:.1f}×"


def ordered(phases: dict[str, Phase]) -> dict[str, Phase]:
    """Display order: SDP loop, SDP schedule, then Tidehouse by tiering interval (runs happen in another)."""
    def rank(name: str) -> tuple[int, float]:
        if name.startswith("SDP"):
            return (0 if name == "SDP loop" else 1, 0.0)
        return (2, float(name.split("T=", 1)[1].rstrip("s")))
    return dict(sorted(phases.items(), key=lambda item: rank(item[0])))


def series(phases: dict[str, Phase]) -> list[tuple[str, Phase, str]]:
    """(column title, phase, observation suffix) of every delay series, in display order."""
    out = []
    for name, phase in phases.items():
        if name.startswith("SDP"):
            out.append((name, phase, "SDP"))
        else:
            t = name.split("T=", 1)[1]
            out.append((f"Tidehouse hot (T={t})", phase, "hot"))
            out.append((f"Tidehouse lake (T={t})", phase, "lake"))
    return out


CATCHUP_INTRO = (
    "Catch-up after a burst (run with the shortest tiering interval for Tidehouse, the loop for SDP): after the "
    "steady window, the burst is written at once while the steady input goes on, then a marker; the time the "
    "burst cost is the marker's extra delay (Tidehouse: its ADS delay from the start of the burst minus the "
    "steady p50; SDP: the excess duration of the runs that overlapped the burst over the median steady run). "
    "Method: [docs/vs_sdp.md](vs_sdp.md).")


def report_body(phases: dict[str, Phase], args: argparse.Namespace) -> str:
    from benchmarks._report import markdown_table

    phases = ordered(phases)
    cols = series(phases)
    loop = phases.get("SDP loop")
    fast_lake = phases.get(f"Tidehouse T={min(args.tiering):g}s")
    th_runs = [(n.split("T=")[1], p) for n, p in phases.items() if n.startswith("Tidehouse")]
    rows = []
    for layer in LAYERS:
        row: list[object] = [layer]
        row += [_cell(p.summary(f"{layer} {suffix}")) for _, p, suffix in cols]
        sdp_s = loop.summary(f"{layer} SDP") if loop else None
        row += [_ratio(sdp_s, p.summary(f"{layer} hot")) for _, p in th_runs]
        row.append(_ratio(sdp_s, fast_lake.summary(f"{layer} lake") if fast_lake else None))
        rows.append(row)
    headers = ["layer", *[c[0] for c in cols], *[f"SDP loop ÷ TH hot (T={t}), p50" for t, _ in th_runs],
               f"SDP loop ÷ TH lake (T={min(args.tiering):g}s), p50"]
    delays = markdown_table(headers, rows)

    run_rows = []
    for name, p in phases.items():
        ads = p.ads
        runs = p.steady_runs()
        mean_run = sum(e - s for s, e in runs) / len(runs) if runs else None
        seen = sum(m in p.observations[ads].seen for m in p.probes)
        holds = p.keeps_up(ads)
        if name.startswith("SDP") and len(runs) < 4:  # warm-up + fewer than 3 measured runs: no trend
            holds = None
        run_rows.append([name, p.rate, f"{p.rows:,}", f"{seen}/{len(p.probes)}",
                         f"{p.slope(ads):+.2f}", {True: "yes", False: "no", None: "— (too few runs)"}[holds],
                         f"{p.peak_rss / 2**30:.2f}",
                         f"{len(runs)} × {mean_run:.0f} s" if runs else "one long-running process",
                         f"{p.seconds:.0f}", "—" if p.load is None else f"{p.load:.1f}"])
    runs_table = markdown_table(["run", "input rows/s", "rows written", "ADS probes seen",
                                 "ADS delay trend (s per min)", "keeps up", "peak RSS (GiB)",
                                 "spark-pipelines runs × mean duration", "wall (s)",
                                 "machine load (1-min avg)"], run_rows)

    catchup_rows, rates = [], {}
    for name, p in phases.items():
        c = p.catchup
        if c is None:
            continue
        cost, rate = p.catchup_cost(), p.catchup_rate()
        steady = p.summary(p.ads)
        if rate is not None:
            rates[name] = rate
        catchup_rows.append([
            name, f"{c.rows:,}", "not seen" if c.seen is None else f"{c.seen - c.began:.1f}",
            f"{steady.p50:.1f}", "—" if cost is None else f"{cost[0]:.1f} ± {cost[1]:.1f}",
            "—" if rate is None else _rate_cell(rate),
            "—" if rate is None or math.isinf(rate[0]) else f"{rate[0] / p.rate:.0f}×",
            f"{c.peak_rss / 2**30:.2f}"])
    catchups = markdown_table(["run", "burst rows", "burst start → its marker in ADS (s)",
                               "steady ADS delay p50 (s)", "time the burst cost (s)",
                               "rows/s worked off while behind (range)", "× the steady input rate",
                               "peak RSS incl. catch-up (GiB)"], catchup_rows) if catchup_rows else ""
    th_rate = next((r for n, r in rates.items() if n.startswith("Tidehouse")), None)
    sdp_rate = rates.get("SDP loop")
    if th_rate and sdp_rate:
        ratio = "—" if math.isinf(th_rate[0]) or math.isinf(sdp_rate[0]) else f"{th_rate[0] / sdp_rate[0]:.1f}×"
        catchups += (f"\n\nSustained rate: a backlog shrinks while the input rate stays below the rate it is "
                     f"worked off, so these estimate the highest input rate each system holds without a "
                     f"growing delay — Tidehouse {_rate_cell(th_rate)} rows/s, SDP {_rate_cell(sdp_rate)} "
                     f"rows/s (Tidehouse ÷ SDP {ratio}). Whether each held the steady rate: \"keeps up\" "
                     f"above.")

    lag_rows = []
    th = th_runs
    for layer in LAYERS:
        lag_rows.append([layer, *[_cell(p.lag(layer)) for _, p in th]])
    lags = markdown_table(["layer", *[f"lake behind hot, T={t}" for t, _ in th]], lag_rows) if th else ""

    verdicts = []
    for t, hot in th_runs if loop else ():
        a, b = loop.summary("ADS SDP"), hot.summary("ADS hot")
        if a.n and b.n:
            ok = b.p50 <= a.p50 / 10
            verdict = "met" if ok else "NOT met" if not a.unseen else "not shown"
            bound = f" (SDP's figure is a lower bound: {a.unseen} probes never seen)" if a.unseen else ""
            verdicts.append(f"* Target ADS hot delay ≤ 1/10 of SDP's looped ADS delay, Tidehouse run T={t}: "
                            f"{b.p50:.2f} s vs {'≥ ' if a.unseen else ''}{a.p50:.1f} s (p50, "
                            f"{a.p50 / b.p50:.1f}×) — **{verdict}**{bound}.")
    for t in args.tiering:
        p = phases.get(f"Tidehouse T={t:g}s")
        if p:
            s, e2e = p.lag("ADS"), p.summary("ADS lake")
            if s.n:
                verdict = "met" if s.max <= t + 3 else "met at p95 only" if s.p95 <= t + 3 else "NOT met"
                verdicts.append(f"* Target ADS lake delay (behind its hot table) ≤ T + 3 s = {t + 3:g} s "
                                f"with T = {t:g} s: p95 {s.p95:.1f} s, max {s.max:.1f} s — **{verdict}** "
                                f"(end to end, input to lake: p50 {e2e.p50:.1f} s, max {e2e.max:.1f} s).")
    return "\n".join([
        f"Delay in seconds from a marker event's file landing in the input directory to its effect being "
        f"visible in each table, **p50 / p95 / max** over the probes of each run ({args.rate:,} input "
        f"rows/s, one marker every {args.probe_interval:g} s, polled every {args.poll:g} s). SDP tables are "
        f"read as committed Parquet in the warehouse; Tidehouse hot tables through the store, lake tables "
        f"with plain pyiceberg. "
        f"The systems ran one after the other. Settings and method: [docs/vs_sdp.md](vs_sdp.md); plot: "
        f"[img/vs_sdp.png](img/vs_sdp.png).", "", delays, "",
        "How far each Tidehouse lake table was behind its own hot table (per probe: lake visibility minus "
        "hot visibility, seconds, p50 / p95 / max) — the lake delay the tiering interval bounds at any "
        "depth:", "",
        lags, "", runs_table, "",
        *([CATCHUP_INTRO, "", catchups, ""] if catchups else []),
        *verdicts])


def plot(phases: dict[str, Phase], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401 - used as matplotlib.ticker

    fig, ax = plt.subplots(figsize=(9, 6.4), dpi=110)
    xs = list(range(len(LAYERS)))
    colors = {"SDP": ["#c0392b", "#e67e22"], "hot": ["#1f77b4", "#17becf"], "lake": ["#2ca02c", "#98df8a"]}
    used: dict[str, int] = {}
    for title, phase, suffix in series(ordered(phases)):
        idx = used.get(suffix, 0)
        used[suffix] = idx + 1
        color = colors[suffix][min(idx, 1)]
        sums = [phase.summary(f"{layer} {suffix}") for layer in LAYERS]
        p50 = [s.p50 if s.n else math.nan for s in sums]
        p95 = [s.p95 if s.n else math.nan for s in sums]
        ax.plot(xs, p50, marker="o", color=color, linewidth=2, label=f"{title} p50")
        ax.plot(xs, p95, marker="^", color=color, linewidth=1, linestyle="--", alpha=0.8,
                label=f"{title} p95")
    ax.set_yscale("log")
    ax.set_xticks(xs, LAYERS)
    ax.set_xlabel("layer")
    ax.set_ylabel("delay until a marker is visible (s, log scale)")
    ax.set_title("Freshness per layer: Tidehouse vs Spark Declarative Pipelines")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.grid(True, which="both", axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.12), frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------------------
MODES = ("loop", "schedule", "tidehouse")
SAVED_ARGS = ("rate", "probe_interval", "poll", "tiering", "window", "schedule", "burst")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--rate", type=int, default=1000, help="input rows per second (both systems)")
    ap.add_argument("--window", type=float, default=150.0, help="seconds of probing per run")
    ap.add_argument("--probe-interval", type=float, default=4.0, help="seconds between marker events")
    ap.add_argument("--schedule", type=float, default=60.0, help="SDP schedule period in seconds")
    ap.add_argument("--tiering", type=lambda v: [float(x) for x in v.split(",")], default=[5.0, 30.0],
                    help="Tidehouse tiering intervals in seconds, comma-separated (one run each)")
    ap.add_argument("--modes", type=lambda v: v.split(","), default=list(MODES),
                    help=f"which runs, comma-separated, of {','.join(MODES)}")
    ap.add_argument("--burst", type=int, default=1_500_000,
                    help="rows of the catch-up burst written after the SDP loop run and the Tidehouse run with "
                         "the shortest tiering interval (0: no catch-up measurement)")
    ap.add_argument("--burst-wait", type=float, default=300.0,
                    help="max seconds for the marker after the burst to reach ADS")
    ap.add_argument("--poll", type=float, default=0.25, help="seconds between reads of every table")
    ap.add_argument("--sdp-drain", type=float, default=240.0,
                    help="max seconds after the probe window for SDP runs to show every marker")
    ap.add_argument("--warmup", type=float, default=240.0, help="max seconds for a system to come up")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run (~3-4 min): SDP loop + Tidehouse T=5s, 30 s windows, a marker per second")
    ap.add_argument("--settle", type=float, default=15.0,
                    help="seconds to wait after a system is up before the first probe")
    ap.add_argument("--from-results", type=Path, nargs="+", default=None,
                    help="re-render the table and plot from vs_sdp-results.json files of earlier runs, "
                         "merged in order (no measuring)")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="where runs keep their files (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--no-write", action="store_true", help="print the table only; do not touch docs/")
    args = ap.parse_args(argv)
    if args.quick:
        args.window, args.probe_interval, args.modes, args.tiering = 30.0, 1.0, ["loop", "tidehouse"], [5.0]
        args.settle, args.burst = 5.0, 100_000
    unknown = set(args.modes) - set(MODES)
    if unknown:
        ap.error(f"unknown mode(s) {sorted(unknown)}; choose from {MODES}")
    return args


def _cause(message: str) -> str:
    """The most telling line of a failure: the last exception or error line, else the first line."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    telling = [ln for ln in lines if ("Exception" in ln or "Error" in ln or "error:" in ln)
               and not ln.startswith("at ")]
    return (telling[-1] if telling else lines[0] if lines else "unknown")[:300]


def command_line(argv: Sequence[str]) -> str:
    return " ".join([".venv/bin/python benchmarks/vs_sdp.py", *argv]).strip()


def measure(args: argparse.Namespace, workdir: Path, save: Callable[[dict[str, Phase], dict[str, str]], None]
            ) -> tuple[dict[str, Phase], dict[str, str]]:
    """Run the selected systems one after the other. A run that fails is reported (``failures``) and the
    others still run; ``save`` is called after every run so no measurement is lost."""
    phases: dict[str, Phase] = {}
    failures: dict[str, str] = {}

    def attempt(name: str, run: Callable[[], Phase]) -> None:
        try:
            phases[name] = run()
        except Exception as exc:  # report it, keep measuring the others
            failures[name] = str(exc)[:1500]
            print(f"[{name}] FAILED: {failures[name]}", flush=True)
        save(phases, failures)

    if {"loop", "schedule"} & set(args.modes):
        gen = Generator(workdir / "input-sdp", args.rate).start()
        sdp = Sdp(workdir, gen.directory)
        # the schedule first: the loop run ends with the catch-up burst, which would leave the schedule run
        # a bigger history to recompute
        try:
            if "schedule" in args.modes:
                name = f"SDP every {args.schedule:g} s"
                attempt(name, lambda: run_phase(
                    name, sdp, gen, start=lambda: sdp.start(args.schedule), window=args.window,
                    probe_interval=args.probe_interval, drain=args.schedule + args.sdp_drain,
                    warmup=args.warmup, poll=args.poll, settle=args.settle))
            if "loop" in args.modes:
                sdp.runs, sdp.failure = [], None
                attempt("SDP loop", lambda: run_phase(
                    "SDP loop", sdp, gen, start=lambda: sdp.start(period=None), window=args.window,
                    probe_interval=args.probe_interval, drain=args.sdp_drain,
                    warmup=None if phases else args.warmup, poll=args.poll, settle=args.settle,
                    burst=args.burst, burst_wait=args.burst_wait))
        finally:
            gen.stop()
    if "tidehouse" in args.modes:
        for t in args.tiering:
            gen = Generator(workdir / f"input-th-{t:g}s", args.rate).start()
            th = Tidehouse(workdir, gen.directory, t)
            burst = args.burst if t == min(args.tiering) else 0  # the catch-up once, with the busiest tiering
            budget = args.warmup + args.settle + args.window + t + 180.0 + (args.burst_wait if burst else 0)
            name = f"Tidehouse T={t:g}s"
            try:
                attempt(name, lambda th=th, gen=gen, budget=budget, t=t, name=name, burst=burst: run_phase(
                    name, th, gen, start=lambda: th.start(budget), window=args.window,
                    probe_interval=args.probe_interval, drain=t + 60.0, warmup=args.warmup, poll=args.poll,
                    settle=args.settle, burst=burst, burst_wait=args.burst_wait))
            finally:
                gen.stop()
    return phases, failures


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    started = time.time()
    if args.from_results:
        phases, failures, commands, wall, measured_at = {}, {}, [], 0.0, None
        for path in args.from_results:  # later files add runs or replace same-named ones
            saved = json.loads(path.read_text(encoding="utf-8"))
            for key in SAVED_ARGS:
                if key in saved["args"]:
                    setattr(args, key, saved["args"][key])
            failures.update(saved.get("failures", {}))
            for d in saved["phases"]:
                phases[d["name"]] = Phase.from_json(d)
                failures.pop(d["name"], None)
            commands.append(f"`{saved['command']}`")
            measured_at = saved.get("started") or path.stat().st_mtime - saved["wall"]
            wall += saved["wall"]
        command = commands[0].strip("`") if len(commands) == 1 else " then ".join(commands).strip("`")
    else:
        measured_at = started
        workdir = args.workdir or Path(tempfile.mkdtemp(prefix="vs_sdp-"))
        workdir.mkdir(parents=True, exist_ok=True)
        print(f"work directory: {workdir}", flush=True)
        keep_dir = workdir if (args.keep or args.workdir) else Path(tempfile.gettempdir())
        out = keep_dir / "vs_sdp-results.json"
        command = command_line(argv)

        def save(phases: dict[str, Phase], failures: dict[str, str]) -> None:
            results = {"command": command, "started": started, "wall": time.time() - started, "failures": failures,
                       "phases": [p.to_json() for p in phases.values()],
                       "args": {k: getattr(args, k) for k in SAVED_ARGS}}
            out.write_text(json.dumps(results), encoding="utf-8")

        try:
            phases, failures = measure(args, workdir, save)
        finally:
            if not args.keep and args.workdir is None:
                shutil.rmtree(workdir, ignore_errors=True)
        wall = time.time() - started
        print(f"raw probe times: {out} (re-render with --from-results)", flush=True)
    if not phases:
        print("nothing measured", file=sys.stderr)
        return 1
    body = report_body(phases, args) + f"\n\nTotal wall time of the measuring script: {wall:.0f} s."
    notes = [f"* {p.name}: {e}" for p in phases.values() for e in p.errors]
    notes += [f"* **{name} failed**: {_cause(msg)}" for name, msg in failures.items()]
    if notes:
        body += "\n\nNotes:\n\n" + "\n".join(notes)
    if args.no_write:
        print(body)
        return 0
    from benchmarks._report import write_section

    plot(phases, IMG)
    write_section("vs_sdp", "Tidehouse vs Spark Declarative Pipelines: freshness per layer (issue 8)",
                  command, body, measured_at=measured_at)
    print(f"wrote {IMG.relative_to(REPO)} and docs/benchmarks.md", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
