"""Figures of `flow status` that are computed, not copied: rows/s, and a lake that cannot be opened."""

from __future__ import annotations

import pytest

from materializer.status import RateMeter, open_lake
from runtime.core.errors import ErrorCode, TidehouseError


def test_rows_per_second_is_the_hot_log_growth_over_the_window():
    meter = RateMeter(window_s=10.0)
    assert meter.rate("dwd.t", 100, now=1000.0) is None  # one sample: no rate yet
    assert meter.rate("dwd.t", 150, now=1002.0) == 25.0
    assert meter.rate("dwd.t", 250, now=1004.0) == 37.5  # (250 - 100) / 4 s
    for i in range(3, 12):  # samples older than the window drop out
        meter.rate("dwd.t", 250 + 100 * i, now=1002.0 + 2 * i)
    assert meter.rate("dwd.t", 1450, now=1026.0) == pytest.approx(50.0)
    assert meter.rate("dwd.t", 1450, now=1038.0) == 0.0  # idle: 0.0, not the last busy figure
    assert meter.rate("ads.t", 7, now=1038.0) is None  # tables are measured separately


def test_a_lake_that_cannot_be_opened_is_reported_not_hidden():
    class Project:
        @property
        def lake(self):
            raise TidehouseError(ErrorCode.LAKE_CATALOG, "cannot open the lake catalog: refused")

    lake, error = open_lake(Project())
    assert lake is None and "TH500" in error and "refused" in error
