"""The command line of ``python -m benchmarks.scale_out``: measure (or re-render saved results), then write
the ``scale_out`` section of docs/benchmarks.md."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import benchmarks.scale_out as package
from benchmarks._report import write_section
from benchmarks.scale_out import PATHS
from benchmarks.scale_out.cpu import load_average
from benchmarks.scale_out.report import Paths, Run, median_round, report_body

TITLE = "Scale-out: working off a backlog locally, on a standalone cluster and with SDP (issue 18)"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.scale_out",
        description=package.__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--rows", type=int, default=5_000_000, help="rows of the backlog")
    ap.add_argument("--file-rows", type=int, default=50_000, help="rows per input file")
    ap.add_argument(
        "--paths",
        type=lambda v: v.split(","),
        default=list(PATHS),
        help=f"which paths, comma-separated, of {','.join(PATHS)}",
    )
    ap.add_argument(
        "--worker-cores",
        type=int,
        default=0,
        help="cores of each standalone worker; 0: the machine's cores shared out among the workers (as many "
        "task slots as SDP's local[N] on every path)",
    )
    ap.add_argument("--worker-memory", default="2g", help="memory of each standalone worker")
    ap.add_argument("--executor-memory", default="1g", help="spark.executor.memory on the cluster")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds: every path runs this many times, interleaved; the report shows each path's median "
        "round and every round",
    )
    ap.add_argument("--run-timeout", type=float, default=7200.0, help="max seconds of one run")
    ap.add_argument("--workdir", type=Path, default=None, help="where runs keep their files (default: temp)")
    ap.add_argument("--keep", action="store_true", help="keep every run's files")
    ap.add_argument("--no-write", action="store_true", help="print the section only; do not touch docs/")
    ap.add_argument(
        "--from-results",
        type=Path,
        default=None,
        help="re-render from a scale_out-results.json (no measuring)",
    )
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    unknown = set(args.paths) - set(PATHS)
    if unknown:
        ap.error(f"unknown path(s) {sorted(unknown)}; choose from {','.join(PATHS)}")
    return args


def command_line(argv: Sequence[str]) -> str:
    return " ".join([".venv/bin/python -m benchmarks.scale_out", *argv]).strip()


PRODUCT = (
    "runtime",
    "materializer",
    "registry",
    "actions",
    "benchmarks/vs_sdp_flow",
    "benchmarks/sdp_project",
)


def code_version() -> str:
    """The commit measured, and whether the product's files differed from it."""
    import subprocess

    from benchmarks.vs_sdp import REPO

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short=10", "HEAD")
    if not commit:
        return "unknown (not a git checkout)"
    dirty = git("status", "--porcelain", "--", *PRODUCT)
    return f"commit {commit}" + (" with uncommitted changes to the product" if dirty else "")


def measure(args: argparse.Namespace, workdir: Path, save) -> tuple[list[Paths], dict]:
    """Every round of every path asked for (a failed path is reported, the others still run)."""
    from benchmarks.scale_out.runs import measure_path, write_backlog

    inputs = {"empty": workdir / "input-empty", "backlog": workdir / "input"}
    inputs["empty"].mkdir(parents=True, exist_ok=True)
    print(f"writing the backlog: {args.rows:,} rows into {inputs['backlog']}...", flush=True)
    meta = {"backlog_write_s": write_backlog(inputs["backlog"], args.rows, args.file_rows), "failures": {}}
    meta["code"] = code_version()
    rounds: list[Paths] = []
    for n in range(args.repeat):
        if args.repeat > 1:
            print(f"round {n + 1} of {args.repeat}", flush=True)
        rounds.append({})
        for key in args.paths:
            try:
                rounds[-1][key] = measure_path(key, workdir, inputs, args.rows, args, n + 1)
            except Exception as exc:  # noqa: BLE001 - a failed path is reported; the others still run
                why = (f"round {n + 1}: " if args.repeat > 1 else "") + str(exc)[-1500:]
                meta["failures"][key] = "; ".join(filter(None, [meta["failures"].get(key), why]))
                print(f"[{PATHS[key][0]}] FAILED: {why}", flush=True)
            save(rounds, meta)
    return rounds, meta


def dump(paths: Paths) -> dict:
    return {k: {kind: r.to_json() for kind, r in runs.items()} for k, runs in paths.items()}


def load(paths: dict) -> Paths:
    return {k: {kind: Run.from_json(r) for kind, r in runs.items()} for k, runs in paths.items()}


def saved_rounds(saved: dict) -> list[Paths]:
    """The rounds of a results file (one written before rounds existed holds one, as ``paths``)."""
    return [load(p) for p in saved["rounds"]] if "rounds" in saved else [load(saved["paths"])]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.from_results:
        saved = json.loads(args.from_results.read_text(encoding="utf-8"))
        rounds = saved_rounds(saved)
        meta, command, measured_at = saved["meta"], saved["command"], saved["meta"]["started"]
    else:
        started, load_start = time.time(), load_average()
        command = command_line(argv)
        workdir = args.workdir or Path(tempfile.mkdtemp(prefix="scale_out-"))
        workdir.mkdir(parents=True, exist_ok=True)
        out = (
            workdir if (args.keep or args.workdir) else Path(tempfile.gettempdir())
        ) / "scale_out-results.json"
        print(f"work directory: {workdir}", flush=True)
        settings = {
            k: getattr(args, k) for k in ("rows", "file_rows", "worker_cores", "worker_memory", "repeat")
        }
        settings["executor_memory"] = args.executor_memory
        settings["cpu_count"] = os.cpu_count() or 1

        def save(rounds: list[Paths], meta: dict) -> None:
            meta.update(settings, started=started, load_start=load_start)
            meta.update(wall=time.time() - started, load_end=load_average())
            doc = {
                "command": command,
                "meta": meta,
                "paths": dump(median_round(rounds)),  # what the tables show
                "rounds": [dump(paths) for paths in rounds],
            }
            out.write_text(json.dumps(doc, indent=1), encoding="utf-8")

        try:
            rounds, meta = measure(args, workdir, save)
            save(rounds, meta)
        finally:
            if not args.keep and args.workdir is None:
                shutil.rmtree(workdir, ignore_errors=True)
        measured_at = started
        print(f"measurements: {out} (re-render with --from-results)", flush=True)
    if not any(rounds):
        print("nothing measured", file=sys.stderr)
        return 1
    body = report_body(median_round(rounds), meta, rounds)
    if args.no_write:
        print(body)
        return 0
    write_section("scale_out", TITLE, command, body, measured_at=measured_at)
    return 0
