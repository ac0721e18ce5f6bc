"""The figures of a scale-out run and its section of docs/benchmarks.md: arithmetic and formatting only (no
Spark), so every printed figure is tested on made-up measurements (tests/benchmarks)."""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks._report import markdown_table
from benchmarks.scale_out import PATHS, TABLES
from benchmarks.scale_out.cpu import CpuReading

DRIVER_SHARE_TARGET = 0.10  # issue 18: driver CPU at most 10% of all CPU on the cluster path
SDP_RATIO_TARGET = 1.0  # issue 18: the cluster path at least as fast as SDP


@dataclass
class Run:
    """One run of a path: ``rows`` of backlog (0: the empty run), wall seconds (start to exit), CPU."""

    rows: int
    wall: float
    cpu: CpuReading
    data_path: str = ""
    finished_s: float | None = None  # the run by its own clock (Tidehouse: "finished in"; SDP: its log)
    tiering_s: float | None = None  # Tidehouse: the final tiering cycle of --until-idle
    tables: dict = field(default_factory=dict)  # table -> rows, batches, batch_seconds
    note: str | None = None  # what went wrong with the output (rows missing)

    def to_json(self) -> dict:
        return {**{k: v for k, v in self.__dict__.items() if k != "cpu"}, "cpu": self.cpu.to_json()}

    @classmethod
    def from_json(cls, d: dict) -> Run:
        return cls(**{**d, "cpu": CpuReading.from_json(d["cpu"])})


@dataclass
class Figures:
    """One path's figures: its backlog run against its empty run."""

    key: str
    rows: int
    backlog_s: float
    empty_s: float
    tiering_s: float | None  # the backlog run's final tiering minus the empty run's
    own_s: float | None  # the backlog cost by the runs' own clocks (after Spark started, before it stops)
    driver_cpu: float  # CPU seconds the backlog added, driver tree
    all_cpu: float  # ... every measured process (driver + cluster)
    backlog_driver_cpu: float
    backlog_all_cpu: float
    empty_driver_cpu: float
    empty_all_cpu: float
    machine_cores: float  # average busy cores of the machine during the backlog run
    other_cpu: float  # CPU seconds of the machine during the backlog run not in the measured processes
    load: float  # mean 1-min load average during the backlog run
    data_path: str

    @property
    def label(self) -> str:
        return PATHS[self.key][0]

    @property
    def work_s(self) -> float:
        """Seconds the backlog cost: the backlog run minus the empty run."""
        return self.backlog_s - self.empty_s

    @property
    def rate(self) -> float | None:
        return self.rows / self.work_s if self.work_s > 0 and self.rows else None

    @property
    def own_rate(self) -> float | None:
        return self.rows / self.own_s if self.own_s is not None and self.own_s > 0 and self.rows else None

    @property
    def hot_rate(self) -> float | None:
        """Rows/s into the hot tables: the cost without the final tiering cycle (Tidehouse only)."""
        if self.tiering_s is None:
            return None
        hot = self.work_s - self.tiering_s
        return self.rows / hot if hot > 0 and self.rows else None

    @property
    def cpu_rate(self) -> float | None:
        """Rows per CPU second the backlog added (every measured process): the rate per busy core, which
        other work on the machine disturbs less than the wall-clock rate."""
        return self.rows / self.all_cpu if self.all_cpu > 0 and self.rows else None

    def per_million(self, cpu: float) -> float | None:
        return cpu / (self.rows / 1e6) if self.rows else None

    @property
    def driver_share(self) -> float | None:
        """The driver's part of the CPU the backlog added."""
        return self.driver_cpu / self.all_cpu if self.all_cpu > 0 else None

    @property
    def others_share(self) -> float | None:
        """The part of the machine's busy CPU during the backlog run that other work took."""
        busy = self.other_cpu + self.backlog_all_cpu
        return self.other_cpu / busy if busy > 0 else None

    @property
    def backlog_driver_share(self) -> float | None:
        """The driver's part of all CPU of the backlog run, start-up included."""
        return self.backlog_driver_cpu / self.backlog_all_cpu if self.backlog_all_cpu > 0 else None


