"""Reading a table's history: its lake snapshot plus the hot tail, next to a plain pyiceberg scan.

A log table of ``--rows`` rows (default 5,000,000) in 4 buckets is written to the hot store, tiered into
Iceberg in cycles of ``--cycle-rows`` rows and trimmed by retention, so all but the active segment of each
bucket lives only in the lake; then ``--tail-rows`` more rows arrive that were never tiered. Measured, in
one run:

* **bootstrap** — ``TableHistory.rows``: every row of the table (the lake below each bucket's first hot
  offset, then the hot log), rows per second, next to ``table.scan(snapshot_id=S).to_arrow()`` of the same
  snapshot with the same columns (pyiceberg alone, the baseline; it reads no hot tail);
* **Spark stream from earliest** — ``spark.readStream.format("tidehouse")`` with ``startingOffsets=earliest``
  (tasks read offset ranges: the lake part with an Iceberg range filter, then the hot log): seconds until it
  has read every row up to the hot tail, and rows per second; next to ``spark.read`` of the same table
  (batch: the same partitions, read once).

Run: ``.venv/bin/python -m benchmarks.union_read [--rows N] [--cycle-rows N] [--tail-rows N] [--no-spark]``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from benchmarks._report import argument_parser, markdown_table, write_section

TABLE = "ods.big"
BUCKETS = 4
BATCH = 100_000


def _rows(rng: np.random.Generator, start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "user_id": pa.array([f"u{u}" for u in rng.integers(0, 50_000, n)]),
            "price": rng.random(n) * 100,
            "qty": rng.integers(0, 10, n, dtype=np.int32),
            "ts": pa.array(ids * 1000).cast(pa.timestamp("us", tz="UTC")),
        }
    )


def build(project, rows: int, cycle_rows: int, tail_rows: int) -> dict:
    """The table: ``rows`` rows tiered and trimmed, then ``tail_rows`` hot only. Returns what was built."""
    from runtime.lake.tiering import tier_table
    from runtime.storage import TableMeta

    store, lake = project.store, project.lake
    rng = np.random.default_rng(7)
    store.create_table(TableMeta(TABLE, _rows(rng, 0, 1).schema, buckets=BUCKETS, bucket_key=("user_id",)))
    started = time.perf_counter()
    written, seq = 0, 0
    while written < rows:
        n = min(BATCH, rows - written)
        store.write(TABLE, _rows(rng, written, n), writer="bench", seq=seq)
        written, seq = written + n, seq + 1
        if written % cycle_rows == 0 or written == rows:
            tier_table(store, lake, TABLE, maintain=False)
    write_s = time.perf_counter() - started
    time.sleep(1.2)  # older than storage.retention (1 s): the next cycle's maintenance may trim them
    store.write(TABLE, _rows(rng, written, 1), writer="bench", seq=seq)
    tier_table(store, lake, TABLE)  # commits the one row and trims every tiered segment but the active ones
    for i in range(0, tail_rows, BATCH):
        n = min(BATCH, tail_rows - i)
        store.write(TABLE, _rows(rng, written + 1 + i, n), writer="bench", seq=seq + 1 + i // BATCH)
    from runtime.lake.state import lake_offsets

    firsts, ends = store.start_offsets(TABLE), store.end_offsets(TABLE)
    return {
        "rows": sum(ends),
        "tiered_rows": sum(lake_offsets(lake.load(TABLE), BUCKETS)[0]),
        "hot_rows": sum(e - f for f, e in zip(firsts, ends)),
        "lake_only_rows": sum(firsts),
        "build_s": write_s,
    }


def measure_bootstrap(project, repeat: int) -> dict:
    from runtime.lake.history import TableHistory

    history = TableHistory(project.store, project.lake)
    meta = project.store.get_table(TABLE)
    columns = list(meta.schema.names)
    view = history.view(TABLE, meta.buckets)
    best_union = best_plain = float("inf")
    n_union = n_plain = 0
    for _ in range(repeat):  # alternate, best of each (the machine is shared)
        t = time.perf_counter()
        plain = view.table.scan(snapshot_id=view.snapshot_id, selected_fields=tuple(columns)).to_arrow()
        best_plain, n_plain = min(best_plain, time.perf_counter() - t), plain.num_rows
        del plain
        t = time.perf_counter()
        union = history.rows(TABLE, columns=columns)
        best_union, n_union = min(best_union, time.perf_counter() - t), union.num_rows
        del union
    return {
        "plain_rows": n_plain,
        "plain_s": best_plain,
        "union_rows": n_union,
        "union_s": best_union,
    }


def measure_spark(project, checkpoint: Path, expected_rows: int) -> dict:
    """The stream from earliest first (Spark's Python workers start cold for it), then batch reads, the first
    cold-free one timed twice (the best counts)."""
    spark = project.spark()
    seen = [0]

    def count(df, _batch_id) -> None:
        seen[0] += df.count()

    t = time.perf_counter()
    stream = spark.readStream.format("tidehouse").option("startingOffsets", "earliest").load(TABLE)
    query = stream.writeStream.option("checkpointLocation", str(checkpoint)).foreachBatch(count).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    stream_s = time.perf_counter() - t
    batch_s, batch_rows = float("inf"), 0
    for _ in range(2):
        t = time.perf_counter()
        batch_rows = spark.read.format("tidehouse").option("systemColumns", "false").load(TABLE).count()
        batch_s = min(batch_s, time.perf_counter() - t)
    return {
        "batch_rows": batch_rows,
        "batch_s": batch_s,
        "stream_rows": seen[0],
        "stream_s": stream_s,
        "expected": expected_rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser("benchmarks.union_read", __doc__)
    parser.add_argument("--rows", type=int, default=5_000_000, help="rows tiered and trimmed (lake only)")
    parser.add_argument("--cycle-rows", type=int, default=1_000_000, help="rows per tiering cycle")
    parser.add_argument("--tail-rows", type=int, default=200_000, help="rows written after (hot only)")
    parser.add_argument("--repeat", type=int, default=3, help="alternating reads; the best of each counts")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark stream and batch reads")
    parser.add_argument("--no-write", action="store_true", help="print the figures, do not update the doc")
    args = parser.parse_args(argv)
    if args.rows % BATCH or args.cycle_rows % BATCH:
        parser.error(f"--rows and --cycle-rows are multiples of {BATCH}")
    from runtime.project import Project

    with tempfile.TemporaryDirectory(prefix="th-union-") as tmp:
        root = Path(tmp)
        (root / "tidehouse.yaml").write_text(
            "storage:\n  retention: 1s\n  fsync: false\n  segment_bytes: 1048576\n"
            "tiering:\n  compact_min_files: 1000\n"
        )
        project = Project.open(project_dir=root, home=root / "home")
        try:
            built = build(project, args.rows, args.cycle_rows, args.tail_rows)
            boot = measure_bootstrap(project, args.repeat)
            spark = None if args.no_spark else measure_spark(project, root / "ck", built["rows"])
        finally:
            project.close()
    assert boot["union_rows"] == built["rows"], (boot, built)  # every row, exactly once
    assert boot["plain_rows"] == built["tiered_rows"], (boot, built)  # the snapshot: all but the tail
    union_rps = boot["union_rows"] / boot["union_s"]
    plain_rps = boot["plain_rows"] / boot["plain_s"]
    rows = [
        [
            "Tidehouse bootstrap: lake below the hot log + hot tail (TableHistory.rows)",
            boot["union_rows"],
            round(boot["union_s"], 3),
            round(union_rps),
            round(union_rps / plain_rps, 2),
        ],
        [
            "pyiceberg scan of the same snapshot (baseline, no hot tail)",
            boot["plain_rows"],
            round(boot["plain_s"], 3),
            round(plain_rps),
            1.0,
        ],
    ]
    if spark is not None:
        assert spark["stream_rows"] == spark["batch_rows"] == built["rows"], (spark, built)
        rows += [
            [
                "Spark stream from earliest, until it reaches the hot tail",
                spark["stream_rows"],
                round(spark["stream_s"], 3),
                round(spark["stream_rows"] / spark["stream_s"]),
                round(spark["stream_rows"] / spark["stream_s"] / plain_rps, 2),
            ],
            [
                "Spark batch read of the same table (spark.read)",
                spark["batch_rows"],
                round(spark["batch_s"], 3),
                round(spark["batch_rows"] / spark["batch_s"]),
                round(spark["batch_rows"] / spark["batch_s"] / plain_rps, 2),
            ],
        ]
    ratio = union_rps / plain_rps
    body = (
        f"A log table of {built['rows']:,} rows in {BUCKETS} buckets: {built['lake_only_rows']:,} of them "
        f"only in the lake (tiered in cycles of {args.cycle_rows:,} rows, then trimmed by retention), "
        f"{built['hot_rows']:,} still hot ({args.tail_rows:,} never tiered). Bootstrap and scan: best of "
        f"{args.repeat} alternating reads of the same columns. Spark (2 shuffle partitions, `local[*]`): the "
        "stream from `earliest` runs first, with its Python workers starting cold; the batch read is the "
        "best of two after it.\n\n"
        + markdown_table(["read", "rows", "seconds", "rows/s", "ratio to the pyiceberg scan"], rows)
        + f"\n\nTarget: bootstrap ≥ 0.8× the plain scan — {'met' if ratio >= 0.8 else 'NOT met'} "
        f"({ratio:.2f}×)."
    )
    if args.no_write:
        print(body)
    else:
        write_section(
            "union_read",
            "Union read: bootstrap from the lake plus the hot tail",
            ".venv/bin/python -m benchmarks.union_read",
            body,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
