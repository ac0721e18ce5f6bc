"""Fast checks of the SDP side-by-side benchmark's helpers (the benchmark itself never runs in CI)."""

from __future__ import annotations

import json
import math
import os
import statistics

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.vs_sdp import LAYERS
from benchmarks.vs_sdp.cli import command_line, parse_args
from benchmarks.vs_sdp.generator import Generator
from benchmarks.vs_sdp.phase import CatchUp, Phase, Summary
from benchmarks.vs_sdp.prober import Observation
from benchmarks.vs_sdp.process import group_members, terminate, tree_rss_bytes
from benchmarks.vs_sdp.readers import SdpTableReader
from benchmarks.vs_sdp.report import cell, plot, report_body


def test_summary_of_delays_and_of_nothing():
    s = Summary.of([3.0, 1.0, 2.0])
    assert (s.n, s.p50, s.max, s.unseen) == (3, 2.0, 3.0, 0) and s.p95 == pytest.approx(2.9)
    empty = Summary.of([])  # a series with no probe seen: no figures, and the report shows "—"
    assert empty.n == 0 and all(math.isnan(v) for v in (empty.p50, empty.p95, empty.max))
    assert cell(empty) == "—"


def test_the_command_line_is_the_module_invocation():
    assert command_line(["--quick"]) == ".venv/bin/python -m benchmarks.vs_sdp --quick"


def test_observation_delays_only_count_seen_markers():
    obs = Observation("ADS hot", seen={"a": 12.0, "b": 25.0})
    probes = {"a": 10.0, "b": 20.0, "c": 30.0}
    assert sorted(obs.delays(probes)) == [2.0, 5.0]
    assert obs.points(probes) == [(10.0, 2.0), (20.0, 5.0)]


def test_tree_rss_counts_this_process():
    assert tree_rss_bytes(os.getpid()) > 10 * 2**20
    assert tree_rss_bytes(2**22 + 12345) == 0  # no such process


def test_terminate_lets_the_group_end_on_its_own_after_its_leader_exited(tmp_path):
    """A run's process exits while its child (the driver's JVM, in its shutdown hooks) still works: the
    child gets the grace to finish, and only then what is left is killed."""
    import subprocess

    done, stuck = tmp_path / "done", tmp_path / "stuck"
    script = f"(sleep 1; touch {done}) & exit 0"
    proc = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    proc.wait()
    assert group_members(proc.pid)  # the child outlives the leader
    terminate(proc, grace=20, group=True)
    assert done.exists() and not group_members(proc.pid)

    proc = subprocess.Popen(["bash", "-c", f"(sleep 30; touch {stuck}) & exit 0"], start_new_session=True)
    proc.wait()
    terminate(proc, grace=0.5, group=True)  # past the grace: killed
    assert not group_members(proc.pid) and not stuck.exists()


def test_a_child_sharing_its_parents_address_space_is_counted_once(monkeypatch):
    """A JVM starts each subprocess by vfork/clone(CLONE_VM): until the child execs, /proc shows it with the
    JVM's whole resident set. Such a child is the parent's memory; a child with its own address space is
    counted. (The child is a new interpreter, not an ``os.fork`` of this one: pytest runs threads, and
    forking a threaded process is deprecated from Python 3.12.)"""
    import subprocess
    import sys

    from benchmarks.vs_sdp import process

    assert process.shares_memory(os.getpid(), os.getpid())
    # The child writes 32 MiB and then says so: just after its exec, /proc may still show it with 0 resident
    # pages (the kernel syncs a task's RSS counters lazily), which would make ``both`` equal ``alone``.
    script = "import time; held = b'x' * (32 << 20); print('ready', flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pid = child.pid
    try:
        assert child.stdout.readline() == "ready\n"
        assert not process.shares_memory(os.getpid(), pid)
        both = tree_rss_bytes(os.getpid())
        monkeypatch.setattr(process, "shares_memory", lambda kid, parent: kid == pid)  # as if vforked
        alone = tree_rss_bytes(os.getpid())
        assert 0 < alone < both - (32 << 20)
    finally:
        child.kill()
        child.communicate()  # waits, and closes the pipe
    assert not process.shares_memory(os.getpid(), pid)  # gone: nothing shared


def test_generator_writes_whole_files_and_timestamps_probes(tmp_path):
    gen = Generator(tmp_path / "in", rate=100, pool=500)
    gen.write_batch(120)
    marker = gen.write_probe("p1")
    files = sorted(p.name for p in (tmp_path / "in").iterdir())
    assert all(not name.startswith(".") for name in files)  # no temporary file is left behind
    rows = [json.loads(line) for p in (tmp_path / "in").iterdir() for line in p.read_text().splitlines()]
    assert len(rows) == 121
    assert {r["user_id"] for r in rows if r["item_id"] == "probe"} == {marker}
    assert all(r["ts"] != "@TS@" for r in rows)
    assert marker in gen.measured() and gen.measured()[marker] > 0


