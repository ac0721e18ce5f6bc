"""The tiering service: per-table interval jobs, parallel across tables, never overlapping one table,
never silently dropping a run, and one table's failures never stopping the others."""

from __future__ import annotations

import threading
import time
from itertools import pairwise

import pytest

import runtime.lake.scheduler as scheduler_module
from runtime.core.errors import ErrorCode, TidehouseError
from runtime.lake.scheduler import TieringService, wait_until
from runtime.lake.state import lake_offsets
from runtime.lake.tiering import CycleResult
from runtime.storage.api import TableMeta
from tests.lake._lakekit import CLICKS, clicks
from tests.lake.memstore import MemoryTableStore


@pytest.fixture
def mem():
    store = MemoryTableStore()
    for name in ("ods.a", "ods.b"):
        store.create_table(TableMeta(name, CLICKS))
    return store


def test_service_tiers_every_table_on_its_interval(mem, lake):
    service = TieringService((mem, lake), {"ods.a": 0.2, "ods.b": 0.3})
    with service:
        for seq in range(3):
            mem.write("ods.a", clicks(5, seq * 5), writer="w", seq=seq)
            mem.write("ods.b", clicks(2, seq * 2), writer="w", seq=seq)
            assert wait_until(
                lambda: all(
                    lake.exists(n) and lake_offsets(lake.load(n), 1)[0] == mem.end_offsets(n)
                    for n in ("ods.a", "ods.b")
                ),
                timeout=20,
            )
    stats = service.summary()
    assert stats["ods.a"]["commits"] == 3 and stats["ods.b"]["commits"] == 3
    assert stats["ods.a"]["errors"] == 0 and not service.running


def test_no_overlap_and_no_silent_drop_when_a_cycle_is_slower_than_its_interval(mem, lake, monkeypatch):
    active: dict[str, int] = {"ods.a": 0, "ods.b": 0}
    peak: dict[str, int] = {"ods.a": 0, "ods.b": 0}
    lock = threading.Lock()
    spans: dict[str, list[tuple[float, float]]] = {"ods.a": [], "ods.b": []}

    def slow_cycle(store, lake_, name, **_):
        began = time.monotonic()
        with lock:
            active[name] += 1
            peak[name] = max(peak[name], active[name])
        time.sleep(0.35)  # longer than the 0.3 s interval
        with lock:
            active[name] -= 1
            spans[name].append((began, time.monotonic()))
        return CycleResult(name, 0, 0.35, False, None, (0,), (0,), 0.0, 0.0)

    monkeypatch.setattr(scheduler_module, "tier_table", slow_cycle)
    service = TieringService((mem, lake), {"ods.a": 0.3, "ods.b": 0.3})
    started = time.monotonic()
    with service:
        time.sleep(1.6)
        running = time.monotonic() - started  # not the stop, which waits for the cycles under way: on a busy
        # machine (CI's Python matrix runs at the lowest priority) that wait took 0.8 s more than a cycle
    assert peak == {"ods.a": 1, "ods.b": 1}  # one table never runs twice at once
    for name in ("ods.a", "ods.b"):  # back to back: a run that fires during the last one starts when it ends
        runs = sorted(spans[name])
        cycle = sum(end - began for began, end in runs) / len(runs)  # 0.35 s, or 0.45 s on a busy machine
        gaps = sorted(nxt[0] - end for (_, end), nxt in pairwise(runs))
        # a scheduler that drops the fire (APScheduler's max_instances=1) waits for the next one: 0.25 s
        assert gaps[len(gaps) // 2] < 0.15, (name, gaps)
        assert service.stats[name].runs >= max(3, int(running / cycle) - 1), (spans, service.summary())


def test_a_failing_table_does_not_stop_the_others(mem, lake):
    errors = []
    service = TieringService(
        (mem, lake), {"ods.a": 0.1, "ods.missing": 0.1}, on_error=lambda t, e: errors.append(t)
    )
    mem.write("ods.a", clicks(3), writer="w", seq=0)
    with service:
        assert wait_until(
            lambda: service.stats["ods.missing"].errors >= 3 and service.stats["ods.a"].commits == 1,
            timeout=20,
        )
    assert "TH300" in service.stats["ods.missing"].last_error and set(errors) == {"ods.missing"}
    report = service.run_all_now()
    assert "TH300" in report.errors["ods.missing"] and not report.results["ods.a"].committed
    assert "ods.missing" not in report.results
    with pytest.raises(TidehouseError) as info:
        report.raise_for_errors()
    assert info.value.code is ErrorCode.TIERING_FAILED and "ods.missing" in info.value.message


def test_run_soon_tiers_in_the_background_and_the_final_cycle_finds_the_lake_caught_up(mem, lake):
    """``--until-idle`` tiers a drained generation while the next ones run: the cycle is in the background,
    and run_all_now afterwards waits for it and has nothing left to write."""
    mem.write("ods.a", clicks(7), writer="w", seq=0)
    service = TieringService((mem, lake), {"ods.a": 30, "ods.b": 30})
    try:
        service.run_soon(["ods.a"])
        assert wait_until(lambda: service.stats["ods.a"].commits == 1, timeout=20)
        assert service.stats["ods.b"].runs == 0  # only what was asked
        report = service.run_all_now()
    finally:
        service.stop()
    assert not report.results["ods.a"].committed  # caught up already
    assert lake_offsets(lake.load("ods.a"), 1)[0] == mem.end_offsets("ods.a")
    assert service.stats["ods.a"].runs == 2 and service.stats["ods.a"].errors == 0


def test_run_soon_queues_one_cycle_per_table_that_has_not_started(mem, lake):
    service = TieringService((mem, lake), {"ods.a": 30, "ods.b": 30}, max_workers=1)
    blocker = service.stats["ods.a"].lock
    blocker.acquire()  # the one worker takes ods.a's cycle and waits on its lock...
    try:
        service.run_soon(["ods.a"])
        assert wait_until(lambda: not service._pending, timeout=20)
        service.run_soon(["ods.b"])  # ...so ods.b's cycle is queued, and asking again queues no other
        service.run_soon(["ods.b"])
    finally:
        blocker.release()
    try:
        assert wait_until(lambda: service.stats["ods.b"].runs >= 1, timeout=20)
        time.sleep(0.3)
    finally:
        service.stop()
    assert service.stats["ods.a"].runs == 1 and service.stats["ods.b"].runs == 1
