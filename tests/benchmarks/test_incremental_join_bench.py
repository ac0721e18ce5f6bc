"""The join benchmark's executor-path modes (benchmarks/incremental_join.py) on tiny sizes in the session's
Spark: each round's figures are measured and positive; ``join_log_exec`` joins in tasks (rows written under
``<writer>:delta``) and, with TIDEHOUSE_SCALE=full, its baseline ``join_log_exec_driver`` does not."""

from __future__ import annotations

import argparse

import pytest

from benchmarks import incremental_join
from tests._support import scale

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("mode", scale(["join_log_exec"], ["join_log_exec_driver", "join_log_exec"]))
def test_the_executor_modes_measure_each_round(spark, tmp_path, monkeypatch, home, mode):
    monkeypatch.chdir(tmp_path)  # the run changes into its project and sets TIDEHOUSE_HOME: both restored
    monkeypatch.setenv("TIDEHOUSE_HOME", str(home))
    args = argparse.Namespace(orders=300, customers=20, rounds=2, rows=200, touches=2, seed=7)
    res = incremental_join._run(mode, args, spark, tmp_path / "work")
    assert res["strategy"] == "join_log"
    assert len(res["cpu"]) == len(res["wall"]) == len(res["batch_seconds"]) == 2
    assert all(x > 0 for x in res["cpu"] + res["wall"] + res["batch_seconds"])
    assert [r[0] for r in res["rows"]] == [202, 202]  # each round's run: its new orders and touched customers
    assert res["tasks"] == (mode == "join_log_exec")
