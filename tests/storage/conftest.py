"""Fixtures of the hot-storage tests."""

from __future__ import annotations

import pytest

from runtime.storage import open_store


@pytest.fixture
def store(tmp_path):
    s = open_store(str(tmp_path / "hot"), fsync=False)
    yield s
    s.close()
