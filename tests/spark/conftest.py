"""Fixtures of the Spark bridge tests: a real hot store per test and helpers to drive streaming queries."""

from __future__ import annotations

import pytest

from runtime.spark.options import cached_store


@pytest.fixture
def root(tmp_path) -> str:
    return str(tmp_path / "hot")


@pytest.fixture
def store(root):
    """The real embedded store, the same instance the in-process ``foreachBatch`` writers use."""
    return cached_store(root)
