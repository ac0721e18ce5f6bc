"""A full refresh after retention: the rebuilt tables read their inputs' history from the lake, the Iceberg
table is kept (an empty snapshot, then new data: time travel still works), and a flow that reads a rebuilt
table from another flow is told instead of silently skipping rows."""

from __future__ import annotations

import random
import time

import pytest

from runtime.core.errors import ErrorCode, TidehouseError
from tests.materializer._flowkit import (
    canon,
    make_events,
    oracle,
    oracle_connection,
    write_batch,
    write_project,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ITEMS = """/*---
name: t_items
description: events per item
inputs: [events]
---*/
SELECT item_id, count(*) AS n FROM events GROUP BY item_id
"""
READER = """flow: reader
trigger: 100ms
layers:
  dws:
    items: {action: t_items, inputs: {events: dwd.clicks}, primary_key: [item_id]}
"""
ITEMS_ORACLE = (
    "SELECT item_id, count(*) AS n FROM raw WHERE lower(event_type) IN ('click', 'view', 'buy') "
    "AND price >= 1.0 GROUP BY item_id"
)


def test_a_full_refresh_after_retention_keeps_the_lake_table_and_tells_readers_in_other_flows(
    spark, project_dir, seed
):
    from runtime.project import Project

    (project_dir / "tidehouse.yaml").write_text("storage:\n  retention: 1s\n  segment_bytes: 2048\n")
    path = write_project(project_dir)
    (project_dir / "actions" / "t_items.sql").write_text(ITEMS)
    reader_path = project_dir / "flows" / "reader.yaml"
    reader_path.write_text(READER)
    rng = random.Random(seed)
    lines: list[str] = []
    project = Project.open()
    try:
        for run in range(2):  # two runs: the second one's final tiering trims what the first one wrote
            batch = make_events(rng, 300, users=20, bad=1)
            lines += batch
            write_batch(project_dir, f"part-{run}", batch)
            project.trigger(path if run == 0 else "testflow", until_idle=True, spark=spark)
            time.sleep(1.3)
        project.trigger(reader_path, until_idle=True, spark=spark)
        assert min(project.store.start_offsets("ods.clicks")) > 0, "retention trimmed nothing: proves nothing"

        lake = project.lake.load("dwd.clicks")
        uuid, before = lake.metadata.table_uuid, lake.current_snapshot().snapshot_id
        rows_before = lake.scan().to_arrow().num_rows
        project.trigger("testflow", until_idle=True, spark=spark, full_refresh=["dwd.clicks"])

        expected = oracle(lines)
        for table in ("ods.clicks", "dwd.clicks", "dws.user_activity", "ads.top_users"):
            assert canon(project.query(f"SELECT * FROM {table}")) == expected[table], f"hot {table}"
            assert canon(project.lake.load(table).scan().to_arrow()) == expected[table], f"lake {table}"
        lake = project.lake.load("dwd.clicks")
        assert lake.metadata.table_uuid == uuid, "the Iceberg table was dropped and created again"
        assert lake.scan(snapshot_id=before).to_arrow().num_rows == rows_before  # time travel still works
        refresh = [s for s in lake.snapshots() if (s.summary or {}).get("tidehouse.refresh") == "full"]
        assert len(refresh) == 1

        with pytest.raises(TidehouseError) as info:  # dws.items of another flow read the old dwd.clicks
            project.trigger("reader", until_idle=True, spark=spark)
        assert info.value.code is ErrorCode.PLAN_CHANGED and "dwd.clicks was rebuilt" in info.value.message
        project.trigger("reader", until_idle=True, spark=spark, full_refresh=["dws.items"])
        items = canon(oracle_connection(lines).sql(ITEMS_ORACLE).to_arrow_table())
        assert canon(project.query("SELECT * FROM dws.items")) == items
    finally:
        project.close()
