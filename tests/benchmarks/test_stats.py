"""The benchmarks' one statistics helper: percentiles by linear interpolation, the median, the delay trend."""

from __future__ import annotations

import random
import statistics

import numpy as np
import pytest

from benchmarks.stats import delay_slope, keeps_up, median, percentile


@pytest.mark.parametrize(
    "values, q, expected",
    [
        ([5.0], 0, 5.0),  # one value: every percentile is that value
        ([5.0], 50, 5.0),
        ([5.0], 99, 5.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),  # even count: the mean of the middle two
        ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
        ([10.0, 0.0, 20.0], 95, 19.0),  # unsorted input; rank 1.9 between 10 and 20
        (list(range(1, 101)), 99, 99.01),  # rank 98.01: not the nearest rank (99 or 100)
        ((x for x in (3.0, 1.0, 2.0)), 50, 2.0),  # any iterable
    ],
)
def test_percentile_interpolates_linearly_between_closest_ranks(values, q, expected):
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_matches_numpy_default_on_random_samples(seed):
    rnd = random.Random(seed)
    for _ in range(50):
        values = [rnd.uniform(0, 100) for _ in range(rnd.randrange(1, 40))]
        q = rnd.choice([50, 95, 99, rnd.uniform(0, 100)])
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))  # method="linear"


def test_median_is_statistics_median(seed):
    rnd = random.Random(seed)
    for n in (1, 2, 3, 10, 11):
        values = [rnd.uniform(-5, 5) for _ in range(n)]
        assert median(values) == pytest.approx(statistics.median(values))


@pytest.mark.parametrize("q", [-0.1, 100.5, 101])
def test_a_percentile_outside_0_to_100_is_refused(q):
    with pytest.raises(ValueError, match=r"within 0\.\.100"):
        percentile([1.0, 2.0], q)


def test_no_values_is_an_error_not_a_nan():
    with pytest.raises(ValueError, match="p99 of no values"):
        percentile([], 99)
    with pytest.raises(ValueError, match="p50 of no values"):
        median(iter(()))


def test_flat_sawtooth_keeps_up_and_a_growing_delay_does_not():
    # SDP-like saw-tooth: delay cycles 5..45 s every 40 s, no trend
    flat = [(t, 5 + (t % 40)) for t in range(0, 240, 4)]
    assert abs(delay_slope(flat)) < 2.0
    assert keeps_up(flat)
    # falling behind: +3 s of delay per 10 s of input = 18 s per minute
    growing = [(t, 2 + 0.3 * t) for t in range(0, 120, 2)]
    assert delay_slope(growing) == pytest.approx(18.0)
    assert not keeps_up(growing)


def test_too_few_points_have_no_trend():
    assert delay_slope([]) == delay_slope([(1.0, 5.0)]) == 0.0
    assert delay_slope([(1.0, 5.0), (1.0, 9.0)]) == 0.0  # one instant: no slope to fit
    assert keeps_up([(0.0, 1.0), (60.0, 100.0)])  # two points: nothing to judge
