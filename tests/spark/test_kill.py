"""kill -9 of a copy query between its store write and Spark's commit: no duplicate, no loss on restart.

Each run starts a real process with its own SparkSession (~15 s), so CI kills once; TIDEHOUSE_SCALE=full
kills several times at random batches.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from runtime.spark.datasource import cached_store
from runtime.storage.api import TableMeta
from tests.conftest import REPO, scale
from tests.spark.conftest import sorted_rows

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string())])


def _spawn(root: str, checkpoint: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "tests.spark._copy_process", root, "ods.src", "dwd.dst", str(checkpoint), *extra]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # its own process group: the JVM dies with it


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


def test_kill_9_between_write_and_commit_neither_duplicates_nor_loses(tmp_path, seed):
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
            store.write("ods.src", pa.table({"id": range(next_id, next_id + n),
                                             "payload": [f"p{i}" for i in range(next_id, next_id + n)]},
                                            schema=SCHEMA), writer="src", seq=round_ * 3 + seq)
            next_id += n
        hold = rng.randrange(0, 3)
        marker = tmp_path / f"held-{round_}"
        victim = _spawn(root, checkpoint, "--hold-after-writes", str(hold), "--marker", str(marker))
        _wait_file(marker, victim)
        _kill_group(victim)  # SIGKILL: the batch is in the store, Spark's commit log does not have it

        assert not (checkpoint / "commits" / marker.read_text()).exists()
        survivor = _spawn(root, checkpoint)
        out, err = survivor.communicate(timeout=300)
        assert survivor.returncode == 0, err[-3000:]
        writes = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        replay = [w for w in writes if w.get("batch") == int(marker.read_text())]
        assert replay and replay[0]["skipped"], writes  # the replayed batch id was a no-op
        assert sorted_rows(store.scan("dwd.dst")) == sorted_rows(store.scan("ods.src"))
