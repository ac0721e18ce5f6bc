"""The input: one generator of JSON event files and marker events for both systems."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path

from benchmarks.vs_sdp import PROBE_PREFIX, PROBE_PRICE


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

    def __init__(
        self,
        directory: Path,
        rate: int,
        *,
        file_interval: float = 0.5,
        seed: int = 8,
        users: int = 20_000,
        pool: int = 50_000,
    ) -> None:
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
            lines.append(
                json.dumps(
                    {
                        "user_id": f"u{rnd.randrange(users):06d}",
                        "event_type": event,
                        "item_id": f"i{rnd.randrange(5000)}",
                        "price": price,
                        "ts": "@TS@",
                    }
                )
            )
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
            take = self._pool[self._cursor : self._cursor + rows - len(chunk)]
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
            row = {
                "user_id": marker,
                "event_type": "click",
                "item_id": "probe",
                "price": PROBE_PRICE + self._seq,
                "ts": stamp,
            }
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

    def start(self) -> Generator:
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
            self._stop.wait(
                max(0.0, min(next_file, self._next_probe if self.probing() else next_file) - time.time())
            )

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
