"""Writer subprocess of the contract's kill -9 test: seq after seq, acknowledging each once ``write``
returned.

Usage: python -m tests.storage.contract._writer SPEC TABLE ROWS (SPEC: the backend's JSON). Seq n carries rows
(seq=n, i=0..ROWS-1). It first replays its last seq (a crash may have left it uncommitted on some store).
"""

from __future__ import annotations

import sys

import pyarrow as pa

from tests.storage.contract._backends import open_from_spec


def batch(seq: int, rows: int) -> pa.Table:
    return pa.table(
        {
            "seq": pa.array([seq] * rows, pa.int64()),
            "i": pa.array(range(rows), pa.int64()),
            "pad": pa.array(["x" * 40] * rows),
        }
    )


def main() -> None:
    spec, table, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = open_from_spec(spec, fsync=True)
    seq = store.last_seq(table, "w") or 1
    print("ready", flush=True)
    while True:
        store.write(table, batch(seq, rows), writer="w", seq=seq)
        print(f"ack {seq}", flush=True)
        seq += 1


if __name__ == "__main__":
    main()
