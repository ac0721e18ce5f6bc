"""The Tidehouse side: the flow of ``benchmarks/vs_sdp_flow`` run by ``tidehouse flow trigger``."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from benchmarks.vs_sdp import LAYERS, REPO, TH_TABLES
from benchmarks.vs_sdp.process import VENV_BIN, spark_env, tail, terminate
from benchmarks.vs_sdp.readers import HotReader, LakeReader, Reader


class Tidehouse:
    """The Tidehouse flow under ``workdir/th-<T>``, run by ``tidehouse flow trigger``."""

    def __init__(self, workdir: Path, input_dir: Path, tiering_s: float) -> None:
        import yaml

        base = workdir / f"th-{tiering_s:g}s"
        self.project, self.home = base / "project", base / "home"
        shutil.copytree(
            REPO / "benchmarks" / "vs_sdp_flow",
            self.project,
            ignore=shutil.ignore_patterns("__pycache__", ".tidehouse"),
        )
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
        return [
            str(VENV_BIN / "tidehouse"),
            "--home",
            str(self.home),
            "flow",
            "trigger",
            str(self.flow_path),
            "--duration",
            f"{duration:.0f}",
        ]

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
            self.proc = subprocess.Popen(
                self.command(duration),
                cwd=self.project,
                env=spark_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        """True while the flow runs. A flow that failed is triggered again once (it resumes where it stopped,
        as a supervisor would restart it); the restart and its cause are reported with the run."""
        if self.proc is not None and self.proc.poll() not in (None, 0) and self.restarts < self.max_restarts:
            cause = next(
                (ln for ln in reversed(tail(self.log, 80).splitlines()) if ln.startswith("error:")),
                f"exit code {self.proc.returncode}",
            )
            self.notes.append(
                f"flow trigger failed after {time.time() - self._started:.0f} s and was "
                f"triggered again: {cause}"
            )
            print(f"[tidehouse] {self.notes[-1]}", flush=True)
            self.restarts += 1
            self.start(self._duration)
        return self.proc is not None and self.proc.poll() is None

    @property
    def failure(self) -> str | None:
        if self.proc is not None and self.proc.poll() not in (None, 0):
            return (
                f"tidehouse flow trigger exited {self.proc.returncode}; the end of {self.log}:\n"
                f"{tail(self.log)}"
            )
        return None

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.alive() else []

    def settled(self, since: float) -> bool:
        return True  # one long-running process: nothing to wait for

    def stop(self) -> None:
        terminate(self.proc, grace=60)
        if self._project is not None:
            self._project.close()
