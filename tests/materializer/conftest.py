"""Fixtures of the materializer tests; the flow, its actions, input generator and oracle are in
:mod:`tests.materializer._flowkit`."""

from __future__ import annotations

import pytest

from tests.materializer._flowkit import write_project


@pytest.fixture
def test_flow(project_dir):
    return write_project(project_dir)
