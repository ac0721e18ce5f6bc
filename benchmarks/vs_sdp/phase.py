"""One measured phase (a system in one mode) and its figures: delay summaries, trend, catch-up cost."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from benchmarks.stats import delay_slope, keeps_up, median, percentile
from benchmarks.vs_sdp.prober import Observation


@dataclass(frozen=True)
class Summary:
    """p50 / p95 / max of one delay series (``benchmarks.stats.percentile``); NaN figures when ``n`` is 0."""

    n: int
    p50: float
    p95: float
    max: float
    unseen: int = 0  # probes never seen: counted at the time the run ended (a lower bound of their delay)

    @classmethod
    def of(cls, delays: Sequence[float], unseen: Sequence[float] = ()) -> Summary:
        values = [*delays, *unseen]
        if not values:
            return cls(0, math.nan, math.nan, math.nan)
        return cls(len(values), percentile(values, 50), percentile(values, 95), max(values), len(unseen))


@dataclass
class CatchUp:
    """A burst of ``rows`` written from ``began`` on, a marker right after it at ``written``, and when that
    marker was first visible in the ADS table (``seen``; None if not within the wait)."""

    rows: int
    began: float
    written: float
    seen: float | None
    peak_rss: int = 0  # resident memory of the system during the catch-up

    def to_json(self) -> dict:
        return {
            "rows": self.rows,
            "began": self.began,
            "written": self.written,
            "seen": self.seen,
            "peak_rss": self.peak_rss,
        }


@dataclass
class Phase:
    name: str  # e.g. "SDP loop", "Tidehouse T=5s"
    rate: int
    probes: dict[str, float]
    observations: dict[str, Observation]
    peak_rss: int
    rows: int
    seconds: float
    runs: list[tuple[float, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    load: float | None = None  # mean 1-minute load average of the machine during the run
    ended: float = 0.0  # epoch seconds when measuring stopped
    catchup: CatchUp | None = None

    def summary(self, label: str) -> Summary:
        """Delays of one series; a probe never seen counts with the time it waited until the run ended, so
        percentiles are never flattered by dropping the slowest probes."""
        seen = self.observations[label].seen
        end = self.ended or max((t for o in self.observations.values() for t in o.seen.values()), default=0.0)
        unseen = [end - t for m, t in self.probes.items() if m not in seen]
        return Summary.of(self.observations[label].delays(self.probes), unseen)

    def lag(self, layer: str) -> Summary:
        """How far a Tidehouse lake table was behind its hot table: per probe, lake visibility minus hot
        visibility (the brief's "lake delay", bounded by one tiering cycle at any depth)."""
        hot, lake = self.observations[f"{layer} hot"].seen, self.observations[f"{layer} lake"].seen
        return Summary.of([lake[m] - hot[m] for m in self.probes if m in hot and m in lake])

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "rate": self.rate,
            "probes": self.probes,
            "peak_rss": self.peak_rss,
            "rows": self.rows,
            "seconds": self.seconds,
            "runs": self.runs,
            "errors": self.errors,
            "load": self.load,
            "ended": self.ended,
            "catchup": self.catchup.to_json() if self.catchup else None,
            "seen": {label: obs.seen for label, obs in self.observations.items()},
        }

    @classmethod
    def from_json(cls, d: dict) -> Phase:
        obs = {label: Observation(label, dict(seen)) for label, seen in d["seen"].items()}
        catchup = CatchUp(**d["catchup"]) if d.get("catchup") else None
        return cls(
            d["name"],
            d["rate"],
            d["probes"],
            obs,
            d["peak_rss"],
            d["rows"],
            d["seconds"],
            [tuple(r) for r in d["runs"]],
            d["errors"],
            d.get("load"),
            d.get("ended", 0.0),
            catchup,
        )

    def keeps_up(self, label: str) -> bool | None:
        points = self.observations[label].points(self.probes)
        return keeps_up(points) if len(points) >= 3 else None

    def slope(self, label: str) -> float:
        return delay_slope(self.observations[label].points(self.probes))

    @property
    def ads(self) -> str:
        """The label of this run's ADS delay series (SDP's table, or Tidehouse's hot table)."""
        return "ADS SDP" if self.name.startswith("SDP") else "ADS hot"

    def steady_runs(self) -> list[tuple[float, float]]:
        """The runs (SDP) that ended before the catch-up burst."""
        return [(s, e) for s, e in self.runs if not self.ended or e <= self.ended]

    def catchup_cost(self) -> tuple[float, float] | None:
        """Seconds of work the burst added before its marker reached ADS, and ± how far the steady run's own
        variation could move that figure; None if not measured.

        Tidehouse (one long-running process): the marker's ADS delay counted from the start of the burst,
        minus the run's median ADS hot delay; ± its steady p95 - p50. SDP (triggered runs): the summed
        excess over the median duration of the steady runs (warm-up run excluded) of every run that
        overlapped the burst, from the one in progress when the burst began to the one that made the marker
        visible; ± half the spread of the steady runs' durations per overlapping run. Both count the time
        the burst took to write as work (conservative).
        """
        c = self.catchup
        if c is None or c.seen is None:
            return None
        if self.name.startswith("SDP"):
            steady = [e - s for s, e in self.steady_runs()[1:]]  # the first run is the warm-up
            if not steady:
                return None
            typical = median(steady)
            overlapping = [e - s for s, e in self.runs if e > c.began and s < c.seen]
            return (sum(d - typical for d in overlapping), len(overlapping) * (max(steady) - min(steady)) / 2)
        steady = self.summary(self.ads)
        return (c.seen - c.began) - steady.p50, steady.p95 - steady.p50

    def catchup_rate(self) -> tuple[float, float, float] | None:
        """Rows per second the system worked off while behind — the burst's rows over the time they cost —
        and the low and high ends of its range (``inf`` when the cost may be zero). As long as the input
        rate stays below it, a backlog shrinks, so it estimates the highest input rate the system holds
        without a growing delay (from above: big batches are cheaper per row than the small batches of a
        steady stream)."""
        measured = self.catchup_cost()
        if measured is None or self.catchup is None:
            return None
        rows, (cost, noise) = self.catchup.rows, measured

        def rate(seconds: float) -> float:
            return rows / seconds if seconds > 0 else math.inf

        return rate(cost), rate(cost + noise), rate(cost - noise)
