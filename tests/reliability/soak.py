"""Soak: a steady 4-layer flow for a long time, measuring memory, hot segments, lake snapshots and delays.

Not part of CI. Run it as a documented command::

    .venv/bin/python -m tests.reliability.soak --minutes 30 --workdir /tmp/tidehouse-soak

It scaffolds a project (``tidehouse init``: the ``ecommerce_activity`` flow, ODS -> DWD -> DWS -> ADS), starts
``tidehouse flow trigger`` (the driver, with its own tiering schedule) and a separate ``tidehouse tier
schedule`` (the tiering service), and appends a new JSON part file of shop events every few seconds. Every
``--every`` seconds it samples:

* RSS of the driver process tree (Python + its Spark JVM + Python workers) and of the scheduler;
* the number of hot log segments under the home, and lake snapshots per table (pyiceberg);
* the flow's hot and lake delay (``tidehouse flow status --json``).

It writes ``soak.csv`` and ``soak.json`` (the summary) into the workdir and prints the verdict: memory growth
after warm-up (median of the last fifth vs. the fifth after warm-up; the issue's bound is 10 %), and
whether segments and snapshots stayed bounded (the maximum of the last half is not above the first half's
maximum by more than the retention/maintenance slack).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from runtime.scaffold.generate import EventsConfig, shop_events, write_parts

FLOW = "ecommerce_activity"


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and all its descendants (MiB), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def lake_snapshots(home: Path, project_dir: Path) -> dict[str, int]:
    from runtime.project import Project

    project = Project.open(home=home, project_dir=project_dir)
    try:
        lake = project.lake
        return {name: len(lake.load(name).snapshots()) for name in lake.list_tables()}
    except Exception:  # noqa: BLE001 - the lake may be mid-commit; the next sample will tell
        return {}
    finally:
        project.close()


def status(env: dict, cwd: Path) -> dict:
    proc = subprocess.run(
        [tidehouse(), "flow", "status", FLOW, "--json"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    try:
        return json.loads(proc.stdout)
    except ValueError:
        return {}


def spawn(args: list[str], cwd: Path, env: dict, log: Path) -> subprocess.Popen:
    """Start ``tidehouse <args>`` with its output in ``log`` (the child keeps its own handle on the file)."""
    with open(log, "w") as fh:
        return subprocess.Popen([tidehouse(), *args], cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)


def tidehouse() -> str:
    return str(Path(sys.executable).with_name("tidehouse"))


def growth(values: list[float], warmup: int) -> float | None:
    """Median of the last fifth over the median of the first fifth after warm-up, minus one."""
    rest = values[warmup:]
    if len(rest) < 10:
        return None
    k = max(2, len(rest) // 5)
    first, last = statistics.median(rest[:k]), statistics.median(rest[-k:])
    return last / first - 1 if first else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/tidehouse-soak"))
    ap.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--file-every", type=float, default=5.0, help="seconds between new input files")
    ap.add_argument("--events-per-file", type=int, default=500)
    ap.add_argument("--warmup-minutes", type=float, default=3.0)
    args = ap.parse_args(argv)

    work = args.workdir.resolve()
    project = work / "proj"
    home = work / "home"
    if not project.exists():
        subprocess.run([tidehouse(), "init", str(project)], check=True, capture_output=True)
    env = {**os.environ, "TIDEHOUSE_HOME": str(home)}
    (project / "tidehouse.yaml").write_text(
        "tiering:\n  interval: 10s\n  max_snapshots: 20\n"
        "storage:\n  retention: 1m\n  segment_bytes: 1048576\n"
    )
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    driver = spawn(["flow", "trigger", f"flows/{FLOW}.yaml"], project, env, logs / "trigger.out")
    scheduler = None
    samples: list[dict] = []
    started = time.time()
    next_file = next_sample = started
    part = 1000
    try:
        while time.time() - started < args.minutes * 60:
            now = time.time()
            if (scheduler is None or scheduler.poll() is not None) and any(
                (home / "hot").glob("*/*/meta.json")
            ):
                # (re)start the tiering service once the flow's hot tables exist
                scheduler = spawn(["tier", "schedule", "--flow", FLOW], project, env, logs / "schedule.out")
            while now >= next_file:  # catch up if a slow sample held the loop
                cfg = EventsConfig(seed=part, events=args.events_per_file, malformed=0)
                write_parts(shop_events(cfg), project / "data" / "events", 1, first=part)
                part += 1
                next_file += args.file_every
            if now >= next_sample:
                snap = status(env, project)
                rows = snap.get("tables", [])
                sample = {
                    "t_s": round(now - started, 1),
                    "driver_rss_mb": round(tree_rss_mb(driver.pid), 1),
                    "scheduler_rss_mb": round(tree_rss_mb(scheduler.pid), 1) if scheduler else None,
                    "hot_segments": sum(1 for _ in (home / "hot").rglob("*.log"))
                    if (home / "hot").exists()
                    else 0,
                    "lake_snapshots_max": max(lake_snapshots(home, project).values(), default=0),
                    "hot_delay_s_max": max(
                        (r["hot_delay_s"] for r in rows if r.get("hot_delay_s") is not None), default=None
                    ),
                    "lake_delay_s_max": max(
                        (r["lake_delay_s"] for r in rows if r.get("lake_delay_s") is not None), default=None
                    ),
                    # which table lags most in the lake (the bound is about the tiering interval for every
                    # table)
                    "lake_delay_table": max(
                        (r for r in rows if r.get("lake_delay_s") is not None),
                        key=lambda r: r["lake_delay_s"],
                        default={},
                    ).get("table"),
                    "input_files": part - 1000,
                    "driver_alive": driver.poll() is None,
                }
                samples.append(sample)
                print(json.dumps(sample), flush=True)
                next_sample += args.every
            time.sleep(0.5)
    finally:
        for proc in (driver, scheduler):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in (driver, scheduler):
            if proc is not None:
                try:
                    proc.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    proc.kill()
    with open(work / "soak.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(samples[0]) if samples else ["t_s"])
        writer.writeheader()
        writer.writerows(samples)
    warm = sum(1 for s in samples if s["t_s"] < args.warmup_minutes * 60)
    half = len(samples) // 2
    seg = [s["hot_segments"] for s in samples]
    snaps = [s["lake_snapshots_max"] for s in samples]
    lake = [s["lake_delay_s_max"] for s in samples[warm:] if s["lake_delay_s_max"] is not None]
    summary = {
        "minutes": args.minutes,
        "samples": len(samples),
        "input_files": part - 1000,
        "driver_alive_at_end": bool(samples and samples[-1]["driver_alive"]),
        "driver_rss_growth": growth([s["driver_rss_mb"] for s in samples], warm),
        "scheduler_rss_growth": growth(
            [s["scheduler_rss_mb"] for s in samples if s["scheduler_rss_mb"]], warm
        ),
        "hot_segments_first_half_max": max(seg[:half], default=None),
        "hot_segments_last_half_max": max(seg[half:], default=None),
        "lake_snapshots_first_half_max": max(snaps[:half], default=None),
        "lake_snapshots_last_half_max": max(snaps[half:], default=None),
        "lake_delay_s_p50": statistics.median(lake) if lake else None,
        "lake_delay_s_max": max(lake, default=None),
    }
    (work / "soak.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    ok = all(g is None or g <= 0.10 for g in (summary["driver_rss_growth"], summary["scheduler_rss_growth"]))
    return 0 if ok and summary["driver_alive_at_end"] else 1


if __name__ == "__main__":
    sys.exit(main())
