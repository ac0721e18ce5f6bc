"""Per-batch seconds of the vs_sdp flow's ADS top-N (top 100 of 20,000 users by spend) kept by ``topn`` vs
``recompute``, in one process and one Spark session.

Each mode gets its own project (the vs_sdp flow from ``benchmarks/vs_sdp_flow``, the shipped actions): a
backlog that gives every one of the users a row in dws.user_spend, then ``--rounds`` increments of
``--rows`` events, each run ``--until-idle``; the ADS table's micro-batches of the increments are timed
(``flow status`` figures: batch seconds, phase seconds). ``recompute`` is forced by hiding the top-N facts
from the planner, as on a release before the incremental strategies.

    python -m benchmarks.incremental_topn [--users 20000] [--rounds 5] [--rows 500]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TABLE = "ads.top_spenders"


def _events(rng: random.Random, n: int, users: int, start: int = 0) -> str:
    lines = []
    for i in range(n):
        user = (start + i) % users if start >= 0 else rng.randrange(users)
        lines.append(
            json.dumps(
                {
                    "user_id": f"u{user}",
                    "event_type": rng.choice(["click", "view", "add_to_cart", "purchase"]),
                    "item_id": f"i{rng.randrange(500)}",
                    "price": round(rng.uniform(1, 100), 2),
                    "ts": "2024-01-01T00:00:00Z",
                }
            )
        )
    return "\n".join(lines) + "\n"


def _run(mode: str, args, spark, work: Path) -> dict:
    import materializer.plantext as plantext
    from runtime.project import Project

    root = work / mode
    shutil.copytree(REPO / "benchmarks" / "vs_sdp_flow", root)
    shutil.copytree(REPO / "actions", root / "actions")
    data = root / "data" / "events"
    data.mkdir(parents=True)
    os.chdir(root)
    os.environ["TIDEHOUSE_HOME"] = str(root / ".tidehouse")
    real = plantext.topn_facts
    if mode == "recompute":
        plantext.topn_facts = lambda root: None
    rng = random.Random(args.seed)
    try:
        (data / "part-0.json").write_text(_events(rng, args.users, args.users))
        project = Project.open()
        report = project.trigger(root / "flows" / "vs_sdp.yaml", until_idle=True, spark=spark)
        strategy = project.plan("vs_sdp", spark=spark).table(TABLE).strategy
        seconds, phases = [], []
        for r in range(args.rounds):
            (data / f"part-{r + 1}.json").write_text(_events(rng, args.rows, args.users, start=-1))
            report = project.trigger("vs_sdp", until_idle=True, spark=spark)
            stats = report.tables[TABLE]
            seconds.append(stats["last_batch_seconds"])
            phases.append({k: round(v, 3) for k, v in stats["phase_seconds"].items()})
        project.close()
    finally:
        plantext.topn_facts = real
    return {"strategy": strategy, "batch_seconds": seconds, "phases": phases}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=500, help="events per increment (one ADS batch)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    from runtime.spark.session import get_spark

    spark = get_spark()
    work = Path(tempfile.mkdtemp(prefix="tidehouse-topn-bench-"))
    try:
        results = {mode: _run(mode, args, spark, work) for mode in ("recompute", "topn")}
    finally:
        os.chdir(REPO)
        shutil.rmtree(work, ignore_errors=True)
    for mode, res in results.items():
        s = res["batch_seconds"]
        print(
            f"{mode:10s} strategy={res['strategy']:10s} ADS batch seconds: median {statistics.median(s):.3f} "
            f"min {min(s):.3f} max {max(s):.3f}  all {[round(x, 3) for x in s]}"
        )
        print(f"           phases of the last run: {res['phases'][-1]}")


if __name__ == "__main__":
    main()
