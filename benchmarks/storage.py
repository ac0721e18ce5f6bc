"""Hot storage throughput next to raw pyarrow.ipc on the same disk.

Appends: the same record batches written (a) by ``LocalTableStore.write`` to a log table (fsync on) and (b)
as raw Arrow IPC streams, one file write + fsync per batch. Reads: all rows back (a) through
``LocalTableStore.read`` (with system columns) and (b) with ``pyarrow.ipc.open_stream`` over the raw files.
Primary-key upserts: rows/s of ``write`` to a ``last_row`` table (half new keys, half updates), fsync on.

Run: ``python benchmarks/storage.py [--rows-per-batch N] [--batches N]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import markdown_table, write_section  # noqa: E402
from runtime.storage import TableMeta, open_store  # noqa: E402


def make_batch(rng: np.random.Generator, n: int, start: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
        "user": pa.array([f"user-{i}" for i in rng.integers(0, 100_000, n)]),
        "price": pa.array(rng.random(n) * 100),
        "qty": pa.array(rng.integers(0, 10, n, dtype=np.int32)),
        "ts": pa.array(np.arange(start, start + n, dtype=np.int64) * 1000).cast(pa.timestamp("us", tz="UTC")),
    })


def raw_write(path: Path, batches: list[pa.RecordBatch]) -> float:
    path.mkdir(parents=True)
    t = time.perf_counter()
    for i, b in enumerate(batches):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, b.schema) as w:
            w.write_batch(b)
        fd = os.open(path / f"{i:08d}.arrow", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, sink.getvalue())
        os.fdatasync(fd)
        os.close(fd)
    return time.perf_counter() - t


def raw_read(path: Path) -> tuple[float, int]:
    t = time.perf_counter()
    rows = 0
    for f in sorted(path.iterdir()):
        with pa.OSFile(str(f)) as fh:
            rows += pa.ipc.open_stream(fh).read_all().num_rows
    return time.perf_counter() - t, rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows-per-batch", type=int, default=10_000)
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--pk-rows", type=int, default=200_000)
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    batches = [make_batch(rng, args.rows_per_batch, i * args.rows_per_batch) for i in range(args.batches)]
    total_rows = sum(b.num_rows for b in batches)
    mb = sum(b.nbytes for b in batches) / 1e6
    work = Path(tempfile.mkdtemp(prefix="th-bench-", dir=os.environ.get("TIDEHOUSE_BENCH_DIR")))

    raw_w = raw_write(work / "raw", batches)
    store = open_store(str(work / "hot"), fsync=True)
    store.create_table(TableMeta("ods.bench", batches[0].schema))
    t = time.perf_counter()
    for i, b in enumerate(batches):
        store.write("ods.bench", b, writer="bench", seq=i)
    log_w = time.perf_counter() - t

    raw_r, raw_rows = raw_read(work / "raw")
    reader = open_store(str(work / "hot"))  # a fresh process-like view (verifies CRCs on first read)
    t = time.perf_counter()
    got = sum(b.num_rows for b in reader.read("ods.bench", 0, 0))
    log_r = time.perf_counter() - t
    t = time.perf_counter()
    got_p = sum(b.num_rows for b in reader.read("ods.bench", 0, 0, columns=["price"]))
    log_rp = time.perf_counter() - t
    assert got == raw_rows == total_rows == got_p

    pk = open_store(str(work / "hot"), fsync=True)
    pk.create_table(TableMeta("dws.bench", batches[0].schema, kind="primary_key", primary_key=("id",), buckets=2))
    per = args.rows_per_batch
    n_pk = 0
    t = time.perf_counter()
    for i in range(args.pk_rows // per):
        b = make_batch(rng, per, (i // 2) * per)  # every key is written twice: insert, then update
        n_pk += pk.write("dws.bench", b, writer="bench", seq=i).rows and b.num_rows
    pk_w = time.perf_counter() - t
    t = time.perf_counter()
    scanned = pk.scan("dws.bench").num_rows
    pk_scan = time.perf_counter() - t

    rows = [
        ["log append (fsync)", total_rows / log_w, mb / log_w, total_rows / raw_w, mb / raw_w, raw_w / log_w],
        ["log read, all columns", total_rows / log_r, mb / log_r, total_rows / raw_r, mb / raw_r, raw_r / log_r],
        ["log read, 1 column", total_rows / log_rp, mb / log_rp, total_rows / raw_r, mb / raw_r, raw_r / log_rp],
        ["PK upsert, last_row, 2 buckets (fsync)", n_pk / pk_w, "", "", "", ""],
        ["PK scan of current state", scanned / pk_scan, "", "", "", ""],
    ]
    body = (f"{args.batches} batches x {args.rows_per_batch:,} rows ({mb:,.1f} MB in Arrow), 5 columns; raw = one "
            "`pyarrow.ipc` stream file per batch written + `fdatasync`, read back with `ipc.open_stream`. "
            "Ratio = raw time / Tidehouse time (≥ 1 is faster than raw). PK upsert: "
            f"{n_pk:,} rows, each key inserted then updated. Targets: append ≥ 0.5, read ≥ 0.5, "
            "PK upsert ≥ 100k rows/s.\n\n"
            + markdown_table(["operation", "rows/s", "MB/s", "raw rows/s", "raw MB/s", "ratio vs raw"], rows))
    write_section("storage", "Hot storage", "python benchmarks/storage.py", body)


if __name__ == "__main__":
    main()
