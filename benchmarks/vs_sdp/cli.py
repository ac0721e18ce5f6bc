"""The command line of ``python -m benchmarks.vs_sdp``: measure, or re-render saved results, then write the
report."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import benchmarks.vs_sdp as package
from benchmarks._report import write_section
from benchmarks.vs_sdp import IMG, REPO
from benchmarks.vs_sdp.phase import Phase
from benchmarks.vs_sdp.report import plot, report_body
from benchmarks.vs_sdp.run import measure

MODES = ("loop", "schedule", "tidehouse")
SAVED_ARGS = ("rate", "probe_interval", "poll", "tiering", "window", "schedule", "burst")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.vs_sdp",
        description=package.__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--rate", type=int, default=1000, help="input rows per second (both systems)")
    ap.add_argument("--window", type=float, default=150.0, help="seconds of probing per run")
    ap.add_argument("--probe-interval", type=float, default=4.0, help="seconds between marker events")
    ap.add_argument("--schedule", type=float, default=60.0, help="SDP schedule period in seconds")
    ap.add_argument(
        "--tiering",
        type=lambda v: [float(x) for x in v.split(",")],
        default=[5.0, 30.0],
        help="Tidehouse tiering intervals in seconds, comma-separated (one run each)",
    )
    ap.add_argument(
        "--modes",
        type=lambda v: v.split(","),
        default=list(MODES),
        help=f"which runs, comma-separated, of {','.join(MODES)}",
    )
    ap.add_argument(
        "--burst",
        type=int,
        default=1_500_000,
        help="rows of the catch-up burst written after the SDP loop run and the Tidehouse run "
        "with the shortest tiering interval (0: no catch-up measurement)",
    )
    ap.add_argument(
        "--burst-wait",
        type=float,
        default=300.0,
        help="max seconds for the marker after the burst to reach ADS",
    )
    ap.add_argument("--poll", type=float, default=0.25, help="seconds between reads of every table")
    ap.add_argument(
        "--sdp-drain",
        type=float,
        default=240.0,
        help="max seconds after the probe window for SDP runs to show every marker",
    )
    ap.add_argument("--warmup", type=float, default=240.0, help="max seconds for a system to come up")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke run (~3-4 min): SDP loop + Tidehouse T=5s, 30 s windows, a marker per second",
    )
    ap.add_argument(
        "--settle",
        type=float,
        default=15.0,
        help="seconds to wait after a system is up before the first probe",
    )
    ap.add_argument(
        "--from-results",
        type=Path,
        nargs="+",
        default=None,
        help="re-render the table and plot from vs_sdp-results.json files of earlier runs, "
        "merged in order (no measuring)",
    )
    ap.add_argument(
        "--workdir", type=Path, default=None, help="where runs keep their files (default: a temp dir)"
    )
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
    telling = [
        ln
        for ln in lines
        if ("Exception" in ln or "Error" in ln or "error:" in ln) and not ln.startswith("at ")
    ]
    return (telling[-1] if telling else lines[0] if lines else "unknown")[:300]


def command_line(argv: Sequence[str]) -> str:
    return " ".join([".venv/bin/python -m benchmarks.vs_sdp", *argv]).strip()


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
            results = {
                "command": command,
                "started": started,
                "wall": time.time() - started,
                "failures": failures,
                "phases": [p.to_json() for p in phases.values()],
                "args": {k: getattr(args, k) for k in SAVED_ARGS},
            }
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
    plot(phases, IMG)
    write_section(
        "vs_sdp",
        "Tidehouse vs Spark Declarative Pipelines: freshness per layer (issue 8)",
        command,
        body,
        measured_at=measured_at,
    )
    print(f"wrote {IMG.relative_to(REPO)} and docs/benchmarks.md", flush=True)
    return 0
