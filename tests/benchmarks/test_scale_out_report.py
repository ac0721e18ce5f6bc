"""Fast checks of the scale-out benchmark's figures and report on made-up measurements (no Spark): every
figure it prints is computed from the measured numbers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks.scale_out.cli import command_line, parse_args
from benchmarks.scale_out.cpu import CpuMeter, CpuReading
from benchmarks.scale_out.report import Run, figures, report_body, verdict_of
from benchmarks.scale_out.runs import parse_sdp_log, parse_trigger_log, tidehouse_project

ROWS = 5_000_000


def run(wall: float, driver: float, cluster: float | None = None, *, rows: int = ROWS, tiering=None) -> Run:
    groups = {"driver": driver} | ({} if cluster is None else {"cluster": cluster})
    kinds = {"driver/tidehouse": 0.2 * driver, "driver/java": 0.7 * driver, "driver/python": 0.1 * driver}
    if cluster is not None:
        kinds |= {"cluster/java": 0.6 * cluster, "cluster/python": 0.4 * cluster}
    cpu = CpuReading(wall, groups, machine=1.5 * wall, loads=[2.0, 4.0], kinds=kinds)
    tables = {"ods.events": {"rows": rows, "batches": 3, "batch_seconds": {"total": 12.5}}}
    own = wall - (10 if rows else 5)  # the runs' own clocks: each backlog cost 5 s less than by the wall
    return Run(rows, wall, cpu, "executors" if cluster is not None else "driver", own, tiering, tables)


def executors(r: Run) -> Run:
    r.data_path = "executors"  # a local[*] run on the executor path
    return r


def fake_paths() -> dict[str, dict[str, Run]]:
    return {
        # SDP: 130 - 30 = 100 s for 5M rows -> 50,000 rows/s
        "sdp": {"empty": run(30, 20, rows=0), "backlog": run(130, 220)},
        # local: 270 - 20 = 250 s -> 20,000 rows/s; without the final tiering (51 - 1 = 50 s) 25,000 rows/s
        "local": {"empty": run(20, 15, rows=0, tiering=1.0), "backlog": run(270, 400, tiering=51.0)},
        # local, executor path: 320 - 20 = 300 s -> 16,667 rows/s
        "local-exec": {"empty": executors(run(20, 15, rows=0)), "backlog": executors(run(320, 420))},
        # 1 worker: 240 - 40 = 200 s -> 25,000 rows/s; driver adds 30 of 30 + 270 = 10%
        "cluster1": {
            "empty": run(40, 20, 30, rows=0, tiering=1.0),
            "backlog": run(240, 50, 300, tiering=11.0),
        },
        # 2 workers: 140 - 40 = 100 s -> 50,000 rows/s; driver adds 10 of 10 + 110 = 8.3%
        "cluster2": {
            "empty": run(40, 20, 40, rows=0, tiering=1.0),
            "backlog": run(140, 30, 150, tiering=6.0),
        },
    }


META = {
    "rows": ROWS,
    "file_rows": 50_000,
    "backlog_write_s": 42.0,
    "worker_cores": 1,
    "worker_memory": "2g",
    "executor_memory": "1g",
    "wall": 1234.0,
    "load_start": 1.5,
    "load_end": 3.25,
    "code": "commit abc",
    "failures": {},
}


def test_figures_are_the_backlog_run_against_the_empty_run():
    paths = fake_paths()
    sdp, local = figures("sdp", paths["sdp"]), figures("local", paths["local"])
    one, two = figures("cluster1", paths["cluster1"]), figures("cluster2", paths["cluster2"])
    assert sdp.work_s == 100 and sdp.rate == 50_000 and sdp.hot_rate is None
    assert sdp.own_s == 95 and sdp.own_rate == pytest.approx(5e6 / 95)
    assert local.rate == 20_000 and local.tiering_s == 50 and local.hot_rate == 25_000
    assert one.rate == 25_000 and two.rate == 50_000
    assert local.driver_share == 1.0 and sdp.per_million(sdp.driver_cpu) == 40.0  # (220 - 20) / 5
    assert one.driver_cpu == 30 and one.all_cpu == 300 and one.driver_share == pytest.approx(0.10)
    assert two.per_million(two.driver_cpu) == 2.0 and two.driver_share == pytest.approx(10 / 120)
    assert two.backlog_driver_share == pytest.approx(30 / 180)
    assert two.machine_cores == 1.5 and two.other_cpu == 210 - 180 and two.load == 3.0


def test_the_report_prints_the_rates_ratios_and_targets():
    body = report_body(fake_paths(), META)
    for text in ("50,000", "20,000", "25,000", "0.40×", "0.50×", "1.00×", "2.00×", "8.3%", "10.0%", "100.0%"):
        assert text in body, text
    # own clocks: SDP 95 s (52,632 rows/s), 1 worker 195 s (25,641), 2 workers 95 s; per CPU second:
    # 2 workers 5M / 120 s, 1 worker 5M / 300 s, SDP 5M / 200 s
    assert (
        "* Cluster, 2 workers ÷ 1 worker: 2.00× by wall clock (50,000 vs 25,000 rows/s), "
        "2.05× by own clocks, 2.50× per CPU second." in body
    )
    assert (
        "* Target Tidehouse cluster, 1 worker ≥ 1.0× SDP: 0.50× by wall clock (25,000 vs 50,000 rows/s), "
        "0.49× by own clocks, 0.67× per CPU second — **not met**." in body
    )
    assert (
        "* Target Tidehouse cluster, 2 workers ≥ 1.0× SDP: 1.00× by wall clock (50,000 vs 50,000 rows/s), "
        "1.00× by own clocks, 1.67× per CPU second — **met**." in body
    )
    assert "Tidehouse cluster, 2 workers: 8.3% of the CPU the backlog added (10.0 of 120.0 s" in body
    assert (
        "* Local driver path ÷ SDP: 0.40× by wall clock (20,000 vs 50,000 rows/s), 0.39× by own clocks"
        in body
    )
    assert (
        "| Tidehouse local[*], driver path | driver | 270.0 | 20.0 | 250.0 | 245.0 | 20,000 | 0.40× | 20,408 "
        "| 0.39× | 50.0 | 25,000 |" in body
    )
    # per CPU second: cluster2 added 120 s of CPU for 5M rows (41,667 rows/s), SDP 200 s (25,000): 1.67×
    assert figures("cluster2", fake_paths()["cluster2"]).cpu_rate == pytest.approx(5e6 / 120)
    assert "| 2.0 | 24.0 | 41,667 | 1.67× | 8.3% | 16.7% | 1.50 | 30.0 | 3.00 |" in body
    assert "| 3 / 12.5 |" in body  # ODS batches / seconds in them
    # by kind of process, per M rows: the driver added 10 s (2 + 7 + 1), the cluster 110 s (66 + 44)
    assert "| Tidehouse cluster, 2 workers | 0.4 | 1.4 | 0.2 | 13.2 | 8.8 |" in body
    assert "| Tidehouse local[*], driver path | 15.4 | 53.9 | 7.7 | — | — |" in body  # 385 s added
    assert "5,000,000 rows" in body and "commit abc" in body and "1.50 at its start, 3.25" in body
    assert "Notes" not in body
    # other processes: machine 1.5 x wall minus the measured CPU; 2 workers: 30 of 210 s
    assert figures("cluster2", fake_paths()["cluster2"]).others_share == pytest.approx(30 / 210)
    assert "Tidehouse cluster, 2 workers 14.3%." in body
    # local[*]: the driver path (auto's pick) 20,000 rows/s against the executor path's 16,667; own clocks 245
    # against 295 s; per CPU second 385 against 405 added CPU s
    assert "| Tidehouse local[*], executor path | executors | 320.0 | 20.0 | 300.0 | 295.0 | 16,667 |" in body
    assert (
        "* `data_path: auto` on local[*] (the driver path) ÷ the executor path there: 1.20× by wall clock "
        "(20,000 vs 16,667 rows/s), 1.20× by own clocks, 1.05× per CPU second — the faster path." in body
    )


def test_auto_is_reported_as_the_slower_path_when_it_was():
    from benchmarks.scale_out.report import auto_verdict, conclusions

    assert auto_verdict([("by wall clock", 0.9, ""), ("per CPU second", 0.8, "")]) == "**the slower path**"
    mixed = auto_verdict(
        [("by wall clock", 1.1, ""), ("by own clocks", 0.95, ""), ("per CPU second", None, "")]
    )
    assert mixed == "faster by wall clock; **slower** by the other measures"
    paths = fake_paths()
    paths["local-exec"]["backlog"] = executors(run(220, 300))  # 200 s: 25,000 rows/s, faster than auto's
    lines = conclusions({k: figures(k, v) for k, v in paths.items()})
    assert any(
        "÷ the executor path there: 0.80× by wall clock" in line and "**the slower path**" in line
        for line in lines
    )
    # with rounds: each round's ratio, the driver path against the same round's executor path
    rounds = [fake_paths(), paths]
    each = conclusions({k: figures(k, v) for k, v in paths.items()}, rounds)
    assert any(line.endswith("**the slower path** (each round: 1.20×, 0.80×).") for line in each)
    paths = fake_paths()
    del paths["local-exec"]  # a results file from before this path: no line about it
    assert not any(
        "executor path there" in line for line in conclusions({k: figures(k, v) for k, v in paths.items()})
    )


def test_a_target_met_by_some_measures_only_says_which():
    pairs = [("by wall clock", 1.2, ""), ("by own clocks", 0.9, ""), ("per CPU second", None, "")]
    assert verdict_of(pairs, 1.0) == "**met** by wall clock; **not met** by own clocks, per CPU second"
    assert verdict_of(pairs[:1], 1.0) == "**met**" and verdict_of(pairs[1:], 1.0) == "**not met**"


def test_no_figure_is_made_up_when_a_run_measured_nothing():
    paths = fake_paths()
    paths["cluster2"]["backlog"] = run(35, 30, 150)  # faster than its empty run: no rate, no ratio
    paths["cluster2"]["backlog"].note = "ODS wrote 10 rows of 5,000,000"
    del paths["sdp"]
    meta = {**META, "failures": {"sdp": "spark-pipelines run exited 1"}, "notes": ["read again from logs"]}
    body = report_body(paths, meta)
    f = figures("cluster2", paths["cluster2"])
    assert f.rate is None and f.hot_rate is None
    assert "Cluster, 2 workers ÷ 1 worker: — by wall clock (— vs 25,000 rows/s)" in body
    assert (
        "* read again from logs" in body
        and "ODS wrote 10 rows" in body
        and "**SDP (spark-pipelines, local[2]) failed**" in body
    )
    assert "× SDP" in body and "≥ 1.0× SDP" not in body  # no SDP: no target line against it


def test_runs_round_trip_through_the_saved_results():
    original = fake_paths()["cluster1"]["backlog"]
    again = Run.from_json(original.to_json())
    assert again == original


def test_the_trigger_output_is_parsed():
    text = "\n".join(
        [
            '{"ts": "x", "level": "info", "message": "flow vs_sdp: final tiering cycle in 12.5s"}',
            "flow vs_sdp: until-idle finished in 80.2s on spark://127.0.0.1:7077 (data path: executors)",
            "  ods.events: 200000 rows written in 4 batches",
            "  dwd.events: 196000 rows written in 4 batches, 4000 quarantined",
            "  ads.total: 1 row written in 1 batch",
        ]
    )
    parsed = parse_trigger_log(text)
    assert parsed["tiering_s"] == 12.5 and parsed["finished_s"] == 80.2
    assert parsed["data_path"] == "executors" and parsed["spark"] == "spark://127.0.0.1:7077"
    assert parsed["tables"] == {
        "ods.events": {"rows": 200000, "batches": 4},
        "dwd.events": {"rows": 196000, "batches": 4},
        "ads.total": {"rows": 1, "batches": 1},
    }


def test_the_sdp_log_gives_the_run_by_its_own_clock():
    text = (
        "2026-11-24 00:33:13: Creating Spark session...\n2026-11-24 00:33:43: Starting run...\n"
        "[Stage 0:====>  (18 + 3) / 100]\n2026-11-24 00:34:22: Run is COMPLETED.\n"
    )
    assert parse_sdp_log(text) == 39.0
    assert parse_sdp_log(text.split("\n[Stage")[0]) is None  # a run that never completed


def test_the_cpu_meter_counts_a_child_and_its_child():
    # each process is busy for 0.2 CPU s, then idles long enough to be sampled with all of it: the CPU a
    # process spends after its last sample is not counted (the module's docstring), and on a busy machine
    # the sampling thread may wait well past its interval
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass\n"
    idle = "time.sleep(0.6)\n"
    start = f"import subprocess, sys\nq = subprocess.Popen([sys.executable, '-c', {busy + idle!r}])\n"
    code = f"{start}{busy}q.wait()\n{idle}"
    # the probe is a group of its own: this test process may have other children (a worker of a parallel
    # run keeps the servers its earlier tests started), which the default group would count too
    probe: list[int] = []
    meter = CpuMeter({"probe": lambda: list(probe)}, interval=0.05).start()
    proc = subprocess.Popen([sys.executable, "-c", code])
    probe.append(proc.pid)
    assert proc.wait() == 0
    reading = meter.stop()
    assert 0.4 <= reading.groups["probe"] <= 2.0  # 0.4 s of busy loops and two interpreters' start
    assert reading.machine > 0 and reading.loads
    assert {k for k in reading.kinds if k.startswith("probe/")} == {"probe/python"}


def test_the_command_line():
    assert command_line(["--rows", "200000"]) == ".venv/bin/python -m benchmarks.scale_out --rows 200000"
    args = parse_args(["--paths", "sdp,cluster2"])
    assert args.paths == ["sdp", "cluster2"] and args.rows == 5_000_000
    with pytest.raises(SystemExit):
        parse_args(["--paths", "yarn"])


def test_the_workers_cores_are_what_the_run_chose():
    from benchmarks.scale_out.report import workers_text
    from benchmarks.scale_out.runs import cores_per_worker

    assert cores_per_worker(3, 2) == 3  # asked
    assert cores_per_worker(0, 1) == max(1, os.cpu_count() or 1)
    assert cores_per_worker(0, 10_000) == 1  # at least one each
    assert workers_text(META) == "1 core(s)"
    shared = workers_text({**META, "worker_cores": 0, "cpu_count": 2})
    assert shared == (
        "the machine's 2 cores shared out (1 worker of 2 core(s), 2 workers of 1 core(s) each: the task "
        "slots of SDP's local[2])"
    )


def rounds_of_three() -> list[dict[str, dict[str, Run]]]:
    """Three rounds; the 1-worker backlog costs 300, 200 and 150 s (rates 16,667, 25,000, 33,333 rows/s),
    SDP always 100 s (50,000 rows/s)."""
    rounds = []
    for backlog_wall in (340, 240, 190):
        paths = fake_paths()
        del paths["local"], paths["local-exec"], paths["cluster2"]
        paths["cluster1"]["backlog"] = run(backlog_wall, 50, 300, tiering=11.0)
        rounds.append(paths)
    return rounds


def test_the_median_round_of_each_path_is_shown_and_every_round_is_listed():
    from benchmarks.scale_out.report import median_round

    rounds = rounds_of_three()
    assert median_round(rounds)["cluster1"] is rounds[1]["cluster1"]  # 200 s: the middle of 300, 200, 150
    assert median_round(rounds[:2])["cluster1"] is rounds[1]["cluster1"]  # even: the lower middle (200)
    body = report_body(median_round(rounds), META, rounds)
    assert "| Tidehouse cluster, 1 worker | executors | 240.0 | 40.0 | 200.0 |" in body
    assert "Every round (3), in the order run:" in body
    for n, cost, rate, times_sdp in ((1, "300.0", "16,667", "0.33×"), (3, "150.0", "33,333", "0.67×")):
        assert f"| {n} | Tidehouse cluster, 1 worker | {cost} | {rate} | {times_sdp} | 10.0% |" in body
    assert "| 2 | SDP (spark-pipelines, local[2]) | 100.0 | 50,000 | — | — |" in body
    assert "**not met** (each round: 0.33×, 0.50×, 0.67×)." in body
    # every round's driver adds 30 of 300 CPU s: 90 of 900 s together
    pooled = "all 3 rounds together: 10.0% (90.0 of 900.0 s)"
    assert f"— **met** (each round: 10.0%, 10.0%, 10.0%; {pooled})." in body
    one = report_body(rounds[0], META)  # one round: no rounds table, no per-round lists
    assert "Every round" not in one and "each round" not in one


def test_the_pooled_driver_share_sums_every_rounds_cpu_before_dividing():
    from benchmarks.scale_out.report import pooled_share

    rounds = rounds_of_three()
    # round 1's driver adds 130 (150 - 20) of 130 + 270 = 400 s (32.5%); rounds 2 and 3 add 30 of 300 each
    rounds[0]["cluster1"]["backlog"] = run(340, 150, 300, tiering=11.0)
    assert pooled_share(rounds, "cluster1") == "; all 3 rounds together: 19.0% (190.0 of 1,000.0 s)"
    assert pooled_share(rounds[:1], "cluster1") == ""  # one round: nothing to pool
    assert pooled_share(rounds, "cluster2") == ""  # a path no round ran
    body = report_body(rounds[1], META, rounds)
    assert "(each round: 32.5%, 10.0%, 10.0%; all 3 rounds together: 19.0% (190.0 of 1,000.0 s))" in body


def test_results_with_rounds_and_without_load_back(tmp_path):
    from benchmarks.scale_out.cli import dump, saved_rounds

    rounds = rounds_of_three()
    assert saved_rounds({"paths": dump(rounds[0])}) == [rounds[0]]  # a file from before --repeat
    assert saved_rounds({"paths": dump(rounds[1]), "rounds": [dump(r) for r in rounds]}) == rounds
    assert parse_args(["--repeat", "3"]).repeat == 3 and parse_args([]).repeat == 1
    with pytest.raises(SystemExit):
        parse_args(["--repeat", "0"])


@pytest.mark.parametrize("spark", [None, {"master": "spark://127.0.0.1:7077"}])
def test_every_tidehouse_run_starts_its_driver_without_the_class_archive(tmp_path, spark):
    """The backlog run minus the empty run must not count one run making the archive the other one uses."""
    import yaml

    project, _ = tidehouse_project(tmp_path, tmp_path / "input", spark)
    settings = yaml.safe_load((project / "tidehouse.yaml").read_text())
    assert settings["spark"] == {**(spark or {}), "class_archive": False}
    assert "data_path" not in settings.get("materializer", {})  # the default: auto


def test_the_local_executor_path_sets_its_data_path(tmp_path):
    import yaml

    from benchmarks.scale_out import DATA_PATHS, PATHS

    assert DATA_PATHS == {"local-exec": "executors"} and PATHS["local-exec"][1] == 0  # local[*]: no cluster
    project, _ = tidehouse_project(tmp_path, tmp_path / "input", None, DATA_PATHS["local-exec"])
    settings = yaml.safe_load((project / "tidehouse.yaml").read_text())
    assert settings["materializer"]["data_path"] == "executors"
