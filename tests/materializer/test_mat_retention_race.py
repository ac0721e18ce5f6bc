"""Retention trimming a primary-key input's changelog *during* a micro-batch's read, after the batch asked
whether it fell behind retention and was told no (materializer.guard).

The race is real: the tiering of another flow (or of the same run) trims whenever a cycle commits. Here the
reader's check answers as it would have a moment before the trim (its first answer per batch is "not
behind"), while the store really is trimmed under the batch. The batch's read fails with ChangelogTrimmed;
the batch must run again and resync (a ``changelog`` table, on the driver and in a Spark task; a ``topn``
table, whose incremental state reads in the driver on both paths), and the tables equal the oracle.
Before the fix the flow failed with ``TH308 ... were deleted by retention`` (CI, 2026-11-30). CI runs the
executor path (a task's error, matched by its class name, and the ``topn`` read in the driver);
TIDEHOUSE_SCALE=full runs the driver path too.
"""

from __future__ import annotations

import random
import time

import pytest

from tests._support import scale
from tests.materializer._flowkit import (
    ORACLE,
    canon,
    flow_head,
    make_events,
    oracle_connection,
    write_batch,
    write_project,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

READER = """flow: reader
trigger: 100ms
layers:
  ads:
    low_users: {action: t_small, inputs: {activity: dws.user_activity}, primary_key: [user_id]}
    top_users: {action: t_top, inputs: {activity: dws.user_activity}, primary_key: [rank]}
"""


def _stale_first_answer(monkeypatch) -> dict:
    """Make every binding of ``behind_retention`` answer "not behind" the first time a batch asks (as the
    answer read before a trim), the truth afterwards; returns the questions asked per (table, batch)."""
    import materializer.executors
    import materializer.incremental.common
    import materializer.strategies

    real = materializer.strategies.behind_retention
    asked: dict[tuple[str, int], int] = {}

    def stale(ctx, inp, batch_id):
        key = (ctx.table.name, int(batch_id))
        asked[key] = asked.get(key, 0) + 1
        return False if asked[key] == 1 else real(ctx, inp, batch_id)

    for module in (materializer.strategies, materializer.executors, materializer.incremental.common):
        monkeypatch.setattr(module, "behind_retention", stale)
    return asked


def test_a_changelog_trimmed_during_the_read_resyncs_the_batch(
    spark, project_dir, data_path, monkeypatch, seed
):
    from runtime.project import Project

    if data_path == "driver" and scale(
        True, False
    ):  # CI's time: the executor path's run covers the guard too
        pytest.skip("TIDEHOUSE_SCALE=full: the driver path (CI runs the executor path, ~23 s each)")
    with open(project_dir / "tidehouse.yaml", "a") as settings:  # after the data_path fixture's
        settings.write("storage:\n  retention: 1s\n  segment_bytes: 2048\n")
    path = write_project(project_dir, flow_head("the producer (ods, dwd and a primary-key dws table)"))
    reader = project_dir / "flows" / "reader.yaml"
    reader.write_text(READER)
    rng = random.Random(seed)
    lines: list[str] = []
    project = Project.open()
    try:
        for part in range(3):
            more = make_events(rng, 80, users=12, bad=0)
            lines += more
            write_batch(project_dir, f"part-{part}", more)
            project.trigger(path if part == 0 else "testflow", until_idle=True, spark=spark)
            if part == 0:
                project.trigger(reader, until_idle=True, spark=spark)
                read = project.store.end_offsets("dws.user_activity")
            if part < 2:
                time.sleep(1.5)  # older than storage.retention: the next final tiering cycle may trim them
        firsts = project.store.start_offsets("dws.user_activity")
        assert any(f > r for f, r in zip(firsts, read)), f"nothing trimmed past the reader: {firsts} {read}"

        asked = _stale_first_answer(monkeypatch)
        project.trigger("reader", until_idle=True, spark=spark)
        for table in ("ads.low_users", "ads.top_users"):
            assert any(n >= 2 for (t, _), n in asked.items() if t == table), (table, asked)  # ran again
        assert project.plan("reader", spark=spark).table("ads.top_users").strategy == "topn"
        assert project.plan("reader", spark=spark).table("ads.low_users").strategy == "changelog"
        con = oracle_connection(lines)
        for table in ("dws.user_activity", "ads.low_users", "ads.top_users"):
            want = canon(con.sql(ORACLE[table]).to_arrow_table())
            assert canon(project.query(f"SELECT * FROM {table}")) == want, f"hot {table}"
            assert canon(project.lake.load(table).scan().to_arrow()) == want, f"lake {table}"
    finally:
        project.close()