def workers_text(meta: dict) -> str:
    """The workers' cores as the run chose them (``--worker-cores``; 0: the machine's shared out)."""
    if meta.get("worker_cores"):
        return f"{meta['worker_cores']} core(s)"
    n = int(meta.get("cpu_count", 2))
    one, two = max(1, n), max(1, n // 2)
    return (
        f"the machine's {n} cores shared out (1 worker of {one} core(s), 2 workers of {two} core(s) each: "
        f"the task slots of SDP's local[{n}])"
    )


def figures(key: str, runs: dict[str, Run]) -> Figures:
    backlog, empty = runs["backlog"], runs["empty"]

    def both(run: Run) -> tuple[float, float]:
        return run.cpu.groups.get("driver", 0.0), sum(run.cpu.groups.values())

    (bd, ba), (ed, ea) = both(backlog), both(empty)
    tiering = None
    if backlog.tiering_s is not None:
        tiering = backlog.tiering_s - (empty.tiering_s or 0.0)
    own = None
    if backlog.finished_s is not None and empty.finished_s is not None:
        own = backlog.finished_s - empty.finished_s
    return Figures(
        key=key,
        rows=backlog.rows,
        backlog_s=backlog.wall,
        empty_s=empty.wall,
        tiering_s=tiering,
        own_s=own,
        driver_cpu=bd - ed,
        all_cpu=ba - ea,
        backlog_driver_cpu=bd,
        backlog_all_cpu=ba,
        empty_driver_cpu=ed,
        empty_all_cpu=ea,
        machine_cores=backlog.cpu.machine / backlog.cpu.seconds if backlog.cpu.seconds > 0 else 0.0,
        other_cpu=max(0.0, backlog.cpu.machine - ba),
        load=backlog.cpu.load,
        data_path=backlog.data_path or ("—" if key == "sdp" else ""),
    )


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def num(v: float | None, digits: int = 0) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def times(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}×"


def pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


METHOD = """\
Every path works off the same backlog of JSON event files (the vs_sdp generator's rows: 20,000 users, ~2%
malformed), written before any run, through the same four layers (ODS land raw → DWD clean → DWS spend per
user → ADS top 100). Each path runs twice on a fresh state, one after the other on this machine: over an
empty input directory, then over the backlog. **backlog cost** = the backlog run's wall time minus the
empty run's (process start to exit), so JVM and Spark start-up, table creation, query start and shutdown
are not in it (Tidehouse's runs start their driver JVM without the class archive, `spark.class_archive:
false`, so that the empty and the backlog run start alike); **rows/s, wall** = backlog rows ÷ that cost.
The same by each run's **own clock**, which leaves out the start of the JVMs and of the Spark session and
the exit (noisy on a busy machine): Tidehouse from after its Spark session started to the end of the run
(`flow trigger` prints "finished in"), SDP from "Starting run..." to "Run is COMPLETED." in its log
(stamped in whole seconds).

* Tidehouse: `tidehouse flow trigger flows/vs_sdp.yaml --until-idle` (benchmarks/vs_sdp_flow, its trigger
  100 ms and `materializer.max_rows_per_batch` default): every layer drained in order, each layer's tables
  tiered into the Iceberg lake in the background once it is drained (while the next layers run), then one
  final tiering cycle of every table — the lake is in the cost. *rows/s into hot* leaves that final cycle
  out; since the background cycles write most of the lake while later layers run, it no longer leaves the
  lake's cost out (it did before those cycles, when the final cycle wrote every table).
* Tidehouse local[*]: the driver path (what `materializer.data_path: auto` picks on a `local[...]` master),
  and the executor path (`data_path: executors`: Spark tasks read, transform and write in the driver's JVM
  and its Python workers), to see whether `auto` picks the faster one for a backlog too.
* SDP: one `spark-pipelines --remote local[2] run` of benchmarks/sdp_project (as benchmarks/vs_sdp runs
  it): its streaming tables take the backlog, its materialized views are computed once.
* Cluster paths: a Spark standalone master and N workers on this machine (127.0.0.1; the launcher of the
  cluster tests), `spark.master: spark://…` in the project file, `materializer.data_path: auto` (=
  executors). The 2 machine cores are shared by the driver, the master, the workers and the executors.
* Rounds (`--repeat N`): the paths run N times, interleaved (SDP, local driver path, local executor
  path, 1 worker, 2 workers, then again), because two runs of the same path on this machine can differ by a
  quarter. The tables show, per path, the round whose backlog cost is the median (the lower middle one for
  an even N); the targets are read from those, and the table of rounds lists every round's rate, ratio to
  the same round's SDP and driver share; the driver-share lines also give the share of all rounds' added
  CPU together.
* CPU: `utime + stime` from `/proc`, sampled every 0.5 s per process; **driver** = the `tidehouse` process
  (or `spark-pipelines`) and everything it started (its JVM — in local mode also the tasks — and Python
  workers); **all** = driver + cluster (master, workers, executors, their Python workers). Per million rows
  and the driver's share are computed on what the backlog added over the empty run; the share over the
  whole backlog run (start-up included) is shown next to it. *rows per CPU second* = backlog rows ÷ all
  CPU seconds the backlog added: a rate per busy core, less disturbed by other work on the machine than
  the wall-clock rate. *other processes* = the machine's busy CPU (`/proc/stat`) during the backlog run
  minus the measured processes: other work on the machine (and this script).
"""


Paths = dict[str, dict[str, Run]]  # path key -> "empty"/"backlog" -> its run


def complete(runs: dict[str, Run]) -> bool:
    return {"backlog", "empty"} <= set(runs)


def median_round(rounds: list[Paths]) -> Paths:
    """Per path, the runs of the round whose backlog cost (wall) is the median of that path's complete
    rounds — the lower middle one for an even count; a path with no complete round keeps its last runs."""
    out: Paths = {}
    for key in dict.fromkeys(k for r in rounds for k in r):
        done = [r[key] for r in rounds if key in r and complete(r[key])]
        if not done:
            out[key] = next(r[key] for r in reversed(rounds) if key in r)
            continue
        done.sort(key=lambda runs: figures(key, runs).work_s)
        out[key] = done[(len(done) - 1) // 2]
    return out


def rounds_table(rounds: list[Paths]) -> str:
    """Every round's figures per path: backlog cost, rate, ratio to the same round's SDP, driver share."""
    rows = []
    for n, paths in enumerate(rounds, 1):
        figs = {key: figures(key, runs) for key, runs in paths.items() if complete(runs)}
        sdp = figs.get("sdp")
        for key, f in figs.items():
            rows.append(
                [
                    str(n),
                    f.label,
                    num(f.work_s, 1),
                    num(f.rate),
                    "—" if key == "sdp" else times(ratio(f.rate, sdp.rate if sdp else None)),
                    pct(f.driver_share) if PATHS[key][1] else "—",
                ]
            )
    return f"Every round ({len(rounds)}), in the order run:\n\n" + markdown_table(
        ["round", "path", "backlog cost, wall (s)", "rows/s, wall", "× SDP, same round", "driver share"], rows
    )


def spread(rounds: list[Paths], key: str, value, extra: str = "", of: str = "sdp") -> str:
    """`value(figures of key, figures of the path ``of``)` in each round that has ``key`` (None for a round
    without ``of``), formatted (``extra`` after the list), or "" with one."""
    seen = []
    for paths in rounds:
        if key in paths and complete(paths[key]):
            other = paths.get(of)
            seen.append(
                value(figures(key, paths[key]), figures(of, other) if other and complete(other) else None)
            )
    return f" (each round: {', '.join(seen)}{extra})" if len(seen) > 1 else ""


def pooled_share(rounds: list[Paths], key: str) -> str:
    """The driver's share of the CPU the backlog added over every complete round of ``key`` together (each
    round's added driver CPU summed over each round's added CPU summed), or "" with fewer than two rounds."""
    parts = [figures(key, paths[key]) for paths in rounds if key in paths and complete(paths[key])]
    driver, total = sum(f.driver_cpu for f in parts), sum(f.all_cpu for f in parts)
    if len(parts) < 2 or total <= 0:
        return ""
    share = pct(driver / total)
    return f"; all {len(parts)} rounds together: {share} ({num(driver, 1)} of {num(total, 1)} s)"


def report_body(paths: Paths, meta: dict, rounds: list[Paths] | None = None) -> str:
    """The section: ``paths`` in its tables (with rounds: each path's :func:`median_round`), and every round
    of ``rounds`` listed when there are several."""
    rounds = rounds or [paths]
    figs = {key: figures(key, runs) for key, runs in paths.items() if complete(runs)}
    sdp = figs.get("sdp")
    sdp_rate = sdp.rate if sdp else None
    sdp_cpu_rate = sdp.cpu_rate if sdp else None
    sdp_own_rate = sdp.own_rate if sdp else None
    out = [METHOD]
    rows = []
    for f in figs.values():
        rows.append(
            [
                f.label,
                f.data_path,
                num(f.backlog_s, 1),
                num(f.empty_s, 1),
                num(f.work_s, 1),
                num(f.own_s, 1),
                num(f.rate),
                times(ratio(f.rate, sdp_rate)),
                num(f.own_rate),
                times(ratio(f.own_rate, sdp_own_rate)),
                num(f.tiering_s, 1),
                num(f.hot_rate),
            ]
        )
    out.append(
        f"Backlog: **{meta['rows']:,} rows** in files of {meta['file_rows']:,} rows "
        f"({meta['backlog_write_s']:.0f} s to write). Workers: {workers_text(meta)}, "
        f"{meta['worker_memory']} each, executors {meta['executor_memory']}. Code: {meta.get('code', '?')}.\n"
    )
    out.append(
        markdown_table(
            [
                "path",
                "data path",
                "backlog run (s)",
                "empty run (s)",
                "backlog cost, wall (s)",
                "backlog cost, own clock (s)",
                "rows/s, wall",
                "× SDP",
                "rows/s, own clock",
                "× SDP, own clock",
                "of the cost: final tiering (s)",
                "rows/s into hot, wall",
            ],
            rows,
        )
    )
    cpu_rows = []
    for f in figs.values():
        cpu_rows.append(
            [
                f.label,
                f"{num(f.backlog_driver_cpu, 1)} / {num(f.empty_driver_cpu, 1)}",
                f"{num(f.backlog_all_cpu, 1)} / {num(f.empty_all_cpu, 1)}",
                num(f.per_million(f.driver_cpu), 1),
                num(f.per_million(f.all_cpu), 1),
                num(f.cpu_rate),
                times(ratio(f.cpu_rate, sdp_cpu_rate)),
                pct(f.driver_share),
                pct(f.backlog_driver_share),
                num(f.machine_cores, 2),
                num(f.other_cpu, 1),
                num(f.load, 2),
            ]
        )
    out.append("\nCPU (seconds; backlog run / empty run):\n")
    out.append(
        markdown_table(
            [
                "path",
                "driver CPU s",
                "all CPU s",
                "driver CPU s per M rows",
                "all CPU s per M rows",
                "rows per CPU second",
                "× SDP, per CPU second",
                "driver share of the added CPU",
                "driver share, whole backlog run",
                "machine busy (cores, mean)",
                "other processes (CPU s)",
                "load avg (1 min, mean)",
            ],
            cpu_rows,
        )
    )
    out.append("\n" + kinds_table(paths))
    out.append("\n" + batches_table(paths))
    if len(rounds) > 1:
        out.append("\n" + rounds_table(rounds))
    out.append("\n" + "\n".join(conclusions(figs, rounds)))
    busy = ", ".join(f"{f.label} {pct(f.others_share)}" for f in figs.values())
    if busy:
        out.append(
            f"\nOther work on the machine took this part of its busy CPU during each backlog run: {busy}. "
            "The wall-clock and own-clock rates include the time a run waited for the cores; the rates "
            "per CPU second do not."
        )
    out.append(
        f"\nTotal wall time of the measuring script: {meta['wall']:.0f} s; 1-minute load average "
        f"{meta['load_start']:.2f} at its start, {meta['load_end']:.2f} at its end (each run's mean: above)."
    )
    notes = [
        f"* {PATHS[key][0]}, {kind} run: {run.note}"
        for key, runs in paths.items()
        for kind, run in runs.items()
        if run.note
    ]
    notes += [f"* **{PATHS[k][0]} failed**: {msg}" for k, msg in meta.get("failures", {}).items()]
    notes += [f"* {note}" for note in meta.get("notes", [])]  # added to the saved results by hand
    if notes:
        out.append("\nNotes:\n\n" + "\n".join(notes))
    return "\n".join(out)


def compare(a: Figures, b: Figures) -> list[tuple[str, float | None, str]]:
    """``a`` ÷ ``b`` by each measure of speed: (measure, ratio, "rate of a vs rate of b")."""
    out = []
    for name, attr in (
        ("by wall clock", "rate"),
        ("by own clocks", "own_rate"),
        ("per CPU second", "cpu_rate"),
    ):
        x, y = getattr(a, attr), getattr(b, attr)
        out.append((name, ratio(x, y), f"{num(x)} vs {num(y)}"))
    return out


def spelled(pairs: list[tuple[str, float | None, str]], unit: str = "rows/s") -> str:
    first, *rest = pairs
    text = f"{times(first[1])} {first[0]} ({first[2]} {unit})"
    return text + "".join(f", {times(r)} {name}" for name, r, _ in rest)


def reaching(pairs: list[tuple[str, float | None, str]], target: float) -> tuple[list[str], list[str]]:
    """The measures whose ratio reaches ``target``, and the others (no ratio counts as not reaching it)."""
    met = [name for name, r, _ in pairs if r is not None and r >= target]
    return met, [name for name, _, _ in pairs if name not in met]


def verdict_of(pairs: list[tuple[str, float | None, str]], target: float) -> str:
    met, missed = reaching(pairs, target)
    if not missed:
        return "**met**"
    if not met:
        return "**not met**"
    return f"**met** {', '.join(met)}; **not met** {', '.join(missed)}"


def conclusions(figs: dict[str, Figures], rounds: list[Paths] | None = None) -> list[str]:
    """The ratios the issue asks for, with its targets, by every measure of speed (and each round's)."""
    rounds = rounds or []
    lines = []
    one, two, sdp, local, local_exec = (
        figs.get(k) for k in ("cluster1", "cluster2", "sdp", "local", "local-exec")
    )
    if one and two:
        lines.append(f"* Cluster, 2 workers ÷ 1 worker: {spelled(compare(two, one))}.")
    for f in (one, two):
        if f is None:
            continue
        if sdp is not None:
            pairs = compare(f, sdp)
            each = spread(rounds, f.key, lambda x, s: times(ratio(x.rate, s.rate if s else None)))
            lines.append(
                f"* Target {f.label} ≥ {SDP_RATIO_TARGET:.1f}× SDP: {spelled(pairs)} — "
                f"{verdict_of(pairs, SDP_RATIO_TARGET)}{each}."
            )
        if local is not None:
            lines.append(f"* {f.label} ÷ local driver path: {spelled(compare(f, local))}.")
        share = f.driver_share
        ok = share is not None and share <= DRIVER_SHARE_TARGET
        each = spread(rounds, f.key, lambda x, _: pct(x.driver_share), pooled_share(rounds, f.key))
        lines.append(
            f"* Target driver CPU ≤ {DRIVER_SHARE_TARGET:.0%} of all CPU, {f.label}: {pct(share)} of the CPU "
            f"the backlog added ({num(f.driver_cpu, 1)} of {num(f.all_cpu, 1)} s; "
            f"{pct(f.backlog_driver_share)} of the whole run) — {verdict(ok)}{each}."
        )
    if local is not None and sdp is not None:
        lines.append(f"* Local driver path ÷ SDP: {spelled(compare(local, sdp))}.")
    if local is not None and local_exec is not None:
        pairs = compare(local, local_exec)
        each = spread(
            rounds, "local", lambda x, e: times(ratio(x.rate, e.rate if e else None)), of="local-exec"
        )
        lines.append(
            f"* `data_path: auto` on local[*] (the driver path) ÷ the executor path there: "
            f"{spelled(pairs)} — {auto_verdict(pairs)}{each}."
        )
    return lines


def auto_verdict(pairs: list[tuple[str, float | None, str]]) -> str:
    """Whether ``auto``'s choice on one machine (the driver path) was the faster one, by each measure."""
    faster, slower = reaching(pairs, 1.0)
    if not slower:
        return "the faster path"
    if not faster:
        return "**the slower path**"
    return f"faster {', '.join(faster)}; **slower** by the other measures"


KINDS = (
    ("driver process (Python)", "driver", None),
    ("driver JVM", "driver", "java"),
    ("driver's Python workers", "driver", "python"),
    ("cluster JVMs (master, workers, executors)", "cluster", "java"),
    ("executors' Python workers", "cluster", "python"),
)


def kind_seconds(run: Run, group: str, kind: str | None) -> float:
    """CPU seconds of one kind of process of a run (``kind`` None: the group's own top process, neither a
    JVM nor a Python worker)."""
    total = 0.0
    for name, cpu in run.cpu.kinds.items():
        g, k = name.split("/", 1)
        if g == group and (k == kind if kind else k not in ("java", "python")):
            total += cpu
    return total


def kinds_table(paths: dict[str, dict[str, Run]]) -> str:
    """Where the CPU the backlog added went, by kind of process, per million rows."""
    rows = []
    for key, runs in paths.items():
        backlog, empty = runs.get("backlog"), runs.get("empty")
        if key == "sdp" or backlog is None or empty is None or not backlog.rows or not backlog.cpu.kinds:
            continue  # SDP's processes (a JVM running a Python client of a Connect server) do not split so
        cells = []
        for _, group, kind in KINDS:
            if group == "cluster" and not PATHS[key][1]:
                cells.append("—")
                continue
            added = kind_seconds(backlog, group, kind) - kind_seconds(empty, group, kind)
            cells.append(num(added / (backlog.rows / 1e6), 1))
        rows.append([PATHS[key][0], *cells])
    if not rows:
        return ""
    return (
        "Where Tidehouse's CPU went (backlog run minus empty run, CPU seconds per million rows, by kind of "
        "process; in local mode the tasks run in the driver's JVM and Python workers):\n\n"
        + markdown_table(["path", *(label for label, _, _ in KINDS)], rows)
    )


def batches_table(paths: dict[str, dict[str, Run]]) -> str:
    """Micro-batches per Tidehouse table in each backlog run, and the seconds Spark spent in them."""
    rows = []
    for key, runs in paths.items():
        run = runs.get("backlog")
        if key == "sdp" or run is None:
            continue
        cells = []
        for table in TABLES.values():
            t = run.tables.get(table, {})
            spent = (t.get("batch_seconds") or {}).get("total")
            cells.append("—" if "batches" not in t else f"{t['batches']} / {num(spent, 1)}")
        rows.append([PATHS[key][0], *cells])
    if not rows:
        return ""
    return "Micro-batches per table in the backlog run / seconds in them (Spark's batch durations):\n\n" + (
        markdown_table(["path", *TABLES.values()], rows)
    )
