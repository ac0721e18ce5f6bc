"""End-to-end hot latency of a 4-layer flow: a record lands in the source -> its effect is visible in ADS.

Flow: json files -> ods.events (append) -> dwd.events (append, filter) -> dws.per_probe (streaming
aggregation into a primary-key table) -> ads.seen (changelog-following filter into a primary-key table).
Each probe writes one new file holding one record with a fresh id and polls ``ads.seen`` (a key lookup in
the hot store) until the id appears. Probes run one after another.

Baseline, measured in the same run: Spark's own floor for one layer — a built-in json file-source query with
the same trigger whose ``foreachBatch`` only notes the arrival time of each probe (no Python data source,
no hot storage). Four layers cannot beat four of those.

    .venv/bin/python -m benchmarks.flow_latency [--probes 200] [--trigger 10ms]
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from pathlib import Path

import yaml

from benchmarks.stats import median, percentile

ACTIONS = {
    "b_ingest.sql": "/*---\nname: b_ingest\ninputs: [raw]\n---*/\nSELECT * FROM raw\n",
    "b_clean.sql": (
        "/*---\nname: b_clean\ninputs: [events]\n---*/\n"
        "SELECT id, kind, value FROM events WHERE kind <> 'noise'\n"
    ),
    "b_count.sql": (
        "/*---\nname: b_count\ninputs: [events]\n---*/\n"
        "SELECT id, count(*) AS n, sum(value) AS total FROM events GROUP BY id\n"
    ),
    "b_seen.sql": "/*---\nname: b_seen\ninputs: [counts]\n---*/\nSELECT id, n FROM counts WHERE n >= 1\n",
}

FLOW = Path(__file__).parent / "flows" / "latency.yaml"  # `trigger` set from --trigger


def land(folder: Path, probe_id: str) -> float:
    """Write one probe record atomically; return the landing time."""
    tmp = folder.parent / f".{probe_id}.tmp"
    tmp.write_text(json.dumps({"id": probe_id, "kind": "probe", "value": 1.0}) + "\n")
    t0 = time.time()
    tmp.rename(folder / f"{probe_id}.json")
    return t0


def baseline(spark, root: Path, probes: int, trigger: str) -> list[float]:
    """One built-in json file-source query whose foreachBatch notes the arrival of each probe."""
    folder = root / "baseline"
    folder.mkdir(parents=True)
    seen: dict[str, float] = {}
    cond = threading.Condition()

    def note(df, _batch_id):
        now = time.time()
        with cond:
            for row in df.select("id").collect():
                seen[row.id] = now
            cond.notify_all()

    query = (
        spark.readStream.schema("id string, kind string, value double")
        .json(str(folder))
        .writeStream.trigger(processingTime=trigger)
        .foreachBatch(note)
        .option("checkpointLocation", str(root / "baseline-ckpt"))
        .start()
    )
    latencies = []
    try:
        land(folder, "warmup")
        with cond:
            cond.wait_for(lambda: "warmup" in seen, timeout=120)
        for i in range(probes):
            pid = f"b{i}"
            t0 = land(folder, pid)
            with cond:
                cond.wait_for(lambda pid=pid: pid in seen, timeout=60)
            latencies.append(seen[pid] - t0)
    finally:
        query.stop()
    return latencies


def flow_probes(spark, root: Path, probes: int, trigger: str) -> tuple[list[float], dict]:
    import pyarrow as pa

    from materializer.runner import FlowRunner
    from runtime.project import Project

    project_dir = root / "project"
    (project_dir / "actions").mkdir(parents=True)
    (project_dir / "flows").mkdir()
    folder = project_dir / "data" / "probes"
    folder.mkdir(parents=True)
    for name, text in ACTIONS.items():
        (project_dir / "actions" / name).write_text(text)
    flow_path = project_dir / "flows" / "latency.yaml"
    flow = yaml.safe_load(FLOW.read_text(encoding="utf-8"))
    flow["trigger"] = trigger
    flow_path.write_text(yaml.safe_dump(flow, sort_keys=False), encoding="utf-8")
    project = Project.open(home=root / "home", project_dir=project_dir)
    plan = project.plan(flow_path, register=True, spark=spark)
    runner = FlowRunner(project, plan, spark=spark)
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, kwargs={"stop_event": stop, "tiering": False}, daemon=True)
    thread.start()
    store = project.store
    latencies: list[float] = []

    def visible(pid: str) -> bool:
        if not store.has_table("ads.seen"):
            return False
        return store.lookup("ads.seen", pa.table({"id": [pid]})).num_rows > 0

    def probe(pid: str, timeout: float) -> float:
        t0 = land(folder, pid)
        deadline = t0 + timeout
        while not visible(pid):
            if time.time() > deadline:
                raise TimeoutError(f"probe {pid} not visible in ads.seen after {timeout}s")
            time.sleep(0.005)
        return time.time() - t0

    try:
        probe("warmup", 300)  # first micro-batches start Python workers
        for i in range(probes):
            latencies.append(probe(f"p{i}", 60))
            if (i + 1) % 20 == 0:
                print(f"  {i + 1} probes, last {latencies[-1]:.3f}s", flush=True)
    finally:
        stop.set()
        thread.join(timeout=120)
        project.close()
    return latencies, {t.name: t.strategy for t in plan.tables}


def main() -> None:
    from benchmarks._report import argument_parser, markdown_table, write_section
    from runtime.core.durations import parse_duration
    from runtime.spark.session import get_spark

    parser = argument_parser("benchmarks.flow_latency", __doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--trigger", default="10ms")
    parser.add_argument("--baseline-probes", type=int, default=None, help="default: --probes")
    args = parser.parse_args()
    spark = get_spark("local[2]")
    trigger_ms = f"{int(parse_duration(args.trigger) * 1000)} milliseconds"
    with tempfile.TemporaryDirectory(prefix="th-latency-") as tmp:
        root = Path(tmp)
        flow, strategies = flow_probes(spark, root, args.probes, args.trigger)
        print(f"flow: p50 {median(flow):.3f}s over {len(flow)} probes", flush=True)
        base = baseline(spark, root, args.baseline_probes or args.probes, trigger_ms)
    rows = []
    for label, values in (
        ("4-layer flow: source file -> ads.seen visible", flow),
        ("baseline: 1 built-in file-source query -> foreachBatch", base),
    ):
        rows.append([label, len(values), median(values), percentile(values, 99), max(values)])
    p50_ratio = median(flow) / median(base)
    body = (
        markdown_table(["path", "probes", "p50 s", "p99 s", "max s"], rows)
        + f"\n\nTrigger `{args.trigger}`; strategies: "
        + ", ".join(f"{k} {v}" for k, v in strategies.items())
        + f".\nFlow p50 = {p50_ratio:.1f}x one built-in layer's p50 (4 layers). "
        + f"Targets p50 <= 2 s, p99 <= 5 s: p50 {'met' if median(flow) <= 2 else 'MISSED'}, "
        + f"p99 {'met' if percentile(flow, 99) <= 5 else 'MISSED'}."
    )
    write_section(
        "flow_latency",
        "End-to-end hot latency of a 4-layer flow",
        f".venv/bin/python -m benchmarks.flow_latency --probes {args.probes} --trigger {args.trigger}"
        + (f" --baseline-probes {args.baseline_probes}" if args.baseline_probes else ""),
        body,
    )


if __name__ == "__main__":
    main()
