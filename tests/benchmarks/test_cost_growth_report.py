"""Fast checks of the cost-growth benchmark's figures and report on made-up measurements (no Spark): every
figure it prints is computed from the measured numbers."""

from __future__ import annotations

import pytest

from benchmarks.cost_growth import figures, keys_label, report_body


def mode(strategy: str, batch: list[float], delays: list[float], preload: float = 10.0) -> dict:
    return {"strategy": strategy, "batch_seconds": batch, "hot_delays": delays, "preload_s": preload}


RESULTS = {
    # topn: flat (batch p50 0.2 -> 0.25, delay p50 1.0 -> 1.2); recompute: grows (0.4 -> 4.0, 1.5 -> 6.0)
    1_000_000: {
        "topn": mode("topn", [0.25, 0.3, 0.2], [1.2, 1.3, 1.1], preload=300.0),
        "recompute": mode("recompute", [4.0, 5.0, 3.5], [6.0, 7.5, 5.0], preload=300.0),
    },
    10_000: {
        "topn": mode("topn", [0.1, 0.2, 0.3], [0.9, 1.0, 1.4]),
        "recompute": mode("recompute", [0.4, 0.5, 0.3, 0.4], [1.5, 1.5, 2.0, 1.0]),
    },
    100_000: {
        "topn": mode("topn", [0.2, 0.2], [1.0, 1.2], preload=40.0),
        "recompute": mode("recompute", [1.0, 1.2], [2.0, 2.4], preload=40.0),
    },
}
META = {
    "rounds": 3,
    "warmup": 2,
    "rows": 500,
    "driver_memory": "3g",
    "load_start": 2.04,
    "load_end": 5.56,
    "wall_s": 754.0,
}


def test_figures_medians_maxima_ratios_and_growth():
    f = figures(RESULTS)
    assert f["keys"] == [10_000, 100_000, 1_000_000]
    small = f["rows"][10_000]
    assert small["topn"] == {
        "strategy": "topn",
        "batch_p50": pytest.approx(0.2),
        "batch_max": 0.3,
        "delay_p50": 1.0,
        "delay_max": 1.4,
    }
    assert small["recompute"]["batch_p50"] == pytest.approx(0.4)  # the mean of the middle two
    assert small["recompute"]["delay_p50"] == pytest.approx(1.5)
    assert small["batch_ratio"] == pytest.approx(2.0)
    assert small["delay_ratio"] == pytest.approx(1.5)
    assert small["preload_s"] == 10.0
    middle = f["rows"][100_000]
    assert middle["topn"]["delay_p50"] == pytest.approx(1.1)
    assert middle["recompute"]["batch_p50"] == pytest.approx(1.1)
    assert middle["batch_ratio"] == pytest.approx(5.5)
    assert f["rows"][1_000_000]["batch_ratio"] == pytest.approx(16.0)
    assert f["growth"]["topn"] == {"batch": pytest.approx(1.25), "delay": pytest.approx(1.2), "met": True}
    assert f["growth"]["recompute"] == {
        "batch": pytest.approx(10.0),
        "delay": pytest.approx(4.0),
        "met": False,
    }


def test_growth_misses_the_target_when_either_figure_grows_past_it():
    hot = {k: dict(v) for k, v in RESULTS.items()}
    hot[1_000_000] = {**hot[1_000_000], "topn": mode("topn", [0.25], [1.6])}  # delay 1.6x, batch 1.25x
    assert figures(hot)["growth"]["topn"]["met"] is False
    hot[1_000_000]["topn"] = mode("topn", [0.3], [1.5])  # exactly 1.5x on both: met
    g = figures(hot)["growth"]["topn"]
    assert (g["batch"], g["delay"], g["met"]) == (pytest.approx(1.5), pytest.approx(1.5), True)


@pytest.mark.parametrize(
    ("keys", "label"),
    [(1_000, "1k"), (10_000, "10k"), (50_000, "50k"), (1_000_000, "1M"), (2_500, "2500"), (999, "999")],
)
def test_keys_label(keys, label):
    assert keys_label(keys) == label


def test_report_body_prints_every_figure():
    body = report_body(RESULTS, META)
    lines = body.splitlines()
    assert lines[0].startswith(
        "| DWS keys | preload s | topn batch s p50 / max | topn hot delay s p50 / max |"
    )
    assert (
        lines[2]
        == "| 10,000 | 10.0 | 0.200 / 0.300 | 1.000 / 1.400 | 0.400 / 0.500 | 1.500 / 2.000 | 2.0x | 1.5x |"
    )
    assert (
        lines[3]
        == "| 100,000 | 40.0 | 0.200 / 0.200 | 1.100 / 1.200 | 1.100 / 1.200 | 2.200 / 2.400 | 5.5x | 2.0x |"
    )
    assert lines[4] == (
        "| 1,000,000 | 300.0 | 0.250 / 0.300 | 1.200 / 1.300 | 4.000 / 5.000 | 6.000 / 7.500 | 16.0x | 5.0x |"
    )
    assert lines[6] == (
        "Growth 10k to 1M keys, topn: ADS batch seconds 1.25x, ADS hot delay 1.20x (target <= 1.5x: met)."
    )
    assert lines[7] == (
        "Growth 10k to 1M keys, recompute: ADS batch seconds 10.00x, ADS hot delay 4.00x "
        "(target <= 1.5x: MISSED)."
    )
    assert lines[9] == (
        "3 increments of 500 events on random users per key count and strategy (after 2 warm-ups); "
        "planned strategies: topn -> topn, recompute -> recompute. Preload: the `--until-idle` run over one "
        "event per user (the first key count's includes starting Spark's Python workers). "
        "Spark local[2], driver memory 3g. Load average 2.0 before, 5.6 after; "
        "12.6 min in all."
    )
    assert len(lines) == 10


def test_report_body_names_a_strategy_that_differed_between_key_counts():
    mixed = {k: dict(v) for k, v in RESULTS.items()}
    mixed[100_000] = {**mixed[100_000], "topn": mode("recompute", [0.2, 0.2], [1.0, 1.2])}
    assert "planned strategies: topn -> recompute/topn, recompute -> recompute." in report_body(mixed, META)
