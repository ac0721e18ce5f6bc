"""Cost growth of an ADS top-N with the size of its DWS table (issue 20): the vs_sdp flow (shop events ->
clean events -> spend per user -> the 100 biggest spenders) with dws.user_spend at 10k, 100k and 1M keys;
ADS batch seconds and ADS hot delay at each size, the ADS table kept by ``topn`` and by ``recompute``.

For each key count K, one project (the flow from ``benchmarks/vs_sdp_flow``, the shipped actions, trigger
100 ms, no tiering): a preload of one event per user, run ``--until-idle``, gives dws.user_spend its K keys
and the top-N its state. Then the flow runs continuously in this process and takes ``--rounds``
increments of ``--rows`` events on random users, one at a time (``--warmup`` first, not counted): for each,
the ADS table's batch seconds (``flow status``: ``last_batch_seconds``) and hot delay (the end of the ADS
batch minus the increment's origin, its commit in ODS: the ``hot_delay_s`` of ``flow status``). Then the
same project again with ``recompute``: the top-N's SQL with a second condition that changes nothing
(``AND row_count >= 1``, a shape the incremental strategies do not keep), ``--full-refresh`` of the ADS
table only, and the same increments. Growth = the figure at the largest K / at the smallest (target
<= 1.5x from 10k to 1M keys).

    python -m benchmarks.cost_growth [--keys 10000,100000,1000000] [--rounds 10] [--warmup 3] [--rows 500]
                                     [--quick]
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.stats import median

REPO = Path(__file__).resolve().parents[1]
TABLE = "ads.top_spenders"
MODES = ("topn", "recompute")
TARGET = 1.5  # growth of the ADS figures from the smallest to the largest key count
FULL_KEYS = (10_000, 100_000, 1_000_000)
QUICK_KEYS = (1_000, 10_000, 50_000)
RECOMPUTE_FILTER = ("WHERE rank <= :n", "WHERE rank <= :n AND row_count >= 1")


# -- the figures and the report (pure: tests/benchmarks/test_cost_growth_report.py) -------------------
def figures(results: dict[int, dict[str, dict]]) -> dict:
    """``results[keys][mode]``: ``batch_seconds`` and ``hot_delays`` (one per increment), ``strategy``,
    ``preload_s``. Returns per key count and mode the medians and maxima, recompute / topn per key count,
    and per mode the growth (largest key count / smallest) with the verdict against :data:`TARGET`."""
    keys = sorted(results)
    rows = {}
    for k in keys:
        row = {}
        for mode in MODES:
            r = results[k][mode]
            row[mode] = {
                "strategy": r["strategy"],
                "batch_p50": median(r["batch_seconds"]),
                "batch_max": max(r["batch_seconds"]),
                "delay_p50": median(r["hot_delays"]),
                "delay_max": max(r["hot_delays"]),
            }
        row["batch_ratio"] = row["recompute"]["batch_p50"] / row["topn"]["batch_p50"]
        row["delay_ratio"] = row["recompute"]["delay_p50"] / row["topn"]["delay_p50"]
        row["preload_s"] = results[k]["topn"]["preload_s"]
        rows[k] = row
    small, large = keys[0], keys[-1]
    growth = {}
    for mode in MODES:
        batch = rows[large][mode]["batch_p50"] / rows[small][mode]["batch_p50"]
        delay = rows[large][mode]["delay_p50"] / rows[small][mode]["delay_p50"]
        growth[mode] = {"batch": batch, "delay": delay, "met": batch <= TARGET and delay <= TARGET}
    return {"keys": keys, "rows": rows, "growth": growth}


def keys_label(k: int) -> str:
    if k >= 1_000_000 and k % 1_000_000 == 0:
        return f"{k // 1_000_000}M"
    if k >= 1_000 and k % 1_000 == 0:
        return f"{k // 1_000}k"
    return str(k)


def report_body(results: dict[int, dict[str, dict]], meta: dict) -> str:
    """The docs/benchmarks.md section's body: one table row per key count, then the growth lines."""
    from benchmarks._report import markdown_table

    f = figures(results)
    table = []
    for k in f["keys"]:
        row = f["rows"][k]
        t, r = row["topn"], row["recompute"]
        table.append(
            [
                f"{k:,}",
                f"{row['preload_s']:.1f}",
                f"{t['batch_p50']:.3f} / {t['batch_max']:.3f}",
                f"{t['delay_p50']:.3f} / {t['delay_max']:.3f}",
                f"{r['batch_p50']:.3f} / {r['batch_max']:.3f}",
                f"{r['delay_p50']:.3f} / {r['delay_max']:.3f}",
                f"{row['batch_ratio']:.1f}x",
                f"{row['delay_ratio']:.1f}x",
            ]
        )
    headers = [
        "DWS keys",
        "preload s",
        "topn batch s p50 / max",
        "topn hot delay s p50 / max",
        "recompute batch s p50 / max",
        "recompute hot delay s p50 / max",
        "batch recompute/topn",
        "delay recompute/topn",
    ]
    span = f"{keys_label(f['keys'][0])} to {keys_label(f['keys'][-1])} keys"
    lines = [markdown_table(headers, table), ""]
    for mode in MODES:
        g = f["growth"][mode]
        lines.append(
            f"Growth {span}, {mode}: ADS batch seconds {g['batch']:.2f}x, ADS hot delay {g['delay']:.2f}x "
            f"(target <= {TARGET}x: {'met' if g['met'] else 'MISSED'})."
        )
    strategies = ", ".join(
        f"{mode} -> {'/'.join(sorted({results[k][mode]['strategy'] for k in f['keys']}))}" for mode in MODES
    )
    lines.append("")
    lines.append(
        f"{meta['rounds']} increments of {meta['rows']} events on random users per key count and strategy "
        f"(after {_warmups(meta.get('warmup', 1))}); planned strategies: {strategies}. Preload: the "
        "`--until-idle` run over one event per user (the first key count's includes starting Spark's "
        f"Python workers). Spark local[2], driver memory {meta['driver_memory']}. Load average "
        f"{meta['load_start']:.1f} before, {meta['load_end']:.1f} after; "
        f"{meta['wall_s'] / 60:.1f} min in all."
    )
    return "\n".join(lines)


