"""Measuring: the backlog, one run of a path (Tidehouse ``flow trigger --until-idle`` or one SDP run) with its
CPU, and the paths in order (the cluster paths on a standalone cluster started for them)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from benchmarks.scale_out import DATA_PATHS, FLOW_FILE, PATHS, TABLES
from benchmarks.scale_out.cpu import CpuMeter
from benchmarks.scale_out.report import Run
from benchmarks.vs_sdp import REPO, SDP_TABLES
from benchmarks.vs_sdp.process import VENV_BIN, spark_env, tail, terminate


def write_backlog(directory: Path, rows: int, file_rows: int) -> float:
    """Write ``rows`` events as JSON files of ``file_rows`` into ``directory`` (the vs_sdp generator's rows:
    20,000 users, ~2% malformed); returns the seconds it took."""
    from benchmarks.vs_sdp.generator import Generator

    began = time.monotonic()
    Generator(directory, rate=1).write_burst(rows, file_rows=file_rows)
    return time.monotonic() - began


def env() -> dict[str, str]:
    """The driver's environment: this venv's Spark and Python, this checkout first on the Python path (the
    Python workers the driver's JVM starts import the code under test)."""
    out = spark_env()
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return out


def tidehouse_project(
    base: Path, input_dir: Path, spark: dict | None, data_path: str | None = None
) -> tuple[Path, Path]:
    """A copy of ``benchmarks/vs_sdp_flow`` under ``base`` reading ``input_dir``; ``spark``: the project
    file's ``spark`` settings (a cluster), else its defaults (local); ``data_path``: the project's
    ``materializer.data_path``, else its default (``auto``). Returns (project dir, home)."""
    import yaml

    project, home = base / "project", base / "home"
    shutil.copytree(REPO / "benchmarks" / "vs_sdp_flow", project, ignore=shutil.ignore_patterns(".tidehouse"))
    shutil.copytree(REPO / "actions", project / "actions", dirs_exist_ok=True)
    flow_path = project / FLOW_FILE
    flow = yaml.safe_load(flow_path.read_text(encoding="utf-8"))
    flow["sources"]["events"]["path"] = str(input_dir)
    flow_path.write_text(yaml.safe_dump(flow, sort_keys=False), encoding="utf-8")
    settings_path = project / "tidehouse.yaml"
    settings = yaml.safe_load(settings_path.read_text(encoding="utf-8")) or {}
    settings["logging"] = {"level": "info", "format": "json"}  # the run's steps with their times
    if spark:
        settings["spark"] = dict(spark)
    if data_path:
        settings.setdefault("materializer", {})["data_path"] = data_path
    # every run starts its driver JVM alike: the first run to find no class archive would make one (a slower
    # start) and the next would start from it, which the backlog run minus the empty run would count
    settings.setdefault("spark", {})["class_archive"] = False
    settings_path.write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")
    return project, home


_FINISHED = re.compile(r"finished in ([\d.]+)s on (\S+) \(data path: (\w+)\)")
_TABLE = re.compile(r"^  (\S+): (\d+) rows? written in (\d+) batch(?:es)?", re.M)
_TIERING = re.compile(r"final tiering cycle in ([\d.]+)s")


def parse_trigger_log(text: str) -> dict:
    """What ``flow trigger --until-idle`` printed: its own seconds (after Spark started), the final tiering
    cycle's seconds, the data path, and rows and batches per table."""
    out: dict = {"tables": {}}
    for line in text.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                message = json.loads(line).get("message", "")
                found = _TIERING.search(message)
                if found:
                    out["tiering_s"] = float(found.group(1))
    found = _FINISHED.search(text)
    if found:
        out["finished_s"], out["spark"], out["data_path"] = (
            float(found.group(1)),
            found.group(2),
            found.group(3),
        )
    for name, rows, batches in _TABLE.findall(text):
        out["tables"][name] = {"rows": int(rows), "batches": int(batches)}
    return out


def run_tidehouse(
    name: str,
    base: Path,
    input_dir: Path,
    rows: int,
    spark: dict | None,
    cluster,
    timeout: float,
    data_path: str | None = None,
) -> Run:
    """One ``tidehouse flow trigger --until-idle`` on a fresh home over ``input_dir`` (``rows`` events),
    timed from its start to its exit, with the CPU of the driver and of the cluster."""
    project, home = tidehouse_project(base, input_dir, spark, data_path)
    log = base / "trigger.log"
    cmd = [str(VENV_BIN / "tidehouse"), "--home", str(home), "flow", "trigger", FLOW_FILE, "--until-idle"]
    meter = CpuMeter(cluster_groups(cluster)).start()
    began = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=project, env=env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = None
        wall = time.monotonic() - began
        terminate(proc, grace=30, group=True)
    cpu = meter.stop()
    text = log.read_text(encoding="utf-8", errors="replace")
    if rc != 0:
        why = f"timed out after {timeout:.0f} s" if rc is None else f"exited {rc}"
        raise RuntimeError(f"[{name}] tidehouse flow trigger {why}; the end of {log}:\n{tail(log)}")
    parsed = parse_trigger_log(text)
    status = home / "run" / "vs_sdp.status.json"
    with contextlib.suppress(OSError, ValueError):
        for row in json.loads(status.read_text(encoding="utf-8")).get("tables", []):
            parsed["tables"].setdefault(row["table"], {})["batch_seconds"] = row.get("batch_seconds")
    ods = parsed["tables"].get(TABLES["ODS"], {}).get("rows")
    note = None if ods == rows else f"ODS wrote {ods} rows of {rows:,}"
    return Run(
        rows=rows,
        wall=wall,
        cpu=cpu,
        finished_s=parsed.get("finished_s"),
        tiering_s=parsed.get("tiering_s"),
        data_path=parsed.get("data_path", ""),
        tables=parsed["tables"],
        note=note,
    )


_SDP_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d): (Starting run\.\.\.|Run is COMPLETED\.)", re.M)


