"""Retention trims the hot log once it is tiered; a table recomputed over a log input must still see every
row.

The scenario of the no-silent-failures issue: ``storage.retention`` of a second, tiny segments, a primary-key
table with a ``count(DISTINCT)`` over a log input (``recompute`` on the executor data path, ``agg_log`` on the
driver path), three ``--until-idle`` runs with more input each (and a top-N over it, kept incrementally).
Every hot and lake table must equal the batch oracle: the recompute reads the lake below the hot log's first
offsets, and the queries' state tables, trimmed by age, keep their state.
"""

from __future__ import annotations

import random
import time

import pytest

from runtime.core.literals import is_internal_table
from tests.materializer._flowkit import ACTIONS, canon, make_events, oracle_connection, write_batch

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DISTINCT_USERS = """/*---
name: t_item_users
description: distinct users and events per item, recomputed
inputs: [events]
---*/
SELECT item_id AS item, count(DISTINCT user_id) AS users, count(*) AS n FROM events GROUP BY item_id
"""

TOP_ITEMS = """/*---
name: t_top_items
description: the 3 items with the most users, kept incrementally (topn)
inputs: [items]
---*/
SELECT rk, item, users FROM (
  SELECT item, users, ROW_NUMBER() OVER (ORDER BY users DESC, item) AS rk FROM items
) WHERE rk <= 3
"""

FLOW = """flow: retained
trigger: 100ms
sources:
  clicks:
    format: json
    path: data/clicks
    schema: "user_id string, event_type string, item_id string, price double, ts timestamp"
layers:
  ods:
    clicks: {action: t_ingest, inputs: {raw: clicks}}
  dws:
    item_users:
      action: t_item_users
      inputs: {events: ods.clicks}
      primary_key: [item]
  ads:
    top_items:
      action: t_top_items
      inputs: {items: dws.item_users}
      primary_key: [rk]
"""

ORACLE = {
    "ods.clicks": "SELECT user_id, event_type, item_id, price, ts FROM raw",
    "dws.item_users": "SELECT item_id AS item, count(DISTINCT user_id) AS users, count(*) AS n FROM raw "
    "GROUP BY item_id",
    "ads.top_items": "SELECT rk, item, users FROM (SELECT item, users, ROW_NUMBER() OVER (ORDER BY users "
    "DESC, item) AS rk FROM (SELECT item_id AS item, count(DISTINCT user_id) AS users FROM raw GROUP BY "
    "item_id)) WHERE rk <= 3",
}


def test_a_recompute_over_a_log_trimmed_by_retention_sees_every_row(spark, project_dir, data_path, seed):
    from runtime.project import Project

    with open(project_dir / "tidehouse.yaml", "a") as settings:  # after the data_path fixture's
        settings.write("storage:\n  retention: 1s\n  segment_bytes: 2048\n")
    (project_dir / "actions" / "t_ingest.sql").write_text(ACTIONS["t_ingest.sql"])
    (project_dir / "actions" / "t_item_users.sql").write_text(DISTINCT_USERS)
    (project_dir / "actions" / "t_top_items.sql").write_text(TOP_ITEMS)
    path = project_dir / "flows" / "retained.yaml"
    path.write_text(FLOW)
    (project_dir / "data" / "clicks").mkdir(parents=True)
    rng = random.Random(seed)
    lines: list[str] = []
    project = Project.open()
    for run, n in enumerate((400, 500, 500)):
        batch = make_events(rng, n, bad=0)
        lines += batch
        write_batch(project_dir, f"part-{run}", batch)
        project.trigger(path if run == 0 else "retained", until_idle=True, spark=spark)
        time.sleep(1.5)  # older than storage.retention: the next final tiering cycle may trim them
        con = oracle_connection(lines)
        for table, sql in ORACLE.items():
            expected = canon(con.sql(sql).to_arrow_table())
            assert canon(project.query(f"SELECT * FROM {table}")) == expected, f"hot {table}, run {run}"
            assert canon(project.lake.load(table).scan().to_arrow()) == expected, f"lake {table}, run {run}"
    assert sum(project.store.end_offsets("ods.clicks")) == len(lines)
    trimmed = project.store.get_table("ods.clicks")  # the scenario really trimmed the log
    assert any(log.first_offset > 0 for log in project.store._table(trimmed.name).logs)
    # the queries' private state tables (never tiered) are trimmed by age too: the local store's key-value
    # state is durable, and the runs after a trim stayed equal to the oracle
    states = [n for n in project.store.list_tables() if is_internal_table(n)]
    assert "ads.top_items__state" in states
    trimmed_states = [n for n in states if any(log.first_offset > 0 for log in project.store._table(n).logs)]
    assert trimmed_states, states
    assert project.plan("retained", spark=spark).table("ads.top_items").strategy == "topn"
    project.close()
