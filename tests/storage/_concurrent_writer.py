"""Writer subprocess of the concurrent-writers test: many small writes to one bucket of a log table.

Usage: python _concurrent_writer.py ROOT TABLE WRITER WRITES SEED SEGMENT_BYTES GO_FILE. Waits for GO_FILE,
then writes seq 1..WRITES, each a batch of 1-20 rows (writer, seq, i=0..n-1), fsync on, and prints "done".
"""

from __future__ import annotations

import os
import random
import sys
import time

import pyarrow as pa

from runtime.storage import open_store


def batch(writer: str, seq: int, n: int) -> pa.Table:
    return pa.table(
        {
            "writer": [writer] * n,
            "seq": pa.array([seq] * n, pa.int64()),
            "i": pa.array(range(n), pa.int64()),
            "n": pa.array([n] * n, pa.int64()),
        }
    )


def main() -> None:
    root, table, writer, writes, seed, seg, go = sys.argv[1:8]
    rng = random.Random(f"{seed}-{writer}")
    store = open_store(root, fsync=True, segment_bytes=int(seg))
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    for seq in range(1, int(writes) + 1):
        store.write(table, batch(writer, seq, rng.randint(1, 20)), writer=writer, seq=seq)
    store.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
