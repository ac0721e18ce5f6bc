"""Two processes appending to the same bucket at once: every write lands exactly once, whole, at dense
offsets."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pytest

from runtime.storage import TableMeta, open_store
from tests._support import scale

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCHEMA = pa.schema([("writer", pa.string()), ("seq", pa.int64()), ("i", pa.int64()), ("n", pa.int64())])


def _check(root: str, writes: int) -> int:
    """Assert the log holds every (writer, seq) exactly once, whole and contiguous; return its row count."""
    store = open_store(root)  # a fresh view: verifies the CRC of every frame it decodes
    t = pa.Table.from_batches(list(store.read("ods.cc", 0, 0)))
    offsets = t.column("__offset").to_pylist()
    assert offsets == list(range(len(offsets))) and store.end_offsets("ods.cc") == [len(offsets)]
    runs: dict[tuple, list[int]] = defaultdict(list)
    for w, s, i, n, off in zip(*(t.column(c).to_pylist() for c in ("writer", "seq", "i", "n", "__offset"))):
        runs[(w, s)].append((off, i, n))
    assert set(runs) == {(w, s) for w in ("a", "b") for s in range(1, writes + 1)}
    last_start = {"a": -1, "b": -1}
    order = sorted(runs.items(), key=lambda kv: kv[1][0][0])
    switches = sum(x[0][0] != y[0][0] for x, y in itertools.pairwise(order))
    print(f"[concurrency] {len(order)} writes, the writer changed {switches} times along the log")
    assert switches >= 2, "the two writers never overlapped: the test proved nothing"
    for (w, s), got in order:
        first, n = got[0][0], got[0][2]
        # one write = n consecutive offsets holding i = 0..n-1: never split, never interleaved with the other
        assert [(off, i) for off, i, _ in got] == [(first + i, i) for i in range(n)], (w, s)
        assert first > last_start[w]  # each writer's seqs land in its own order
        last_start[w] = first
        assert store.last_seq("ods.cc", w) == writes
    store.close()
    return len(offsets)


@pytest.mark.reliability
def test_two_processes_append_to_one_bucket(tmp_path, seed):
    root = str(tmp_path / "hot")
    setup = open_store(root)
    setup.create_table(TableMeta("ods.cc", SCHEMA))
    setup.close()
    writes = scale(100, 1500)
    go = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(HERE / "_concurrent_writer.py"),
                root,
                "ods.cc",
                w,
                str(writes),
                str(seed),
                str(16 * 1024),
                str(go),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=str(REPO),
        )
        for w in ("a", "b")
    ]
    for p in procs:  # both are up (imports done) before either writes
        assert p.stdout.readline() == "ready\n"
    go.touch()
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0 and out == "done\n"
    rows = _check(root, writes)
    bucket = Path(root) / "ods" / "cc" / "bucket-0"
    assert len(list(bucket.glob("*.log"))) > 1  # segments rolled while both wrote
    # the index is derived data: rebuilt from the segments alone it tells the same story
    os.unlink(bucket / "index")
    rebuild = open_store(root)
    rebuild.write("ods.cc", pa.table({"writer": ["c"], "seq": [1], "i": [0], "n": [1]}), writer="c", seq=1)
    rebuild.close()
    t = pa.Table.from_batches(list(open_store(root).read("ods.cc", 0, 0)))
    assert t.num_rows == rows + 1 and t.column("__offset").to_pylist() == list(range(rows + 1))
