"""Per-batch seconds of the shipped order_attribution flow's join (dws.attributed_orders: dwd.orders LEFT JOIN
dws.first_touch, both primary-key tables) kept by ``join_changelog`` vs ``recompute``, in one process and
one Spark session.

Each mode gets its own project (the shipped flow and actions): a backlog of ``--orders`` orders of
``--customers`` customers, most of them with a touch, then ``--rounds`` increments of ``--rows`` new orders
and ``--touches`` touches earlier than the known ones (they re-attribute the customer's orders already
written), each run ``--until-idle``; the join table's last micro-batch of each
increment is timed (``flow status`` figures: batch seconds, phase seconds). ``recompute`` is forced by hiding
the join facts from the planner, as on a release before join_changelog.

``--modes join_log,join_log_whole`` joins the ODS orders *log* instead (``join_log``): ``join_log`` as
planned, ``join_log_whole`` with the partitions that only gained log rows evaluated whole, as before the
delta of inner/left joins (docs/architecture.md, "Costs"); few customers (``--customers 20``) make big
partitions, which is where the delta matters.

``--modes join_log_exec_driver,join_log_exec`` runs that ``join_log`` on the executor path
(``materializer.data_path: executors``): ``join_log_exec`` as planned, the orders of customers the increment
did not touch joined and written by Spark tasks (docs/architecture.md, "`join_log` in the executors");
``join_log_exec_driver`` with the join's batch function where ``foreachBatch`` runs, as before (every new
order through this process). Each round also reports this process's CPU seconds (``time.process_time``:
the driver's Python, not its JVM or Spark's Python workers), what the tasks take off it.

    python -m benchmarks.incremental_join [--orders 20000] [--customers 2000] [--rounds 5]
        [--modes recompute,join_changelog]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TABLE = "dws.attributed_orders"
CHANNELS = ["ads", "email", "search", "social"]


def _orders(rng: random.Random, ids: range, customers: int) -> str:
    return "".join(
        json.dumps(
            {
                "order_id": f"o{i}",
                "customer_id": f"c{rng.randrange(customers)}",
                "amount": round(rng.uniform(1, 100), 2),
                "ts": f"2024-05-01T12:{rng.randrange(60):02d}:00Z",
            }
        )
        + "\n"
        for i in ids
    )


def _touches(rng: random.Random, customers, hour: int) -> str:
    return "".join(
        json.dumps(
            {
                "customer_id": f"c{c}",
                "channel": rng.choice(CHANNELS),
                "campaign": f"k{rng.randrange(10)}",
                "ts": f"2024-05-01T{hour:02d}:{rng.randrange(60):02d}:00Z",
            }
        )
        + "\n"
        for c in customers
    )


def _run(mode: str, args, spark, work: Path) -> dict:
    import materializer.incremental.join as join
    import materializer.incremental.joinlog as joinlog
    import materializer.plantext as plantext
    import materializer.runner as runner
    from runtime.project import Project

    root = work / mode
    root.mkdir(parents=True)
    shutil.copytree(REPO / "actions", root / "actions")
    (root / "flows").mkdir()
    flow = (REPO / "flows" / "order_attribution.yaml").read_text(encoding="utf-8")
    if mode.startswith("join_log"):  # the orders log itself, joined: join_log
        flow = flow.replace("inputs: {orders: dwd.orders,", "inputs: {orders: ods.orders,")
        assert "orders: ods.orders" in flow
    (root / "flows" / "order_attribution.yaml").write_text(flow, encoding="utf-8")
    if mode.startswith("join_log_exec"):
        (root / "tidehouse.yaml").write_text("materializer:\n  data_path: executors\n", encoding="utf-8")
    for d in ("orders", "touches"):
        (root / "data" / d).mkdir(parents=True)
    os.chdir(root)
    os.environ["TIDEHOUSE_HOME"] = str(root / ".tidehouse")
    real, real_delta = plantext.join_facts, join.Partitioner._delta
    real_tasks = joinlog.in_tasks
    if mode == "recompute":
        plantext.join_facts = lambda root: (None, "")
    if mode == "join_log_whole":
        join.Partitioner._delta = lambda self, by: frozenset()
    if mode == "join_log_exec_driver":  # the stream and the batch function as before tasks joined the log
        joinlog.in_tasks = runner.log_join_in_tasks = lambda table: False
    rng = random.Random(args.seed)
    try:
        (root / "data" / "orders" / "part-0.json").write_text(
            _orders(rng, range(args.orders), args.customers)
        )
        touched = rng.sample(range(args.customers), int(args.customers * 0.8))
        (root / "data" / "touches" / "part-0.json").write_text(_touches(rng, touched, 10))
        project = Project.open()
        project.trigger(root / "flows" / "order_attribution.yaml", until_idle=True, spark=spark)
        strategy = project.plan("order_attribution", spark=spark).table(TABLE).strategy
        seconds, phases, rows, cpu, wall = [], [], [], [], []
        next_id = args.orders
        for r in range(args.rounds):
            new = range(next_id, next_id + args.rows)
            next_id += args.rows
            (root / "data" / "orders" / f"part-{r + 1}.json").write_text(_orders(rng, new, args.customers))
            # earlier touches (hour 9 < 10): these customers' written orders are re-attributed
            again = rng.sample(range(args.customers), args.touches)
            (root / "data" / "touches" / f"part-{r + 1}.json").write_text(_touches(rng, again, 9 - r % 9))
            began, ticked = time.process_time(), time.perf_counter()
            report = project.trigger("order_attribution", until_idle=True, spark=spark)
            cpu.append(time.process_time() - began)
            wall.append(time.perf_counter() - ticked)
            stats = report.tables[TABLE]
            seconds.append(stats["last_batch_seconds"])
            phases.append({k: round(v, 3) for k, v in stats["phase_seconds"].items()})
            rows.append((stats["rows_in"], stats["rows_out"], stats["batches"]))
        writer = project.plan("order_attribution", spark=spark).table(TABLE).writer_id + joinlog.DELTA
        tasks = project.store.last_seq(TABLE, writer) is not None  # the tasks wrote join rows
        project.close()
    finally:
        plantext.join_facts, join.Partitioner._delta = real, real_delta
        joinlog.in_tasks = runner.log_join_in_tasks = real_tasks
    return {
        "strategy": strategy,
        "batch_seconds": seconds,
        "phases": phases,
        "rows": rows,
        "cpu": cpu,
        "wall": wall,
        "tasks": tasks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--customers", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=500, help="new orders per increment")
    parser.add_argument("--touches", type=int, default=20, help="re-attributing touches per increment")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--modes",
        default="recompute,join_changelog",
        help="recompute, join_changelog, join_log, join_log_whole, join_log_exec, join_log_exec_driver "
        "(comma-separated)",
    )
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    from runtime.spark.session import get_spark

    spark = get_spark()
    work = Path(tempfile.mkdtemp(prefix="tidehouse-join-bench-"))
    try:
        results = {mode: _run(mode, args, spark, work) for mode in args.modes.split(",")}
    finally:
        os.chdir(REPO)
        shutil.rmtree(work, ignore_errors=True)
    for mode, res in results.items():
        s = res["batch_seconds"]
        print(
            f"{mode:15s} strategy={res['strategy']:15s} join batch seconds: "
            f"median {statistics.median(s):.3f} "
            f"min {min(s):.3f} max {max(s):.3f}  all {[round(x, 3) for x in s]}"
        )
        print(f"                phase seconds of the last round (its batches summed): {res['phases'][-1]}")
        print(f"                (rows in, rows out, batches) per round, cumulative: {res['rows']}")
        for key, what in (("wall", "wall seconds of the round's run"), ("cpu", "this process's CPU seconds")):
            v = res[key]
            print(f"{'':16s}{what}: median {statistics.median(v):.3f}  all {[round(x, 3) for x in v]}")
    first, *others = results
    for mode in others:
        base, this = (
            statistics.median(results[first]["batch_seconds"]),
            statistics.median(results[mode]["batch_seconds"]),
        )
        print(f"median join batch seconds {first} / {mode}: {base / this:.2f}x")
        for key, what in (("wall", "wall seconds per round"), ("cpu", "CPU s of this process per round")):
            base, this = statistics.median(results[first][key]), statistics.median(results[mode][key])
            print(f"median {what} {first} / {mode}: {base / this:.2f}x")


if __name__ == "__main__":
    main()
