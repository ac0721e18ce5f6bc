"""Exactly-once tiering under kill -9 and under concurrent tiering processes (real hot store on disk).

Every test checks the two things exactly-once means for the lake:
* log tables: the lake's ``(__bucket, __offset)`` pairs are exactly ``{(b, o) : o < hot end of b}`` — no hole,
  no duplicate — and the user rows equal the hot rows;
* primary-key tables: the lake equals the hot current state;
and the lake's snapshot chain never commits an offset range twice (each snapshot starts where its parent
ended).
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

from runtime.lake.state import OFFSETS_PROPERTY, lake_offsets
from runtime.lake.tiering import tier_table
from runtime.project import Project
from runtime.storage.api import CHANGE, TableMeta
from tests._support import scale
from tests.lake._lakekit import ACTIVITY, CLICKS, clicks, lake_rows, rows_of
from tests.services import shared_settings, write_project_file

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

WORKER = Path(__file__).with_name("_tier_worker.py")
REPO = Path(__file__).resolve().parents[2]
LOG, PK = "ods.clicks", "dws.activity"


@pytest.fixture(params=["local", "shared"])
def project(request, tmp_path):
    """``local``: everything embedded under the home; ``shared``: the hot store on SeaweedFS (metastore on
    PostgreSQL) and the lake in SeaweedFS's Iceberg REST catalog, whose commit check is then what fences
    tiering processes that bypass the local lock."""
    settings = {}
    if request.param == "shared":
        s3, pg = request.getfixturevalue("seaweedfs"), request.getfixturevalue("postgres")
        settings = shared_settings(s3, pg, registry=False)
    write_project_file(
        tmp_path, settings, {"storage": {"fsync": False}, "tiering": {"max_snapshots": 100000}}
    )
    project = Project.open(home=tmp_path / "home", project_dir=tmp_path)
    project.store.create_table(TableMeta(LOG, CLICKS, buckets=2, bucket_key=("user_id",)))
    project.store.create_table(
        TableMeta(PK, ACTIVITY, kind="primary_key", primary_key=("user_id",), buckets=2)
    )
    yield project
    project.close()


def write_round(project: Project, rng: random.Random, seq: int) -> None:
    project.store.write(LOG, clicks(rng.randrange(1, 30), start=seq * 100), writer="t", seq=seq)
    rows = [
        {
            "user_id": f"u{rng.randrange(25)}",
            "events": rng.randrange(99),
            "last_item": "x",
            CHANGE: "-D" if rng.random() < 0.2 else "+U",
        }
        for _ in range(rng.randrange(1, 15))
    ]
    project.store.write(
        PK,
        pa.Table.from_pylist(rows, schema=ACTIVITY.append(pa.field(CHANGE, pa.string()))),
        writer="t",
        seq=seq,
    )


def worker(project: Project, *extra: str, tables: str = f"{LOG},{PK}") -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(project.home), tables, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )


def assert_exactly_once(project: Project) -> None:
    store, lake = project.store, project.lake
    ends = store.end_offsets(LOG)
    pairs = lake.load(LOG).scan(selected_fields=("__bucket", "__offset")).to_arrow().to_pylist()
    got = sorted((r["__bucket"], r["__offset"]) for r in pairs)
    assert got == [(b, o) for b in range(len(ends)) for o in range(ends[b])], "lost or duplicated log rows"
    assert lake_rows(lake, LOG) == rows_of(store.scan(LOG))
    assert lake_rows(lake, PK) == rows_of(store.scan(PK))
    for name in (LOG, PK):
        assert_chain(project, name)


def assert_chain(project: Project, name: str) -> None:
    """Walking the snapshot chain, each tiering snapshot covers [parent's offsets, its offsets) — no
    overlap."""
    table = project.lake.load(name)
    chain = []
    snap = table.current_snapshot()
    while snap is not None:
        chain.append(snap)
        snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
    previous = None
    for snap in reversed(chain):
        offsets = json.loads(snap.summary.additional_properties[OFFSETS_PROPERTY])
        now = [offsets[str(b)] for b in range(len(offsets))]
        compaction = snap.summary.additional_properties.get("tidehouse.compaction") == "true"
        if previous is not None:
            assert all(a <= b for a, b in zip(previous, now)), (
                f"{name}: offsets went back {previous} -> {now}"
            )
            assert compaction or now != previous, f"{name}: an empty range was committed"
        previous = now


def test_kill_9_before_and_after_the_lake_commit(project, seed):
    rng = random.Random(seed)
    seq = iter(range(10**6))
    for round_no in range(scale(5, 50)):
        write_round(project, rng, next(seq))
        before = [
            lake_offsets(project.lake.load(n), 2)[0] if project.lake.exists(n) else [0, 0] for n in (LOG, PK)
        ]
        # a table with nothing to tier makes no commit (a round's primary-key writes may all be deletes of
        # absent keys): crash at one of the commits the worker will make
        pending = sum(b != project.store.end_offsets(n) for b, n in zip(before, (LOG, PK)))
        point = f"{rng.randint(1, pending)}:{rng.choice(['before', 'after'])}"
        proc = worker(project, "--crash", point)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == -signal.SIGKILL, f"worker did not crash at {point}: {proc.returncode} {err}"
        # a crash before the commit leaves the offsets; after it, they moved; never anything in between
        after = [
            lake_offsets(project.lake.load(n), 2)[0] if project.lake.exists(n) else [0, 0] for n in (LOG, PK)
        ]
        ends = [project.store.end_offsets(n) for n in (LOG, PK)]
        for b, a, e in zip(before, after, ends):
            assert a in (b, e), f"round {round_no} ({point}): lake offsets {a}, expected {b} or {e}"
        if rng.random() < 0.5:  # sometimes the next write lands before recovery
            write_round(project, rng, next(seq))
        for name in (LOG, PK):
            tier_table(project.store, project.lake, name)
        assert_exactly_once(project)


def test_kill_9_at_random_moments_while_writing(project, seed):
    rng = random.Random(seed)
    stop = project.home / "stop"
    seq = 0
    for _ in range(scale(3, 20)):
        proc = worker(project, "--until", str(stop))
        deadline = time.monotonic() + rng.uniform(0.5, 2.5)
        while time.monotonic() < deadline:
            write_round(project, rng, seq)
            seq += 1
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    for name in (LOG, PK):
        tier_table(project.store, project.lake, name)
    assert_exactly_once(project)


def test_four_processes_tier_the_same_tables_exactly_once(project, seed):
    """Two workers use the tiering lock, two bypass it (only the catalog's commit check fences them)."""
    rng = random.Random(seed)
    stop = project.home / "stop"
    procs = [worker(project, "--until", str(stop), *(["--no-lock"] if i % 2 else [])) for i in range(4)]
    try:
        for round_no in range(scale(20, 100)):
            write_round(project, rng, round_no)
            ends = {n: project.store.end_offsets(n) for n in (LOG, PK)}
            deadline = time.monotonic() + 60
            while any(
                not project.lake.exists(n) or lake_offsets(project.lake.load(n), 2)[0] != ends[n]
                for n in (LOG, PK)
            ):
                assert time.monotonic() < deadline, "the workers did not catch up"
                dead = [p for p in procs if p.poll() is not None]
                assert not dead, f"a worker died: {dead[0].communicate()[1][-3000:]}"
                time.sleep(0.05)
    finally:
        stop.touch()
        outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (_, err) in zip(procs, outputs):
        assert proc.returncode == 0, err
    lines = [json.loads(line) for out, _ in outputs for line in out.splitlines()]
    commits = [c for c in lines if not c.get("conflict")]
    print(
        f"commits: {len(commits)}, commit attempts that lost to a concurrent commit and re-read the "
        f"offsets: {sum(c['attempts'] - 1 for c in commits)}, cycles that gave up after repeated conflicts: "
        f"{len(lines) - len(commits)}"
    )
    for name in (LOG, PK):
        ranges = sorted((tuple(c["before"]), tuple(c["after"])) for c in commits if c["table"] == name)
        starts = [r[0] for r in ranges]
        assert len(starts) == len(set(starts)), f"{name}: one offset range was committed twice"
        assert len(ranges) >= 1
    assert_exactly_once(project)
