"""Fixtures of the lake tests: a lake under a temporary home, and hot stores to tier from.

``store`` runs each test against every :class:`TableStore` implementation available: the in-memory one of
these tests and the real embedded :class:`runtime.storage.local.LocalTableStore`.
"""

from __future__ import annotations

import importlib.util

import pyarrow as pa
import pytest

from runtime.config import load_config
from runtime.lake.catalog import Lake
from tests.lake.memstore import MemoryTableStore

STORES = ["memory"] + (["local"] if importlib.util.find_spec("runtime.storage.local") else [])


@pytest.fixture
def config(tmp_path):
    return load_config(home=tmp_path / "home", project_dir=tmp_path)


@pytest.fixture
def lake(config):
    lake = Lake.open(config)
    yield lake
    lake.close()


@pytest.fixture(params=STORES)
def store(request, config):
    if request.param == "memory":
        yield MemoryTableStore()
        return
    from runtime.storage import open_store

    store = open_store(config.storage_root, fsync=False)
    yield store
    store.close()


def lake_rows(lake: Lake, name: str, *, user_only: bool = True) -> list[dict]:
    """The lake table read with plain pyiceberg (a fresh catalog load), as sorted row dicts."""
    table = lake.catalog.load_table(tuple(name.split(".")))
    data = table.scan().to_arrow()
    if user_only:
        data = data.select([c for c in data.column_names if not c.startswith("__")])
    return sorted(data.to_pylist(), key=repr)


def rows_of(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=repr)