def test_probe_gaps_are_jittered_around_the_interval(tmp_path):
    gen = Generator(tmp_path / "in", rate=100, pool=500)
    gen.probe_interval = 4.0
    gaps = [gen.probe_gap() for _ in range(400)]
    assert all(3.0 <= g <= 5.0 for g in gaps)
    assert max(gaps) - min(gaps) > 1.5  # spread over the band, not one fixed phase
    assert abs(statistics.fmean(gaps) - 4.0) < 0.1


def test_sdp_reader_only_trusts_committed_streaming_files(tmp_path):
    table = tmp_path / "dwd_events"
    (table / "_spark_metadata").mkdir(parents=True)
    committed, uncommitted = table / "part-00000-a.parquet", table / "part-00001-b.parquet"
    pq.write_table(pa.table({"user_id": ["u1", "zz-probe-1"]}), committed)
    pq.write_table(pa.table({"user_id": ["zz-probe-2"]}), uncommitted)
    (table / "_spark_metadata" / "0").write_text(
        "v1\n" + json.dumps({"path": committed.as_uri(), "size": 1, "isDir": False, "action": "add"}) + "\n"
    )
    reader = SdpTableReader(table, streaming=True)
    assert reader({"zz-probe-1", "zz-probe-2"}) == {"zz-probe-1"}
    entry = {"path": uncommitted.as_uri(), "size": 1, "isDir": False, "action": "add"}
    (table / "_spark_metadata" / "1").write_text("v1\n" + json.dumps(entry) + "\n")
    assert reader({"zz-probe-1", "zz-probe-2"}) == {"zz-probe-1", "zz-probe-2"}


def test_sdp_reader_follows_a_rewritten_view(tmp_path):
    view = tmp_path / "ads_top_spenders"
    view.mkdir()
    pq.write_table(pa.table({"user_id": ["zz-probe-1"]}), view / "part-00000-v1.parquet")
    reader = SdpTableReader(view, streaming=False)
    assert reader({"zz-probe-1", "zz-probe-2"}) == {"zz-probe-1"}
    (view / "part-00000-v1.parquet").unlink()  # the next run rewrote the view
    pq.write_table(pa.table({"user_id": ["zz-probe-2"]}), view / "part-00000-v2.parquet")
    assert reader({"zz-probe-1", "zz-probe-2"}) == {"zz-probe-2"}


def _phase(name, suffixes, delay_of, probes=5):
    written = {f"m{i}": 100.0 + 4 * i for i in range(probes)}
    obs = {}
    for layer_no, layer in enumerate(LAYERS):
        for suffix in suffixes:
            label = f"{layer} {suffix}"
            obs[label] = Observation(label, {m: t + delay_of(layer_no, suffix) for m, t in written.items()})
    return Phase(name, 1000, written, obs, 3 * 2**30, 50_000, 60.0, runs=[(0.0, 40.0)])


