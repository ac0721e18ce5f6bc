"""CPU seconds of the processes under test, from Linux ``/proc``: per group of this script's children.

A :class:`CpuMeter` samples every descendant of this process every ``interval`` s and keeps, per process
(pid and start time, so a reused pid is another process), the largest ``utime + stime`` seen. A process
belongs to the group of the child of this script it descends from: the cluster's master and workers (with
the executors and Python workers they start) are one group, anything else (the ``tidehouse flow trigger``
driver with its JVM and Python workers, or ``spark-pipelines`` with its Spark Connect server) the driver.
This script's own CPU is in neither. CPU a process spends after its last sample, when it exits, is not
counted: at most ``interval`` s of it on an idle machine, more when the sampling thread waits for a core.

The machine's CPU (every process, from ``/proc/stat``) and its 1-minute load average are sampled too, so a
run says how busy the machine was with other work.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, int, float, str] | None:
    """(parent pid, start time in ticks, CPU seconds of the process itself, its command name) of ``pid``,
    None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    head, tail = text.rsplit(")", 1)
    fields = tail.split()  # after the command name, which may hold spaces
    # fields[0] is field 3 of proc(5): state; ppid is field 4, utime 14, stime 15, starttime 22
    return int(fields[1]), int(fields[19]), (int(fields[11]) + int(fields[12])) / TICK, head.split("(", 1)[1]


def kind(command: str) -> str:
    """What a process is, by its command name: ``java`` (a JVM), ``python`` (Spark's Python workers and
    daemons), else the name (the driver's own process: ``tidehouse``, ``spark-pipelines``)."""
    return "python" if command.startswith("python") else command


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy since boot (``/proc/stat``: all but idle and
    iowait)."""
    with open("/proc/stat") as fh:
        ticks = [int(v) for v in fh.readline().split()[1:]]
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / TICK  # user nice system idle iowait irq softirq steal


def load_average() -> float:
    return os.getloadavg()[0]


@dataclass
class CpuReading:
    """What a :class:`CpuMeter` measured between its start and stop."""

    seconds: float  # wall
    groups: dict[str, float]  # CPU seconds per group
    machine: float  # CPU seconds of the whole machine
    loads: list[float] = field(default_factory=list)  # 1-min load averages sampled during the run
    kinds: dict[str, float] = field(default_factory=dict)  # "group/kind" -> CPU seconds (see ``kind``)

    @property
    def load(self) -> float:
        return sum(self.loads) / len(self.loads) if self.loads else 0.0

    def to_json(self) -> dict:
        return {
            "seconds": self.seconds,
            "groups": self.groups,
            "machine": self.machine,
            "loads": self.loads,
            "kinds": self.kinds,
        }

    @classmethod
    def from_json(cls, d: dict) -> CpuReading:
        return cls(
            d["seconds"], dict(d["groups"]), d["machine"], list(d.get("loads", [])), d.get("kinds", {})
        )


class CpuMeter:
    """Samples the CPU of this script's descendants per group until stopped (see the module docstring).

    ``groups``: group name -> a function returning the pids of this script's children in that group now;
    a descendant of any other child is in ``default``.
    """

    def __init__(
        self,
        groups: dict[str, Callable[[], list[int]]] | None = None,
        *,
        default: str = "driver",
        interval: float = 0.5,
    ):
        self.groups, self.default, self.interval = groups or {}, default, interval
        self._cpu: dict[tuple[int, int], tuple[str, float]] = {}  # (pid, start) -> ("group/kind", max CPU s)
        self._baseline: dict[tuple[int, int], float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loads: list[float] = []
        self._began = self._machine = 0.0

    def _sample(self) -> None:
        me = os.getpid()
        parent: dict[int, int] = {}
        info: dict[int, tuple[int, float, str]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                st = _stat(int(entry))
                if st is not None:
                    parent[int(entry)] = st[0]
                    info[int(entry)] = st[1:]
        owners = {pid: name for name, pids in self.groups.items() for pid in pids()}
        for pid, (start, cpu, command) in info.items():
            node, chain = pid, 0
            while node in parent and parent[node] != me and chain < 64:  # up to a child of this script
                node, chain = parent[node], chain + 1
            if parent.get(node) != me:
                continue  # not a descendant of this script
            group = f"{owners.get(node, self.default)}/{kind(command)}"
            key = (pid, start)
            previous = self._cpu.get(key, (group, 0.0))[1]
            self._cpu[key] = (group, max(previous, cpu))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()
            self._loads.append(load_average())

    def start(self) -> CpuMeter:
        self._began, self._machine = time.monotonic(), machine_busy_seconds()
        self._sample()  # processes already running (a cluster's master and workers): count their growth only
        self._baseline = {key: cpu for key, (_, cpu) in self._cpu.items()}
        self._loads = [load_average()]
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> CpuReading:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        groups: dict[str, float] = {self.default: 0.0, **{name: 0.0 for name in self.groups}}
        kinds: dict[str, float] = {}
        for key, (group_kind, cpu) in self._cpu.items():
            grown = cpu - self._baseline.get(key, 0.0)
            kinds[group_kind] = kinds.get(group_kind, 0.0) + grown
            group = group_kind.split("/", 1)[0]
            groups[group] = groups.get(group, 0.0) + grown
        return CpuReading(
            time.monotonic() - self._began,
            {k: round(v, 2) for k, v in groups.items()},
            round(machine_busy_seconds() - self._machine, 2),
            [*self._loads, load_average()],
            {k: round(v, 2) for k, v in sorted(kinds.items())},
        )