def _warmups(n: int) -> str:
    return "no warm-up" if n == 0 else "one warm-up" if n == 1 else f"{n} warm-ups"


# -- the measurement (Spark) ----------------------------------------------------------------------------
def _events(rng: random.Random, users: Sequence[int]) -> str:
    kinds = ["click", "view", "add_to_cart", "purchase"]
    return "".join(
        json.dumps(
            {
                "user_id": f"u{u}",
                "event_type": rng.choice(kinds),
                "item_id": f"i{rng.randrange(500)}",
                "price": round(rng.uniform(1, 100), 2),
                "ts": "2024-01-01T00:00:00Z",
            }
        )
        + "\n"
        for u in users
    )


def _land(folder: Path, name: str, text: str) -> None:
    tmp = folder.parent / f".{name}.tmp"
    tmp.write_text(text)
    tmp.rename(folder / name)


def _project(work: Path, keys: int, rng: random.Random, file_rows: int = 200_000) -> Path:
    import yaml

    root = work / f"k{keys}"
    shutil.copytree(REPO / "benchmarks" / "vs_sdp_flow", root)
    shutil.copytree(REPO / "actions", root / "actions")
    flow_path = root / "flows" / "vs_sdp.yaml"
    flow = yaml.safe_load(flow_path.read_text(encoding="utf-8"))
    flow["trigger"] = "100ms"
    flow_path.write_text(yaml.safe_dump(flow, sort_keys=False), encoding="utf-8")
    data = root / "data" / "events"
    data.mkdir(parents=True)
    for i, start in enumerate(range(0, keys, file_rows)):
        _land(data, f"preload-{i}.json", _events(rng, range(start, min(keys, start + file_rows))))
    return root


def _wait(cond, timeout: float, what: str, runner) -> None:
    deadline = time.time() + timeout
    while not cond():
        errors = {n: s.error for n, s in runner.stats.items() if s.error}
        if errors:
            raise RuntimeError(f"{what}: {errors}")
        if time.time() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f}s")
        time.sleep(0.02)


def _increments(project, root: Path, spark, mode: str, args, full_refresh: Sequence[str]) -> dict:
    """Run the flow continuously; land ``args.warmup`` + ``args.rounds`` increments one at a time; the ADS
    figures of the last ``args.rounds``."""
    from materializer.runner import FlowRunner

    plan = project.plan(root / "flows" / "vs_sdp.yaml", register=True, spark=spark)
    runner = FlowRunner(project, plan, spark=spark)
    stop = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            runner.run(stop_event=stop, tiering=False, full_refresh=full_refresh)
        except BaseException as exc:  # noqa: BLE001 - reported by the waits
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ads = runner.stats[TABLE]
    data = root / "data" / "events"
    rng = random.Random(args.seed)  # the same increments for both strategies
    seconds, delays = [], []

    def quiet(seen: dict) -> bool:
        """Every table's batch count unchanged for half a second."""
        now = {n: s.batches for n, s in runner.stats.items()}
        if now != seen.get("batches"):
            seen.update(batches=now, since=time.time())
            return False
        return time.time() - seen["since"] >= 0.5

    try:
        if full_refresh:  # the rebuilt ADS table's first batch
            _wait(lambda: failed or ads.batches >= 1, 1800, f"{mode}: the rebuild of {TABLE}", runner)
        for r in range(args.warmup + args.rounds):
            n = ads.batches
            _land(
                data,
                f"inc-{mode}-{r}.json",
                _events(rng, [rng.randrange(args.keys) for _ in range(args.rows)]),
            )
            _wait(lambda n=n: failed or ads.batches > n, 600, f"{mode}: increment {r} in {TABLE}", runner)
            state: dict = {}
            _wait(lambda state=state: failed or quiet(state), 600, f"{mode}: increment {r} settling", runner)
            if failed:
                raise failed[0]
            with ads.lock:
                batch, delay = ads.last_batch_seconds, ads.last_batch_time - ads.last_origin_ts
            print(
                f"  {mode} {args.keys:,} keys, increment {r}{' (warm-up)' if r < args.warmup else ''}: "
                f"ADS batch {batch:.3f}s, hot delay {delay:.3f}s",
                flush=True,
            )
            if r >= args.warmup:
                seconds.append(batch)
                delays.append(delay)
    finally:
        stop.set()
        thread.join(timeout=300)
    if failed:
        raise failed[0]
    return {"strategy": plan.table(TABLE).strategy, "batch_seconds": seconds, "hot_delays": delays}


