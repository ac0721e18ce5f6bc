"""A copy query in its own process (with its own SparkSession), for the kill -9 tests.

    python -m tests.spark._copy_process ROOT SRC DST CHECKPOINT [--hold-after-writes K --marker PATH]

Runs ``SRC -> DST`` with ``Trigger.AvailableNow`` and prints one JSON line per micro-batch write. With
``--hold-after-writes K`` it makes K writes, then writes the next batch to the store, puts its batch id in
``PATH`` and sleeps: the batch is in the store but Spark has not committed it, which is where the test kills
the process with SIGKILL.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    for name in ("root", "src", "dst", "checkpoint"):
        parser.add_argument(name)
    parser.add_argument("--hold-after-writes", type=int, default=None)
    parser.add_argument("--marker", default=None)
    parser.add_argument("--max-rows", type=int, default=200)
    args = parser.parse_args(argv)

    from runtime.spark.session import get_spark
    from runtime.spark.writer import foreach_batch_writer

    spark = get_spark("local[1]")
    inner = foreach_batch_writer(
        args.root,
        args.dst,
        f"copy@{args.checkpoint}",
        checkpoint=args.checkpoint,
        on_write=lambda b, r: print(
            json.dumps({"batch": b, "rows": r.rows, "skipped": r.skipped}), flush=True
        ),
    )

    writes = []

    def write(df, batch_id: int) -> None:
        inner(df, batch_id)
        writes.append(batch_id)
        if args.hold_after_writes is not None and len(writes) == args.hold_after_writes + 1:
            Path(args.marker).write_text(str(batch_id))
            time.sleep(3600)  # the parent kills us here: written to the store, not committed by Spark

    stream = (
        spark.readStream.format("tidehouse")
        .option("root", args.root)
        .option("table", args.src)
        .option("maxRowsPerTrigger", str(args.max_rows))
        .load()
    )
    query = (
        stream.writeStream.foreachBatch(write)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print(json.dumps({"done": True}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
