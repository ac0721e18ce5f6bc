"""Writer subprocess of the kill -9 test: writes seq after seq, acknowledging each on stdout once it returned.

Usage: python _crash_writer.py ROOT TABLE ROWS [SEGMENT_BYTES]. Seq n carries rows (seq=n, i=0..ROWS-1); on a
primary-key table (aggregate) each seq counts once per key i.
"""

from __future__ import annotations

import sys

import pyarrow as pa

from runtime.storage import open_store


def batch(seq: int, rows: int) -> pa.Table:
    return pa.table(
        {
            "seq": pa.array([seq] * rows, pa.int64()),
            "i": pa.array(range(rows), pa.int64()),
            "pad": pa.array(["x" * 40] * rows),
        }
    )


def main() -> None:
    root, table, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
    segment_bytes = int(sys.argv[4]) if len(sys.argv) > 4 else 64 << 20
    store = open_store(root, fsync=True, segment_bytes=segment_bytes)
    # replay the last seq first: a crash between buckets may have committed it in some buckets only, and a
    # replay is a no-op in the buckets that have it (a Spark query replays its last uncommitted batch id)
    seq = store.last_seq(table, "w") or 1
    print("ready", flush=True)
    while True:
        store.write(table, batch(seq, rows), writer="w", seq=seq)
        print(f"ack {seq}", flush=True)
        seq += 1


if __name__ == "__main__":
    main()
