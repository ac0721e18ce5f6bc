"""Fixtures of the materializer tests; the flow, its actions, input generator and oracle are in
:mod:`tests.materializer._flowkit`."""

from __future__ import annotations

import pytest

from tests.materializer._flowkit import write_project


@pytest.fixture
def test_flow(project_dir):
    return write_project(project_dir)


@pytest.fixture(params=["driver", "executors"])
def data_path(request, project_dir):
    """Run the test on both data paths (docs/architecture.md, "Two data paths"): a project file that sets
    ``materializer.data_path``. A test that writes its own tidehouse.yaml appends to this one. On the driver
    path every hand-off of Arrow data to Spark goes as a Parquet file (``local_relation_rows: 0``): the small
    batches of these tests would go as local relations, which the tests without this fixture run. On the
    executor path every tiering cycle of a log table writes its lake files from Spark tasks
    (``tiering.executor_rows: 0``): these tests' cycles are far below the default's threshold."""
    extra = "  local_relation_rows: 0\n" if request.param == "driver" else ""
    tiering = "tiering:\n  executor_rows: 0\n" if request.param == "executors" else ""
    # materializer last: tests append their own materializer settings to it
    (project_dir / "tidehouse.yaml").write_text(
        f"{tiering}materializer:\n  data_path: {request.param}\n{extra}"
    )
    return request.param
