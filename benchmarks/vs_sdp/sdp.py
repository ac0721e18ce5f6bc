"""The SDP side: the pipeline of ``benchmarks/sdp_project`` run by the real ``spark-pipelines`` CLI, in a loop
or on a schedule."""

from __future__ import annotations

import math
import shutil
import subprocess
import threading
import time
from pathlib import Path

from benchmarks.vs_sdp import LAYERS, REPO, SDP_STREAMING, SDP_TABLES
from benchmarks.vs_sdp.process import VENV_BIN, spark_env, tail, terminate, wait_port_free
from benchmarks.vs_sdp.readers import Reader, SdpTableReader

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
        shutil.copytree(
            REPO / "benchmarks" / "sdp_project",
            self.project,
            ignore=shutil.ignore_patterns("__pycache__", "spark-warehouse", "metastore_db"),
        )
        spec_path = self.project / "spark-pipeline.yml"
        spec = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
        spec["storage"] = (workdir / "sdp-storage").as_uri()
        spec["configuration"] = {
            **spec.get("configuration", {}),
            **SDP_PIPELINE_CONF,
            "tidehouse.bench.input": str(input_dir),
        }
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
        return {
            f"{layer} SDP": SdpTableReader(self.warehouse / SDP_TABLES[layer], layer in SDP_STREAMING)
            for layer in LAYERS
        }

    def run_once(self) -> None:
        wait_port_free(15002)  # the Spark Connect port every spark-pipelines run binds
        start = self.running_since = time.time()
        with open(self.log, "a", encoding="utf-8") as log:
            log.write(f"\n===== run at {time.strftime('%H:%M:%S')} =====\n")
            log.flush()
            self.proc = subprocess.Popen(
                self.command(),
                cwd=self.project,
                env=spark_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            rc = self.proc.wait()
        terminate(self.proc, 0)  # reap anything the run left behind in its process group
        try:
            if self._stop.is_set():
                return  # stopped on purpose mid-run
            if rc != 0:
                raise RuntimeError(
                    f"spark-pipelines run exited {rc}; the end of {self.log}:\n{tail(self.log)}"
                )
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
        except Exception as exc:  # noqa: BLE001 - the driving thread's failure, reported by the caller
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
        terminate(self.proc, grace=20, group=True)
        if self._thread is not None:
            self._thread.join()
