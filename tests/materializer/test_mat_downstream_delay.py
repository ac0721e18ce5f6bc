"""The hot delay of tables downstream of a micro-batch that wrote nothing (materializer.status).

The second run's events are all filtered out by DWD: DWD's batch reads them and writes nothing, so DWS and
the ADS tables get no micro-batch. They hold every row there is, so each is as fresh as DWD's batch — not as
its last commit, which the first run made.
"""

from __future__ import annotations

import json
import random

import pytest

from tests.materializer._flowkit import make_events, write_batch, write_project

pytestmark = pytest.mark.spark

DOWNSTREAM = ("dws.user_activity", "ads.low_users", "ads.top_users")


def test_tables_below_a_batch_that_wrote_nothing_are_as_fresh_as_it(spark, project_dir, seed):
    from materializer.status import hot_figures
    from runtime.project import Project

    rng = random.Random(seed)
    path = write_project(project_dir)
    write_batch(project_dir, "part-0", make_events(rng, 40, bad=0))
    project = Project.open()
    try:
        project.trigger(path, until_idle=True, spark=spark)
        dropped = [
            json.dumps({**json.loads(line), "event_type": "hover"}) for line in make_events(rng, 20, bad=0)
        ]
        write_batch(project_dir, "part-1", dropped)  # DWD keeps no "hover" event
        project.trigger(path, until_idle=True, spark=spark)

        rows = {r["table"]: r for r in project.status("testflow")["tables"]}
        dwd = rows["dwd.clicks"]
        assert dwd["last_batch_rows_written"] == 0 and dwd["last_batch_time"] > dwd["last_commit_at"]
        assert dwd["hot_delay_s"] == round(dwd["last_batch_time"] - dwd["last_batch_origin"], 3)
        for table in DOWNSTREAM:
            row = rows[table]
            # an ADS table may never have committed (no user with fewer than 3 events, e.g. seed 2468470723)
            committed = row["last_commit_at"]
            assert committed is None or committed < dwd["last_batch_time"], f"{table} got a batch"
            assert row["input_offsets"], table
            assert hot_figures(project.store, table)["hot_delay_s"] != dwd["hot_delay_s"], (
                table
            )  # its commit's
            assert row["hot_delay_s"] == dwd["hot_delay_s"], table
    finally:
        project.close()