def parse_sdp_log(text: str) -> float | None:
    """Seconds of the last SDP run in ``text`` by its own log: "Starting run..." to "Run is COMPLETED."
    (whole seconds), None if either is missing."""
    import datetime as dt

    marks: dict[str, dt.datetime] = {}
    for stamp, what in _SDP_STAMP.findall(text):
        marks[what] = dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S")
    if len(marks) < 2 or marks["Run is COMPLETED."] < marks["Starting run..."]:
        return None
    return (marks["Run is COMPLETED."] - marks["Starting run..."]).total_seconds()


def sdp_rows(warehouse: Path) -> dict[str, int]:
    """Rows of each SDP table in the warehouse after a run (Parquet footers; every file is committed once
    the run has ended)."""
    import pyarrow.parquet as pq

    out = {}
    for layer, table in SDP_TABLES.items():
        files = [p for p in (warehouse / table).rglob("*.parquet") if "_spark_metadata" not in p.parts]
        out[layer] = sum(pq.ParquetFile(p).metadata.num_rows for p in files if not p.name.startswith("."))
    return out


def run_sdp(name: str, base: Path, input_dir: Path, rows: int, timeout: float) -> Run:
    """One ``spark-pipelines run`` of ``benchmarks/sdp_project`` (as benchmarks/vs_sdp runs it: ``--remote
    local[2]``) on a fresh storage over ``input_dir``, timed from its start to its exit."""
    from benchmarks.vs_sdp.sdp import Sdp

    base.mkdir(parents=True, exist_ok=True)
    sdp = Sdp(base, input_dir)
    meter = CpuMeter().start()
    began = time.monotonic()
    failure = None
    try:
        run_with_timeout(sdp.run_once, timeout, stop=sdp.stop)
    except Exception as exc:  # noqa: BLE001 - the CPU meter must stop; the failure is raised below
        failure = exc
    wall = time.monotonic() - began
    cpu = meter.stop()
    if failure is not None:
        raise RuntimeError(f"[{name}] {failure}") from failure
    counts = sdp_rows(sdp.warehouse)
    note = None if counts["ODS"] == rows else f"ODS holds {counts['ODS']} rows of {rows:,}"
    tables = {SDP_TABLES[layer]: {"rows": n} for layer, n in counts.items()}
    own = parse_sdp_log(sdp.log.read_text(encoding="utf-8", errors="replace"))
    return Run(rows=rows, wall=wall, cpu=cpu, finished_s=own, tables=tables, note=note)