def measure(spark, work: Path, keys: int, args) -> dict[str, dict]:
    """Both strategies at one key count, in one project."""
    from runtime.project import Project

    root = _project(work, keys, random.Random(args.seed))
    os.chdir(root)
    project = Project.open(home=root / ".tidehouse", project_dir=root)
    try:
        began = time.time()
        project.trigger(root / "flows" / "vs_sdp.yaml", until_idle=True, spark=spark, tiering=False)
        preload_s = time.time() - began
        users = project.store.scan("dws.user_spend", columns=["user_id"]).num_rows
        if users != keys:
            raise RuntimeError(f"dws.user_spend holds {users} keys after the preload, not {keys}")
        print(f"{keys:,} keys: preload in {preload_s:.1f}s", flush=True)
        args.keys = keys
        out = {"topn": _increments(project, root, spark, "topn", args, ())}
        sql = root / "actions" / "top_n.sql"
        sql.write_text(sql.read_text(encoding="utf-8").replace(*RECOMPUTE_FILTER), encoding="utf-8")
        out["recompute"] = _increments(project, root, spark, "recompute", args, (TABLE,))
    finally:
        project.close()
        os.chdir(REPO)
    for mode in MODES:
        out[mode]["preload_s"] = preload_s
    return out


def main() -> None:
    from benchmarks._report import argument_parser, write_section
    from runtime.spark.session import get_spark

    parser = argument_parser("benchmarks.cost_growth", __doc__.splitlines()[0])
    parser.add_argument("--keys", default=",".join(str(k) for k in FULL_KEYS), help="DWS key counts")
    parser.add_argument("--quick", action="store_true", help=f"keys {QUICK_KEYS}, 4 rounds; no doc section")
    parser.add_argument("--rounds", type=int, default=10, help="increments measured per key count and mode")
    parser.add_argument(
        "--warmup", type=int, default=3, help="increments run first and not counted (Spark's first batches)"
    )
    parser.add_argument("--rows", type=int, default=500, help="events per increment")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--save", type=Path, help="also write the measurements to this JSON file")
    parser.add_argument(
        "--driver-memory",
        default="3g",
        help="spark.driver.memory (recompute of a 1M-row top-N runs out of Spark's default 1g heap)",
    )
    args = parser.parse_args()
    keys = QUICK_KEYS if args.quick else tuple(int(k) for k in args.keys.split(","))
    if args.quick:
        args.rounds = min(args.rounds, 4)
    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    load_start, began = os.getloadavg()[0], time.time()
    spark = get_spark("local[2]", conf={"spark.driver.memory": args.driver_memory})
    work = Path(tempfile.mkdtemp(prefix="th-cost-growth-"))
    results = {}
    try:
        for k in keys:
            results[k] = measure(spark, work, k, args)
            if args.save:  # what was measured survives a later failure
                args.save.write_text(json.dumps({"results": results}, indent=1), encoding="utf-8")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    meta = {
        "rounds": args.rounds,
        "warmup": args.warmup,
        "rows": args.rows,
        "driver_memory": args.driver_memory,
        "load_start": load_start,
        "load_end": os.getloadavg()[0],
        "wall_s": time.time() - began,
    }
    body = report_body(results, meta)
    if args.save:
        args.save.write_text(json.dumps({"results": results, "meta": meta}, indent=1), encoding="utf-8")
    if args.quick:
        print(body)
        return
    write_section(
        "cost_growth",
        "Cost growth: an ADS top-N over 10k, 100k and 1M DWS keys, topn vs recompute",
        "python -m benchmarks.cost_growth",
        body,
    )


if __name__ == "__main__":
    main()
