"""kill -9 of a copy query between its store write and Spark's commit: no duplicate, no loss on restart.

The victim is a real process with its own SparkSession (~15 s to start), killed with SIGKILL (its whole
process group, JVM included); the restart from the checkpoint runs on the shared session. CI kills once;
TIDEHOUSE_SCALE=full kills several times at random batches.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from runtime.spark.options import cached_store
from runtime.spark.writer import foreach_batch_writer
from runtime.storage.api import TableMeta
from tests._support import REPO, scale
from tests.spark._sparkkit import sorted_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.reliability]

SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string())])


def _spawn(root: str, checkpoint: Path, *extra: str) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "tests.spark._copy_process",
        root,
        "ods.src",
        "dwd.dst",
        str(checkpoint),
        *extra,
    ]
    return subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )  # its own process group: the JVM dies with it


def _kill_group(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def _wait_file(path: Path, proc: subprocess.Popen, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"child exited early ({proc.returncode}): {proc.stderr.read()[-3000:]}")
        if time.monotonic() > deadline:
            _kill_group(proc)
            raise AssertionError("child never reached the kill point")
        time.sleep(0.1)


def test_kill_9_between_write_and_commit_neither_duplicates_nor_loses(spark, tmp_path, seed):
    rng = random.Random(seed)
    root = str(tmp_path / "hot")
    store = cached_store(root)
    store.create_table(TableMeta("ods.src", SCHEMA, buckets=2, bucket_key=("id",)))
    store.create_table(TableMeta("dwd.dst", SCHEMA, buckets=2, bucket_key=("id",)))
    next_id = 0
    checkpoint = tmp_path / "ck"
    for round_ in range(scale(1, 4)):
        for seq in range(3):  # new input each round: 3 upstream batches of 150..400 rows
            n = rng.randrange(150, 400)
            store.write(
                "ods.src",
                pa.table(
                    {
                        "id": range(next_id, next_id + n),
                        "payload": [f"p{i}" for i in range(next_id, next_id + n)],
                    },
                    schema=SCHEMA,
                ),
                writer="src",
                seq=round_ * 3 + seq,
            )
            next_id += n
        hold = rng.randrange(0, 3)
        marker = tmp_path / f"held-{round_}"
        victim = _spawn(root, checkpoint, "--hold-after-writes", str(hold), "--marker", str(marker))
        _wait_file(marker, victim)
        _kill_group(victim)  # SIGKILL: the batch is in the store, Spark's commit log does not have it

        assert not (checkpoint / "commits" / marker.read_text()).exists()
        held = int(marker.read_text())
        writes = []
        fn = foreach_batch_writer(
            root,
            "dwd.dst",
            f"copy@{checkpoint}",
            checkpoint=str(checkpoint),
            on_write=lambda b, r, writes=writes: writes.append((b, r)),
        )
        stream = (
            spark.readStream.format("tidehouse")
            .option("root", root)
            .option("table", "ods.src")
            .option("maxRowsPerTrigger", "200")
            .load()
        )
        (
            stream.writeStream.foreachBatch(fn)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
            .awaitTermination()
        )
        assert writes and writes[0][0] == held and writes[0][1].skipped, writes  # the replay was a no-op
        assert all(not r.skipped and r.rows > 0 for _, r in writes[1:])
        assert sorted_rows(store.scan("dwd.dst")) == sorted_rows(store.scan("ods.src"))
