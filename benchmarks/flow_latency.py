"""End-to-end hot latency of a 4-layer flow: a record lands in the source -> its effect is visible in ADS.

Flow: json files -> ods.events (append) -> dwd.events (append, filter) -> dws.per_probe (streaming
aggregation into a primary-key table) -> ads.seen (changelog-following filter into a primary-key table).
Each probe writes one new file holding one record with a fresh id and polls ``ads.seen`` (a key lookup in
the hot store) until the id appears. Probes run one after another.

Baseline, measured in the same run: Spark's own floor for one layer — a built-in json file-source query with
the same trigger whose ``foreachBatch`` only notes the arrival time of each probe (no Python data source,
no hot storage). Four layers cannot beat four of those.

S3 (``--s3``, the default): the same flow again, in the same run, with the hot store on a SeaweedFS started
for the run (``storage.root: s3://…``, ``weed mini`` on loopback) and its metastore on a PostgreSQL started
for the run: the ADS hot delay with the hot storage on an object store vs on the local disk (every layer's
writes are puts + metastore commits, its reads metastore queries + gets; Spark's Python workers open the
same store). Probes poll ``ads.seen`` every 20 ms in both runs (a lookup on S3 costs about a millisecond of
the driver's CPU: polling every 5 ms would slow the driver's own Python work there).

    .venv/bin/python -m benchmarks.flow_latency [--probes 200] [--trigger 10ms] [--no-s3] [--s3-probes N]
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


POLL_S = 0.02  # how often a probe looks up ads.seen (a lookup costs ~1 ms of driver CPU on S3: keep it light)


def layer_delays(store, tables: list[str]) -> dict[str, list[float]]:
    """Per table, the hot delay of each committed batch: its commit time minus the origin time of its input
    (the source record's landing), as ``flow status`` shows it for the last batch."""
    out: dict[str, list[float]] = {}
    for table in tables:
        delays = []
        for bucket, end in enumerate(store.end_offsets(table)):
            offset = 0
            while offset < end:
                info = store.offset_times(table, bucket, offset)
                if info is None:
                    break
                if info.origin_ts is not None:
                    delays.append(info.commit_ts - info.origin_ts)
                offset = info.base_offset + max(info.rows, 1)
        out[table] = delays
    return out


def flow_probes(
    spark, root: Path, probes: int, trigger: str, settings: dict | None = None
) -> tuple[list[float], dict, dict]:
    """Run the flow (``settings``: the project file's, e.g. an object-store hot storage) and probe it:
    (latencies, strategy per table, per-table batch hot delays)."""
    import pyarrow as pa

    from materializer.runner import FlowRunner
    from runtime.project import Project

    project_dir = root / "project"
    (project_dir / "actions").mkdir(parents=True)
    if settings:
        (project_dir / "tidehouse.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
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
            time.sleep(POLL_S)
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
    try:
        delays = layer_delays(store, [t.name for t in plan.tables])
    finally:
        project.close()
    return latencies, {t.name: t.strategy for t in plan.tables}, delays


def s3_flow_probes(spark, root: Path, probes: int, trigger: str) -> tuple[list[float], dict, dict]:
    """The flow with its hot storage on a SeaweedFS + PostgreSQL started for the run (checkpoints, lake and
    registry stay local, as in the first run)."""
    from tests.services import Postgres, SeaweedFS

    # `mini`'s own 1 GiB volumes, as when this section was measured (the tests' 64 MB ones stall the writes
    # that meet a new volume's allocation: benchmarks/storage.py)
    with SeaweedFS.running(root / "weed", volume_mb=1024) as weed, Postgres.running() as pg:
        settings = {
            "storage": {
                "root": weed.root("latency"),
                "metastore": pg.create_database("latency"),
                "s3": weed.s3_options(),
            }
        }
        return flow_probes(spark, root / "s3", probes, trigger, settings)


def main() -> None:
    import argparse
    import os

    from benchmarks._report import argument_parser, markdown_table, write_section
    from runtime.core.durations import parse_duration
    from runtime.spark.session import get_spark

    parser = argument_parser("benchmarks.flow_latency", __doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--trigger", default="10ms")
    parser.add_argument("--baseline-probes", type=int, default=None, help="default: --probes")
    parser.add_argument(
        "--s3",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the flow with its hot storage on SeaweedFS + PostgreSQL (default: on)",
    )
    parser.add_argument("--s3-probes", type=int, default=None, help="default: --probes")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    spark = get_spark("local[2]")
    trigger_ms = f"{int(parse_duration(args.trigger) * 1000)} milliseconds"
    s3 = s3_delays = None
    with tempfile.TemporaryDirectory(prefix="th-latency-") as tmp:
        root = Path(tmp)
        flow, strategies, delays = flow_probes(spark, root / "local", args.probes, args.trigger)
        print(f"flow: p50 {median(flow):.3f}s over {len(flow)} probes", flush=True)
        if args.s3:
            s3, _, s3_delays = s3_flow_probes(spark, root, args.s3_probes or args.probes, args.trigger)
            print(f"flow, hot storage on S3: p50 {median(s3):.3f}s over {len(s3)} probes", flush=True)
        base = baseline(spark, root, args.baseline_probes or args.probes, trigger_ms)
    load_after = os.getloadavg()[0]
    rows = []
    for label, values in (
        ("4-layer flow: source file -> ads.seen visible (hot storage on local disk)", flow),
        *(
            [("4-layer flow, hot storage on S3 (SeaweedFS + PostgreSQL metastore)", s3)]
            if s3 is not None
            else []
        ),
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
    if s3 is not None:
        body += (
            "\n\nHot storage on S3: the same flow, one after the other in the same run and Spark "
            "session, with `storage.root: s3://…` on a SeaweedFS (`weed mini`, loopback) and "
            "`storage.metastore` on a PostgreSQL, both started by the run (checkpoints, lake and registry "
            "local in both runs). ADS hot delay"
            f" p50 {median(s3):.3f} s vs {median(flow):.3f} s on local disk = "
            f"**{median(s3) / median(flow):.2f}x**, p99 {percentile(s3, 99):.3f} s vs "
            f"{percentile(flow, 99):.3f} s = {percentile(s3, 99) / percentile(flow, 99):.2f}x. "
            f"S3 targets p50 <= 2 s, p99 <= 5 s: p50 {'met' if median(s3) <= 2 else 'MISSED'}, "
            f"p99 {'met' if percentile(s3, 99) <= 5 else 'MISSED'}. Load average (1 min) on this machine: "
            f"{load_before:.1f} at the start, {load_after:.1f} at the end.\n\n"
            "Per layer, the hot delay of each committed batch (its commit time minus its input's origin "
            "time, what `flow status` shows; cumulative from the source, so a layer's own share is the "
            "step from the row above), p50 in seconds:\n\n"
            + markdown_table(
                ["table", "local disk p50 s", "S3 p50 s", "S3 - local s"],
                [
                    [
                        t,
                        median(delays[t]),
                        median(s3_delays[t]),
                        median(s3_delays[t]) - median(delays[t]),
                    ]
                    for t in delays
                    if delays[t] and s3_delays.get(t)
                ],
            )
        )
    write_section(
        "flow_latency",
        "End-to-end hot latency of a 4-layer flow",
        f".venv/bin/python -m benchmarks.flow_latency --probes {args.probes} --trigger {args.trigger}"
        + (f" --baseline-probes {args.baseline_probes}" if args.baseline_probes else "")
        + ("" if args.s3 else " --no-s3")
        + (f" --s3-probes {args.s3_probes}" if args.s3 and args.s3_probes else ""),
        body,
    )


if __name__ == "__main__":
    main()
