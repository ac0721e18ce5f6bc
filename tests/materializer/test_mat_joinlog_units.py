"""The executor path's join_log tasks without Spark (materializer.incremental.joinlog, routing): a task adds
the log rows outside the batch's touched partitions to the join state as chunks, folds a partition with
MAX_CHUNKS chunks, writes nothing twice for a replayed batch; another reads a partition's primary-key rows
from the state; a write task refuses a key produced twice or held with other values, as the driver path; a
replay of a batch whose driver step wrote the state takes the partitions its first attempt recorded."""

from __future__ import annotations

import dataclasses
import pickle

import pyarrow as pa
import pytest

from materializer.incremental.join import MAX_CHUNKS, SCHEMA, Change, Partitioner, partition_of
from materializer.incremental.joinfacts import EquiJoin
from materializer.incremental.joinlog import PART, TOUCHED, KeyedRows, LogRows, _touched
from materializer.incremental.joinsides import ROW
from materializer.routing import UniqueCheck
from runtime.spark.options import Place
from runtime.storage.api import TableMeta

STATE = "ads.j__state"
LOG_DDL = "id bigint, k string"
PARTS = Partitioner(EquiJoin("inner", "e", "d", (("k", "k"),)), {"l": (ROW,), "r": ("k",)}, frozenset("l"))


def log_rows(ids: list[int], k: str) -> list[pa.RecordBatch]:
    """A task's input: log rows of join key ``k`` as :class:`~materializer.incremental.joinlog.Tagger` gives
    them (their place in the log is their id)."""
    rows = [f"0:{i}" for i in ids]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "k": [k] * len(ids),
            ROW: rows,
            PART: [partition_of((k,), "l", repr((r,))) for r in rows],
        }
    ).to_batches()


@pytest.fixture
def place(tmp_path):
    place = Place(str(tmp_path / "hot"))
    place.store().create_table(TableMeta(STATE, SCHEMA, "primary_key", ("key",), buckets=1))
    return place


def state(place) -> dict[str, object]:
    rows = place.store().scan(STATE)
    return dict(zip(rows.column("key").to_pylist(), map(pickle.loads, rows.column("value").to_pylist())))


def run(place, batches, seq: int) -> int:
    task = LogRows(place, STATE, PARTS, "l", LOG_DDL, "w:delta", seq)
    (report,) = list(task(iter(batches)))
    return report.column("n")[0].as_py()


def test_log_rows_add_chunks_then_fold_a_partition_and_skip_a_replay(place):
    part = partition_of(("a",), "l", "")
    for seq in range(MAX_CHUNKS):
        assert run(place, log_rows([seq], "a"), seq) == 2  # a chunk and the partition's chunk list
    held = state(place)
    assert len(held[f"xl{part}"]) == MAX_CHUNKS and f"pl{part}" not in held
    assert run(place, log_rows([MAX_CHUNKS - 1], "a"), MAX_CHUNKS - 1) == 0  # a replay: nothing written
    run(place, log_rows([100, 101], "a"), MAX_CHUNKS)  # the 33rd: folded into the partition's entry
    held = state(place)
    assert set(held) == {f"pl{part}"}
    assert sorted(r["id"] for r in held[f"pl{part}"].values()) == [*range(MAX_CHUNKS), 100, 101]


def test_keyed_rows_are_the_partitions_rows_in_the_state(place):
    dim = {repr((k,)): {"k": k, "tier": t} for k, t in (("a", "gold"), ("b", "basic"))}
    rows = {f"pr{partition_of((r['k'],), 'r', '')}": {key: r} for key, r in dim.items()}
    place.store().write(
        STATE,
        pa.table({"key": list(rows), "value": [pickle.dumps(v) for v in rows.values()]}),
        writer="w",
        seq=0,
    )
    parts = [partition_of((k,), "l", "") for k in ("a", "c")] + ["nl('0:1',)"]  # c: none; a NULL key: none
    task = KeyedRows(place, STATE, "r", "k string, tier string")
    out = pa.Table.from_batches(list(task(iter([pa.record_batch({PART: parts})]))))
    assert out.to_pylist() == [{"k": "a", "tier": "gold"}]


def test_write_task_refuses_a_key_twice_or_held_with_other_values(tmp_path):
    store = Place(str(tmp_path / "hot")).store()
    schema = pa.schema([("item", pa.string()), ("v", pa.int64())])
    store.create_table(TableMeta("ads.out", schema, "primary_key", ("item",), buckets=2))
    store.write("ads.out", pa.table({"item": ["x"], "v": [1]}), writer="w", seq=0)
    check = UniqueCheck("act@1", "join key values", "dup hint", "entering hint")

    def refusal(items, values):
        return check.refusal(
            store, "ads.out", ("item",), pa.table({"item": items, "v": values}, schema=schema)
        )

    assert refusal(["x", "y"], [1, 2]) is None  # x as held (a replay's own write), y new
    twice = refusal(["y", "y"], [1, 2])
    assert twice["reason"] == "table ads.out: the SQL of act@1 yields several rows for primary key ('y',)"
    assert twice["name"] == "dup hint"
    held = refusal(["x"], [5])
    assert held["reason"] == (
        "table ads.out: the SQL of act@1 yields rows with primary key ('x',) for two join key values"
    )
    assert held["name"] == "entering hint"
    # x as held, but the driver's step produced it in this batch too: twice, as the driver path finds it
    check = dataclasses.replace(check, taken=frozenset({("x",), ("z",)}))
    taken = refusal(["y", "x"], [2, 1])
    assert taken["reason"] == "table ads.out: the SQL of act@1 yields several rows for primary key ('x',)"
    assert taken["name"] == "dup hint"
    assert refusal(["y"], [2]) is None


class _State:
    """A join's state as :func:`~materializer.incremental.joinlog._touched` reads it (``load``)."""

    def __init__(self, entries: dict[str, object]) -> None:
        self.entries = entries

    def load(self, keys: list[str]) -> dict[str, object]:
        return {k: self.entries[k] for k in keys if k in self.entries}


def test_a_replay_after_the_state_write_takes_the_partitions_the_first_attempt_recorded():
    # u1 moves from partition A to B in batch 7: T is {A, B} (its home, and the partition it enters)
    change = Change({"u1": ("B", {"k": "b"})}, ["u1"])
    before = _State({"hru1": "A", TOUCHED: (6, ["C"])})
    assert _touched(before, "r", change, 7) == {"A", "B"}  # batch 6's record does not apply
    # (2) wrote the state (u1's home is B now, T recorded), then the driver died: the replay of batch 7
    after = _State({"hru1": "B", TOUCHED: (7, ["A", "B"])})
    assert _touched(after, "r", change, 7) == {"A", "B"}
    assert _touched(_State({"hru1": "B"}), "r", change, 7) == {"B"}  # without the record: A would be missing
    assert _touched(after, "r", None, 7) == set()  # no primary-key change: no T
