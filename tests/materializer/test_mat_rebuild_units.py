"""The writes a micro-batch builds from its inputs' current rows (a new state, a top-N refill) go under
``<writer>:rebuild`` at a ``seq`` no attempt used (:func:`rebuild_seq`), and a state such a write built is
not new to the next process (:meth:`StateTable.ensure`) — the oracle test is test_mat_rebuild_replay.py."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa

from materializer.incremental.common import REBUILD, StateTable, kv_state_rows, rebuild_seq
from materializer.incremental.join import SCHEMA
from runtime.storage import TableMeta, open_store

OUT = pa.schema([pa.field("id", pa.string(), nullable=False), ("n", pa.int64())])


def _context(store, quarantine: str | None = None):
    table = SimpleNamespace(name="ads.t", writer_id="mat:ads.t:1", quarantine=quarantine)
    return SimpleNamespace(store=store, table=table)


def test_each_attempt_gets_a_seq_above_every_earlier_one_and_the_state_it_built_is_not_new(tmp_path):
    store = open_store(str(tmp_path / "hot"))
    store.create_table(TableMeta("ads.t", OUT, "primary_key", ("id",), buckets=2))
    ctx = _context(store)
    state = StateTable(ctx, SCHEMA, ("key",))
    assert state.ensure()  # new
    writer, seq = rebuild_seq(ctx, state)
    assert (writer, seq) == ("mat:ads.t:1" + REBUILD, 1)
    # an attempt killed after its output write: the next one writes under a seq above it, so it applies
    store.write("ads.t", pa.table({"id": ["a", "b"], "n": [1, 2]}, schema=OUT), writer=writer, seq=seq)
    assert rebuild_seq(ctx, state) == (writer, 2)
    again = store.write("ads.t", pa.table({"id": ["a"], "n": [3]}, schema=OUT), writer=writer, seq=2)
    assert not again.skipped
    state.write(kv_state_rows(state, {"p1": b"x"}, []), 2, writer=writer)
    # the next process: the state that write built is the table's state, not a new one to build again
    assert not StateTable(_context(store), SCHEMA, ("key",)).ensure()
    assert rebuild_seq(ctx, state) == (writer, 3)


def test_the_seq_is_above_the_writers_quarantine_writes_too(tmp_path):
    store = open_store(str(tmp_path / "hot"))
    store.create_table(TableMeta("ads.t", OUT, "primary_key", ("id",)))
    quarantine = pa.schema([("raw", pa.string())])
    store.create_table(TableMeta("ads.t__quarantine", quarantine, "log", ()))
    ctx = _context(store, quarantine="ads.t__quarantine")
    state = StateTable(ctx, SCHEMA, ("key",))
    writer, _ = rebuild_seq(ctx, state)
    rows = pa.table({"raw": ["{}"]}, schema=quarantine)
    store.write("ads.t__quarantine", rows, writer=f"{writer}:qe", seq=7)
    assert rebuild_seq(ctx, state) == (writer, 8)  # the state table does not exist yet: it counts nothing
