"""The storage contract runs every test against each implementation of the hot storage (see _backends.py)."""

from __future__ import annotations

import pytest

from tests.storage.contract._backends import make_backend


@pytest.fixture(params=["local", "s3"])
def backend(request, tmp_path):
    b = make_backend(request.param, tmp_path, request)
    yield b
    b.close_all()
