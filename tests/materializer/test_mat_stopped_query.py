"""A query that stops without an error while the run needs it is an error, never a run that ends as if its
table were up to date. Spark stops a running query when another query with the same id starts in the same
application (``spark.sql.streaming.stopActiveRunOnRestart``); two tables whose checkpoints hold one id (one
copied from the other) did that, and an ``--until-idle`` run ended "successfully" with the first table's new
rows missing: its drain returned at once from a stopped query."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from runtime.core.errors import ErrorCode, TidehouseError
from tests.materializer._flowkit import make_events, write_batch, write_project

pytestmark = pytest.mark.spark


def test_a_query_stopped_by_another_run_of_its_id_fails_the_run(spark, project_dir, seed):
    from runtime.project import Project

    rng = random.Random(seed)
    flow = write_project(project_dir)
    write_batch(project_dir, "part-0", make_events(rng, 40, bad=0))
    project = Project.open()
    try:
        project.trigger(flow, until_idle=True, spark=spark)
        plan = project.plan("testflow", spark=spark)
        first, second = [plan.table(name) for name in [*plan.generations[0], *plan.generations[1]]][:2]
        shutil.copy(Path(second.checkpoint) / "metadata", Path(first.checkpoint) / "metadata")
        assert json.loads((Path(first.checkpoint) / "metadata").read_text())["id"]
        write_batch(project_dir, "part-1", make_events(rng, 40, bad=0))
        with pytest.raises(TidehouseError) as failed:
            project.trigger("testflow", until_idle=True, spark=spark)
        assert failed.value.code == ErrorCode.QUERY_FAILED
        assert f"the query of table {first.name} stopped without an error" in failed.value.message
        assert "stopActiveRunOnRestart" in failed.value.hint
    finally:
        project.close()
