"""Concurrency: a flow runs once per home, and two tiering services never commit a range twice.

* Two ``flow trigger`` of one flow: the run lock (``home/run/<flow>.lock``, ``flock``) refuses the second
  with FLOW_RUNNING naming the holder's pid; the lock dies with its process (``kill -9`` frees it).
* Two ``tidehouse tier schedule`` processes on one home while a writer appends: every hot offset range is
  committed to the lake once (the snapshots' ``tidehouse.offsets`` only move forward, each lake table
  holds every hot row exactly once).
* Registry writes from several processes: ``tests/registry/test_reg_versions.py`` (race-safe versions).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.project import Project
from runtime.storage import TableMeta

TIDEHOUSE = str(Path(sys.executable).with_name("tidehouse"))
REPO = Path(__file__).resolve().parents[2]


def _hold_lock(run_dir: Path, flow: str) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        import sys, time
        from materializer.lock import RunLock
        lock = RunLock({str(run_dir)!r}, {flow!r})
        lock.acquire()
        print("held", flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.reliability
def test_run_lock_refuses_a_second_run_and_dies_with_its_process(tmp_path):
    from materializer.lock import RunLock

    holder = _hold_lock(tmp_path, "shop")
    try:
        with pytest.raises(TidehouseError) as info:
            RunLock(tmp_path, "shop").acquire()
        assert info.value.code is ErrorCode.FLOW_RUNNING
        assert f"pid {holder.pid}" in info.value.render() and "flow status shop" in info.value.render()
        other = RunLock(tmp_path, "other")  # another flow of the same home is not blocked
        other.acquire()
        other.release()
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    lock = RunLock(tmp_path, "shop")  # kill -9 released it: no stale lock to clean up by hand
    lock.acquire()
    lock.release()


@pytest.mark.slow
@pytest.mark.reliability
def test_second_flow_trigger_process_is_refused(tmp_path):
    """The real CLI: ``flow trigger`` while the flow runs exits 2 with one clear line, touching nothing."""
    project = tmp_path / "proj"
    (project / "actions").mkdir(parents=True)
    (project / "actions" / "ingest.sql").write_text((REPO / "actions" / "ingest.sql").read_text())
    (project / "flows").mkdir()
    (project / "flows" / "shop.yaml").write_text(
        "flow: shop\nsources:\n  ticks: {format: rate}\nlayers:\n  ods:\n"
        "    ticks: {action: ingest, inputs: {raw: ticks}}\n"
    )
    home = tmp_path / "home"
    holder = _hold_lock(home / "run", "shop")
    try:
        env = {**os.environ, "TIDEHOUSE_HOME": str(home)}
        proc = subprocess.run(
            [TIDEHOUSE, "flow", "trigger", "flows/shop.yaml", "--until-idle"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "already running" in proc.stderr and "[TH403]" in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (home / "checkpoints").exists() or not any((home / "checkpoints").rglob("commits/*"))


LOG = TableMeta(
    "ods.events", pa.schema([("k", pa.int64()), ("v", pa.string())]), buckets=2, bucket_key=("k",)
)
PK = TableMeta(
    "dws.totals",
    pa.schema([("k", pa.int64()), ("n", pa.int64())]),
    kind="primary_key",
    primary_key=("k",),
    buckets=2,
)


@pytest.mark.slow
@pytest.mark.reliability
def test_two_tiering_schedulers_commit_each_range_once(tmp_path, seed):
    rng = random.Random(seed)
    root = tmp_path / "proj"
    root.mkdir()
    (root / "tidehouse.yaml").write_text("tiering:\n  interval: 500ms\n")
    home = tmp_path / "home"
    project = Project.open(home=home, project_dir=root)
    store = project.store
    store.create_table(LOG)
    store.create_table(PK)
    stop = threading.Event()
    written = {"log": 0}

    def writer() -> None:
        seq = 0
        while not stop.is_set():
            n = rng.randrange(1, 40)
            first = written["log"]
            store.write(
                LOG.name,
                pa.table(
                    {
                        "k": pa.array(range(first, first + n), pa.int64()),
                        "v": [f"v{i}" for i in range(first, first + n)],
                    }
                ),
                writer="w",
                seq=seq,
            )
            keys = [rng.randrange(50) for _ in range(5)]
            store.write(
                PK.name,
                pa.table({"k": pa.array(keys, pa.int64()), "n": pa.array([seq] * 5, pa.int64())}),
                writer="w",
                seq=seq,
            )
            written["log"] += n
            seq += 1
            time.sleep(rng.uniform(0.01, 0.1))

    env = {**os.environ, "TIDEHOUSE_HOME": str(home)}
    thread = threading.Thread(target=writer)
    thread.start()
    schedulers = [
        subprocess.Popen(
            [TIDEHOUSE, "tier", "schedule", "--duration", "12"],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        outs = [p.communicate(timeout=300) for p in schedulers]
    finally:
        stop.set()
        thread.join()
    for p, (out, err) in zip(schedulers, outs):
        assert p.returncode == 0, err[-3000:]
        assert "Traceback" not in out + err
    final = subprocess.run(
        [TIDEHOUSE, "tier", "run"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert final.returncode == 0, final.stderr[-3000:]
    commits = sum(int(m) for out, _ in outs for m in __import__("re").findall(r"(\d+) commits/", out))
    assert commits >= 4, outs  # both services were really tiering

    lake = project.lake
    for meta in (LOG, PK):
        table = lake.load(meta.name)
        snapshots = sorted(table.snapshots(), key=lambda s: s.sequence_number)
        previous = [0] * meta.buckets
        for snap in snapshots:
            props = snap.summary.additional_properties if snap.summary else {}
            if "tidehouse.offsets" not in props:
                continue
            offsets = json.loads(props["tidehouse.offsets"])
            now = [int(offsets[str(b)]) for b in range(meta.buckets)]
            assert all(a >= b for a, b in zip(now, previous)), (meta.name, snap.snapshot_id, previous, now)
            previous = now
        assert previous == store.end_offsets(meta.name), (meta.name, previous, store.end_offsets(meta.name))
        got = table.scan().to_arrow().select([f.name for f in meta.schema]).sort_by("k").to_pylist()
        want = store.scan(meta.name).select([f.name for f in meta.schema]).sort_by("k").to_pylist()
        assert got == want, (meta.name, len(got), len(want))
    assert lake.load(LOG.name).scan().to_arrow().num_rows == written["log"]
    project.close()
