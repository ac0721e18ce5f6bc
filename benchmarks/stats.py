"""The one statistics helper of the benchmarks: percentiles, the median and the trend of a delay.

Every p50 / p95 / p99 a benchmark reports comes from :func:`percentile`, with one convention: **linear
interpolation between the two closest ranks** — numpy's default (``method="linear"``), Hyndman & Fan's
definition 7, and what ``statistics.median`` gives at q = 50. Of ``n`` sorted values the q-th percentile sits
at rank ``(n - 1) * q / 100``; a fractional rank is interpolated between its neighbours. So p0 is the
minimum, p100 the maximum, p50 of an even count the mean of the middle two, and a percentile of one value
is that value. A percentile of no values is an error (there is nothing to report), not a NaN.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (``q`` in 0..100) of ``values``, linearly interpolated between closest ranks.

    Raises ``ValueError`` for an empty input or a ``q`` outside 0..100.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(values)
    if not ordered:
        raise ValueError(f"p{q:g} of no values: nothing was measured")
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: Iterable[float]) -> float:
    """The 50th percentile: the middle value, or the mean of the middle two (like ``statistics.median``)."""
    return percentile(values, 50)


def delay_slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of delay over time, in seconds of delay per minute of input.

    ``points`` are ``(written_at, delay)``. A system that keeps up has a slope near 0 (its delay saw-tooths
    around a level); one that falls behind has a positive slope.
    """
    if len(points) < 2:
        return 0.0
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0
    return 60.0 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


def keeps_up(points: Sequence[tuple[float, float]], *, tolerance_s: float = 2.0) -> bool:
    """True if the delay did not grow over the window: the fitted growth across the whole window stays
    within ``tolerance_s`` or half the median delay, whichever is larger (a saw-tooth cut at the window's
    edges fits a small slope of its own; a system falling behind grows by more than its median)."""
    if len(points) < 3:
        return True
    span_min = (max(p[0] for p in points) - min(p[0] for p in points)) / 60.0
    growth = delay_slope(points) * span_min
    return growth <= max(tolerance_s, 0.5 * median(p[1] for p in points))
