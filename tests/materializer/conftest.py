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
    batches of these tests would go as local relations, which the tests without this fixture run."""
    extra = "  local_relation_rows: 0\n" if request.param == "driver" else ""
    (project_dir / "tidehouse.yaml").write_text(f"materializer:\n  data_path: {request.param}\n{extra}")
    return request.param
