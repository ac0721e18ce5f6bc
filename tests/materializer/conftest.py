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
    ``materializer.data_path``. A test that writes its own tidehouse.yaml appends to this one."""
    (project_dir / "tidehouse.yaml").write_text(f"materializer:\n  data_path: {request.param}\n")
    return request.param
