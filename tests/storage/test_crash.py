"""Fault injection: kill -9 a writer at random moments; truncate and flip bits in segments."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from runtime.storage import TableMeta, open_store
from tests._support import scale
from tests.storage._crash_writer import batch as make_batch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCHEMA = pa.schema([("seq", pa.int64()), ("i", pa.int64()), ("pad", pa.string())])
ROWS = 500


def _run_and_kill(
    root: str, table: str, rng: random.Random, acked: set[int], *, segment_bytes: int = 64 << 20, during=None
) -> None:
    """Start a writer, kill -9 it at a random moment after its first ack; ``during()`` runs meanwhile."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "_crash_writer.py"), root, table, str(ROWS), str(segment_bytes)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(REPO),
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 30
    while not any(x.startswith("ack") for x in lines) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.002)  # the first write of a fresh process is slow (lazy imports): kill after it
    kill_at = time.monotonic() + rng.uniform(0, 0.05)
    while time.monotonic() < kill_at:
        if during is not None:
            during()
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    reader.join(5)
    assert "ready\n" in lines, f"writer did not start: {lines}"
    acked.update(int(line.split()[1]) for line in lines if line.startswith("ack"))


@pytest.mark.reliability
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["log", "primary_key", "primary_key_last_row"])
def test_kill9_writer_loses_and_duplicates_nothing(tmp_path, seed, kind):
    rng = random.Random(seed)
    root = str(tmp_path / "hot")
    store = open_store(root)
    if kind == "log":
        store.create_table(TableMeta("ods.c", SCHEMA, buckets=2, bucket_key=("i",)))
    elif kind == "primary_key":  # the row loop
        store.create_table(
            TableMeta(
                "ods.c",
                SCHEMA,
                kind="primary_key",
                primary_key=("i",),
                buckets=2,
                merge_engine="aggregate",
                aggregations={"seq": "count"},
            )
        )
    else:  # the vectorised merge: each seq overwrites every key with seq
        store.create_table(TableMeta("ods.c", SCHEMA, kind="primary_key", primary_key=("i",), buckets=2))
    store.close()
    acked: set[int] = set()
    for _ in range(scale(10, 100)):
        _run_and_kill(root, "ods.c", rng, acked)
        # between kills, a reader in this process sees only whole batches
        check = open_store(root)
        if kind == "log":
            seqs = Counter()
            for b in range(2):
                for batch in check.read("ods.c", b, 0, columns=["seq"]):
                    seqs.update(batch.column("seq").to_pylist())
            # per bucket a batch is whole; across buckets only the newest seq may be incomplete until replayed
            newest = max(seqs, default=0)
            assert all(v == ROWS for s, v in seqs.items() if s != newest), "a partial batch is visible"
        check.close()
    final = open_store(root)
    last = final.last_seq("ods.c", "w") or 0
    final.write("ods.c", make_batch(last, ROWS), writer="w", seq=last)  # the restart replays the newest seq
    assert acked and max(acked) <= last
    if kind == "log":
        t = final.scan("ods.c")
        per_seq = Counter(t.column("seq").to_pylist())
        assert set(per_seq) == set(range(1, last + 1)) >= acked  # every committed seq exactly once ...
        assert all(n == ROWS for n in per_seq.values())  # ... and whole
        assert len(set(zip(t.column("seq").to_pylist(), t.column("i").to_pylist()))) == t.num_rows
    else:
        state = final.scan("ods.c")
        assert sorted(state.column("i").to_pylist()) == list(range(ROWS))
        assert set(state.column("seq").to_pylist()) == {last}  # each committed seq counted once per key
        # the changelog replays to the same state
        replay: dict = {}
        for b in range(2):
            for batch in final.read("ods.c", b, 0, columns=["i", "seq"]):
                for i, s, k in zip(
                    batch.column("i").to_pylist(),
                    batch.column("seq").to_pylist(),
                    batch.column("__change").to_pylist(),
                ):
                    if k in ("+I", "+U"):
                        replay[i] = s
                    elif k == "-D":
                        replay.pop(i, None)
        assert replay == {i: last for i in range(ROWS)}
    print(f"[crash] {kind}: {len(acked)} acked, {last} committed")


@pytest.mark.reliability
@pytest.mark.slow
def test_kill9_writer_while_retention_trims_the_log(tmp_path, seed):
    """Retention (another process's job: deletes segments, saves seqs, compacts the index) runs while a writer
    is killed at random moments: the kept log stays whole and dense and no replayed seq lands twice."""
    rng = random.Random(seed)
    root = str(tmp_path / "hot")
    open_store(root).create_table(TableMeta("ods.c", SCHEMA))
    trimmer = open_store(root)
    deleted = [0]

    def trim() -> None:  # keep the last few batches; every segment is old enough
        end = trimmer.end_offsets("ods.c")[0]
        deleted[0] += trimmer.delete_before("ods.c", 0, end - 3 * ROWS, older_than=time.time() + 3600)

    acked: set[int] = set()
    for _ in range(scale(10, 100)):
        _run_and_kill(root, "ods.c", rng, acked, segment_bytes=16 * 1024, during=trim)
        trim()
    final = open_store(root)
    last = final.last_seq("ods.c", "w") or 0
    final.write("ods.c", make_batch(last, ROWS), writer="w", seq=last)  # the restart replays the newest seq
    first = final._table("ods.c").logs[0].first_offset
    t = pa.Table.from_batches(list(final.read("ods.c", 0, first)))
    assert t.column("__offset").to_pylist() == list(range(first, final.end_offsets("ods.c")[0]))
    per_seq = Counter(t.column("seq").to_pylist())
    assert sorted(per_seq) == list(range(min(per_seq), last + 1)) and set(per_seq.values()) == {ROWS}
    assert deleted[0] > 0 and min(per_seq) > 1  # retention really went past early seqs ...
    assert acked and max(acked) <= last
    for old in {1, min(per_seq) - 1}:  # ... and their replays are still no-ops
        assert final.write("ods.c", make_batch(old, ROWS), writer="w", seq=old).skipped
    print(f"[crash+retention] {len(acked)} acked, {last} committed, {deleted[0]} segments deleted")