def test_report_and_plot_from_saved_results(tmp_path):
    sdp = _phase("SDP loop", ["SDP"], lambda n, s: 40.0 + 5 * n)
    th = _phase("Tidehouse T=5s", ["hot", "lake"], lambda n, s: 1.0 + n + (4.0 if s == "lake" else 0.0))
    phases = {p.name: Phase.from_json(json.loads(json.dumps(p.to_json()))) for p in (sdp, th)}
    assert phases["Tidehouse T=5s"].lag("ADS").p50 == pytest.approx(4.0)
    args = parse_args(["--tiering", "5"])
    body = report_body(phases, args)
    ads = next(line for line in body.splitlines() if line.startswith("| ADS |"))
    assert "55.0 / 55.0 / 55.0" in ads and "13.8×" in ads  # SDP 55 s vs Tidehouse hot 4 s
    assert "**met**" in body
    pytest.importorskip("matplotlib")  # the optional `bench` extra
    plot(phases, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 10_000


def test_a_probe_never_seen_counts_with_its_wait_until_the_end():
    probes = {"a": 0.0, "b": 10.0, "c": 20.0}
    obs = {f"{layer} SDP": Observation(f"{layer} SDP", {"a": 5.0, "b": 15.0}) for layer in LAYERS}
    phase = Phase("SDP loop", 1000, probes, obs, 0, 0, 100.0, ended=120.0)
    s = phase.summary("ADS SDP")
    assert (s.n, s.unseen, s.max) == (3, 1, 100.0)  # c waited 100 s and was still not visible
    assert cell(s).startswith("≥ ") and "1 never seen" in cell(s)


def test_a_burst_is_written_in_whole_files_and_its_marker_is_watched(tmp_path):
    gen = Generator(tmp_path / "in", rate=100, pool=500)
    gen.write_burst(1_250, file_rows=500)
    marker = gen.write_probe("b1", kind="burst")
    sizes = sorted(len(p.read_text().splitlines()) for p in (tmp_path / "in").glob("data-*.json"))
    assert sizes == [250, 500, 500] and gen.rows_written == 1_250
    assert marker in gen.pending() and marker not in gen.measured()  # watched, not a measured probe


def test_sdp_catchup_cost_is_the_excess_of_the_runs_that_overlapped_the_burst():
    # warm-up run, three steady runs of 40-42 s, then the burst at 200: the run in progress (190-231) and the
    # run that showed the marker (231-291) overlap it; median steady run 41 s
    runs = [
        (0.0, 70.0),
        (70.0, 110.0),
        (110.0, 151.0),
        (151.0, 193.0),
        (193.0, 234.0),
        (234.0, 294.0),
        (294.0, 335.0),
    ]
    phase = Phase(
        "SDP loop",
        1000,
        {},
        {},
        0,
        0,
        100.0,
        runs=runs,
        ended=200.0,
        catchup=CatchUp(600_000, 200.0, 202.0, 293.0),
    )
    # steady runs ended by 200: 40, 41, 42, 41 -> median 41, half-spread 1 s; overlapping: 41 (193-234) and
    # 60 (234-294), so 19 s of extra work, ± 1 s per overlapping run
    assert phase.catchup_cost() == pytest.approx(((41 - 41) + (60 - 41), 2 * 1.0))
    assert phase.catchup_rate() == pytest.approx((600_000 / 19, 600_000 / 21, 600_000 / 17))
    assert phase.steady_runs() == runs[:4]


def test_tidehouse_catchup_cost_is_the_marker_delay_beyond_the_steady_median():
    th = _phase("Tidehouse T=5s", ["hot", "lake"], lambda n, s: 1.0 + n)  # ADS hot delay 4 s, no spread
    th.catchup = CatchUp(300_000, 500.0, 503.0, 534.0)
    assert th.catchup_cost() == pytest.approx((34.0 - 4.0, 0.0))
    assert th.catchup_rate() == pytest.approx((10_000, 10_000, 10_000))
    th.observations["ADS hot"].seen["m4"] += 2.0  # one slow probe: p95 - p50 = 1.6 s of noise
    assert th.catchup_cost() == pytest.approx((30.0, 1.6))
    th.catchup = CatchUp(300_000, 500.0, 503.0, 505.0)  # within the noise of the steady delay
    assert th.catchup_rate()[2] == math.inf
    th.catchup = CatchUp(300_000, 500.0, 503.0, None)  # never seen: nothing to claim
    assert th.catchup_rate() is None


def test_report_shows_the_catchup_rates_of_both_systems():
    sdp = _phase("SDP loop", ["SDP"], lambda n, s: 40.0 + 5 * n)
    sdp.runs = [(0.0, 60.0), (60.0, 100.0), (100.0, 140.0), (140.0, 180.0), (180.0, 250.0)]
    sdp.ended, sdp.catchup = 181.0, CatchUp(600_000, 181.0, 183.0, 249.0)  # one run 30 s over 40
    th = _phase("Tidehouse T=5s", ["hot", "lake"], lambda n, s: 1.0 + n)
    th.catchup = CatchUp(600_000, 500.0, 503.0, 524.0)  # 24 s - 4 s
    phases = {p.name: Phase.from_json(json.loads(json.dumps(p.to_json()))) for p in (th, sdp)}
    body = report_body(phases, parse_args(["--tiering", "5"]))
    # SDP's steady runs 40, 40, 40 (the first one is the warm-up): no spread
    assert "| SDP loop | 600,000 | 68.0 | 55.0 | 30.0 ± 0.0 | 20,000 (20,000–20,000) | 20× |" in body
    assert "| Tidehouse T=5s | 600,000 | 24.0 | 4.0 | 20.0 ± 0.0 | 30,000 (30,000–30,000) | 30× |" in body
    assert (
        "Tidehouse 30,000 (30,000–30,000) rows/s, SDP 20,000 (20,000–20,000) rows/s (Tidehouse ÷ SDP 1.5×)"
        in body
    )
    # the SDP loop column comes first whatever order the runs were measured in
    assert any(line.startswith("| layer | SDP loop |") for line in body.splitlines())