def run_with_timeout(fn: Callable[[], None], timeout: float, *, stop: Callable[[], None]) -> None:
    import threading

    errors: list[BaseException] = []

    def target() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            errors.append(exc)

    thread = threading.Thread(target=target, name="sdp-run", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        stop()
        thread.join(60)
        raise RuntimeError(f"timed out after {timeout:.0f} s")
    if errors:
        raise errors[0]


def cluster_groups(cluster) -> dict[str, Callable[[], list[int]]]:
    if cluster is None:
        return {}
    return {"cluster": lambda: [p.pid for p in [cluster.master, *cluster.workers] if p is not None]}


def cores_per_worker(asked: int, workers: int) -> int:
    """``asked``, or (0) the machine's cores shared out among ``workers``, at least 1 each."""
    return asked or max(1, (os.cpu_count() or 1) // workers)


@contextlib.contextmanager
def standalone(workdir: Path, workers: int, cores: int, memory: str) -> Iterator[object]:
    """A Spark standalone master with ``workers`` workers on 127.0.0.1 (the launcher the cluster tests use,
    ``tests/spark_services.py``; imported here only, since it needs the test dependencies)."""
    from tests.spark_services import StandaloneCluster

    with StandaloneCluster.running(workdir, workers=workers, cores=cores, memory=memory) as cluster:
        yield cluster


def measure_path(
    key: str, workdir: Path, inputs: dict[str, Path], rows: int, args, round_: int = 1
) -> dict[str, Run]:
    """The empty run and the backlog run of one path (``PATHS``), each on a fresh state; ``round_``: which
    round of ``--repeat`` (its files are named after it from the second on)."""
    tag = "" if round_ == 1 else f"-r{round_}"
    label, workers = PATHS[key]
    runs: dict[str, Run] = {}
    with contextlib.ExitStack() as stack:
        cluster, spark = None, None
        if workers:
            began = time.monotonic()
            cluster = stack.enter_context(
                standalone(
                    workdir / f"{key}{tag}-spark",
                    workers,
                    cores_per_worker(args.worker_cores, workers),
                    args.worker_memory,
                )
            )
            spark = {"master": cluster.url, "conf": {"spark.executor.memory": args.executor_memory}}
            print(f"[{label}] {cluster.url} up in {time.monotonic() - began:.0f} s", flush=True)
        for kind in ("empty", "backlog"):
            n = rows if kind == "backlog" else 0
            base = workdir / f"{key}-{kind}{tag}"
            print(f"[{label}] {kind} run ({n:,} rows)...", flush=True)
            if key == "sdp":
                run = run_sdp(label, base, inputs[kind], n, args.run_timeout)
            else:
                run = run_tidehouse(
                    label, base, inputs[kind], n, spark, cluster, args.run_timeout, DATA_PATHS.get(key)
                )
            cpu = run.cpu
            print(
                f"[{label}] {kind}: {run.wall:.1f} s, CPU driver {cpu.groups.get('driver', 0):.1f} s"
                + (f", cluster {cpu.groups.get('cluster', 0):.1f} s" if cluster else "")
                + f", machine {cpu.machine:.1f} s, load {cpu.load:.2f}"
                + (f" — {run.note}" if run.note else ""),
                flush=True,
            )
            runs[kind] = run
            logs = workdir / "logs"
            logs.mkdir(exist_ok=True)
            for found in [
                base / "trigger.log",
                base / "home" / "run" / "vs_sdp.status.json",
                base / "sdp.log",
            ]:
                if found.is_file():  # kept for a look at what a run did, after its state is deleted
                    shutil.copy(found, logs / f"{key}-{kind}{tag}-{found.name}")
            if not args.keep:
                shutil.rmtree(base, ignore_errors=True)
    return runs
