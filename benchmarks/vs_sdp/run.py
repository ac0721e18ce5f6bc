"""Measuring: one phase (start a system, warm up, probe, drain, catch up, stop) and every selected run."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.vs_sdp.generator import Generator
from benchmarks.vs_sdp.phase import CatchUp, Phase
from benchmarks.vs_sdp.prober import Prober
from benchmarks.vs_sdp.report import rate_cell
from benchmarks.vs_sdp.sdp import Sdp
from benchmarks.vs_sdp.tidehouse import Tidehouse


def run_phase(
    name: str,
    system,
    generator: Generator,
    *,
    start: Callable[[], None],
    window: float,
    probe_interval: float,
    drain: float,
    warmup: float | None,
    poll: float,
    settle: float = 0.0,
    burst: int = 0,
    burst_wait: float = 300.0,
) -> Phase:
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
            print(
                f"[{name}] waiting for the system to come up (warm-up marker through every table)...",
                flush=True,
            )
            if not prober.wait_seen([marker], warmup, alive=system.alive):
                seen = {k: marker in o.seen for k, o in prober.observations.items()}
                raise RuntimeError(
                    f"[{name}] the warm-up marker did not reach every table within "
                    f"{warmup:.0f} s: {system.failure or 'no failure reported'}; seen: {seen}"
                )
            time.sleep(settle)  # let the backlog that built up during start-up drain before measuring
        print(f"[{name}] probing for {window:.0f} s (one marker every {probe_interval:g} s)...", flush=True)
        generator.probe_window(window, probe_interval)
        deadline = time.time() + window
        while time.time() < deadline and system.alive():
            time.sleep(0.5)
        time.sleep(0.1)
        if not prober.wait_seen(generator.measured(), drain, alive=system.alive):
            print(
                f"[{name}] not every marker was visible everywhere within the {drain:.0f} s drain", flush=True
            )
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
    phase = Phase(
        name,
        generator.rate,
        generator.measured(),
        prober.observations,
        steady_rss,
        steady_rows,
        ended - began,
        runs=list(getattr(system, "runs", [])),
        errors=list(getattr(system, "notes", [])) + prober.errors[-5:],
        load=sum(prober.loads) / len(prober.loads) if prober.loads else None,
        ended=ended,
        catchup=catchup,
    )
    for label in phase.observations:
        s = phase.summary(label)
        print(
            f"[{name}] {label:10s} n={s.n}/{len(phase.probes)} p50={s.p50:.2f}s p95={s.p95:.2f}s "
            f"max={s.max:.2f}s",
            flush=True,
        )
    if catchup is not None:
        cost, rate = phase.catchup_cost(), phase.catchup_rate()
        print(
            f"[{name}] catch-up: {catchup.rows:,} rows cost "
            + (
                "(marker not seen)"
                if cost is None or rate is None
                else f"{cost[0]:.1f} ± {cost[1]:.1f} s -> {rate_cell(rate)} rows/s"
            ),
            flush=True,
        )
    return phase


def measure_catchup(
    name: str, system, generator: Generator, prober: Prober, rows: int, wait: float
) -> CatchUp:
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


def measure(
    args: argparse.Namespace, workdir: Path, save: Callable[[dict[str, Phase], dict[str, str]], None]
) -> tuple[dict[str, Phase], dict[str, str]]:
    """Run the selected systems one after the other. A run that fails is reported (``failures``) and the
    others still run; ``save`` is called after every run so no measurement is lost."""
    phases: dict[str, Phase] = {}
    failures: dict[str, str] = {}

    def attempt(name: str, run: Callable[[], Phase]) -> None:
        try:
            phases[name] = run()
        except Exception as exc:  # noqa: BLE001 - a failed run is reported; the others still run
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
                attempt(
                    name,
                    lambda: run_phase(
                        name,
                        sdp,
                        gen,
                        start=lambda: sdp.start(args.schedule),
                        window=args.window,
                        probe_interval=args.probe_interval,
                        drain=args.schedule + args.sdp_drain,
                        warmup=args.warmup,
                        poll=args.poll,
                        settle=args.settle,
                    ),
                )
            if "loop" in args.modes:
                sdp.runs, sdp.failure = [], None
                attempt(
                    "SDP loop",
                    lambda: run_phase(
                        "SDP loop",
                        sdp,
                        gen,
                        start=lambda: sdp.start(period=None),
                        window=args.window,
                        probe_interval=args.probe_interval,
                        drain=args.sdp_drain,
                        warmup=None if phases else args.warmup,
                        poll=args.poll,
                        settle=args.settle,
                        burst=args.burst,
                        burst_wait=args.burst_wait,
                    ),
                )
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
                attempt(
                    name,
                    lambda th=th, gen=gen, budget=budget, t=t, name=name, burst=burst: run_phase(
                        name,
                        th,
                        gen,
                        start=lambda: th.start(budget),
                        window=args.window,
                        probe_interval=args.probe_interval,
                        drain=t + 60.0,
                        warmup=args.warmup,
                        poll=args.poll,
                        settle=args.settle,
                        burst=burst,
                        burst_wait=args.burst_wait,
                    ),
                )
            finally:
                gen.stop()
    return phases, failures
