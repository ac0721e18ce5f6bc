"""Probes: poll every reader, record when each marker first became visible, sample memory and load."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from benchmarks.vs_sdp.generator import Generator
from benchmarks.vs_sdp.process import tree_rss_bytes
from benchmarks.vs_sdp.readers import Reader


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

    def __init__(
        self,
        generator: Generator,
        readers: dict[str, Reader],
        pids: Callable[[], Iterable[int]],
        interval: float = 0.25,
    ) -> None:
        self.generator, self.readers, self.pids, self.interval = generator, readers, pids, interval
        self.observations = {label: Observation(label) for label in readers}
        self.peak_rss = 0
        self.loads: list[float] = []  # 1-minute load average, sampled every second
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="prober", daemon=True)

    def start(self) -> Prober:
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
                except Exception as exc:  # noqa: BLE001 - a reader racing a writer: note it, try again next poll
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

    def wait_seen(
        self, markers: Iterable[str], timeout: float, alive: Callable[[], bool] = lambda: True
    ) -> bool:
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
