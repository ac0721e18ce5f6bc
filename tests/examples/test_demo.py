"""The demo's pieces that need no Spark: folder safety, the producer, the per-layer view (fast)."""

from __future__ import annotations

import json

import pytest

from runtime.core.errors import TidehouseError
from runtime.scaffold.demo import MARKER, LiveView, Producer, layer_rows, prepare

SNAPSHOT = {
    "tables": [
        {
            "layer": "ods",
            "hot_rows": 100,
            "tiered_offsets": [60],
            "rows_per_s": 50.0,
            "hot_delay_s": 0.2,
            "lake_delay_s": 4.0,
            "quarantined": 2,
        },
        {
            "layer": "dws",
            "hot_rows": 30,
            "tiered_offsets": [10, 5],
            "rows_per_s": 5.5,
            "hot_delay_s": 1.5,
            "lake_delay_s": None,
            "quarantined": 0,
        },
        {
            "layer": "dws",
            "hot_rows": 7,
            "tiered_offsets": None,
            "rows_per_s": None,
            "hot_delay_s": 2.5,
            "lake_delay_s": 9.0,
            "quarantined": 0,
        },
    ]
}


def test_layer_rows_sum_counts_and_take_the_worst_delay():
    rows = {r["layer"]: r for r in layer_rows(SNAPSHOT)}
    assert list(rows) == ["ods", "dws"]
    assert rows["dws"] == {
        "layer": "dws",
        "tables": 2,
        "hot_rows": 37,
        "lake_rows": 15,
        "rows_per_s": 5.5,
        "hot_delay_s": 2.5,
        "lake_delay_s": 9.0,
        "quarantined": 0,
    }
    assert rows["ods"]["quarantined"] == 2 and rows["ods"]["lake_rows"] == 60


def test_plain_view_prints_one_line_per_interval():
    lines: list[str] = []
    view = LiveView(lines.append, tty=False, every_s=3600)
    with view:
        view(SNAPSHOT)
        view(SNAPSHOT)  # within the interval: not printed again
    assert len(lines) == 1
    assert "ods: 100 rows, 50.0 rows/s, hot delay 0.20s, lake delay 4.0s, 2 quarantined" in lines[0]
    assert "dws: 37 rows" in lines[0]
    lines.clear()
    quiet = {"tables": [dict(SNAPSHOT["tables"][0], hot_rows=0, hot_delay_s=None, lake_delay_s=None)]}
    with LiveView(lines.append, tty=False, every_s=3600) as view:
        view(quiet)
    assert "ods: 0 rows, 50.0 rows/s, hot delay -, lake delay -" in lines[0]  # nothing measured: not "-s"


def test_producer_writes_one_part_per_step_then_stops(tmp_path):
    producer = Producer(tmp_path / "events", rate=50, seconds=4, seed=3)
    steps = 0
    while producer.write_next():
        steps += 1
    assert steps == len(producer.chunks) >= 4
    parts = sorted((tmp_path / "events").glob("part-*.json"))
    assert [p.name for p in parts] == [f"part-{i:05d}.json" for i in range(steps)]
    good = 0
    for part in parts:
        for line in part.read_text().splitlines():
            try:
                json.loads(line)
                good += 1
            except ValueError:
                pass
    assert good >= 190


def test_prepare_wipes_only_its_own_folder(tmp_path):
    mine = prepare(tmp_path / "demo")
    assert (mine / MARKER).is_file() and (mine / "tidehouse.yaml").is_file()
    (mine / "data" / "events").mkdir(parents=True)
    (mine / "data" / "events" / "old.json").write_text("{}\n")
    prepare(mine)
    assert not (mine / "data" / "events" / "old.json").exists(), "a new demo starts from scratch"

    other = tmp_path / "precious"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(TidehouseError) as info:
        prepare(other)
    assert info.value.code.value == "TH100"
    assert (other / "notes.txt").read_text() == "keep me"
