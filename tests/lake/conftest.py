"""Fixtures of the lake tests: a lake under a temporary home, and hot stores to tier from.

``store`` runs each test against every :class:`TableStore` implementation available: the in-memory one of
these tests and the real embedded :class:`runtime.storage.local.LocalTableStore`.

``lake`` is the embedded SQL catalog on SQLite; a test marked
``pytest.mark.parametrize("lake", _lakekit.CATALOGS, indirect=True)`` runs against SeaweedFS's Iceberg REST
catalog too (``rest``: a fresh table bucket, i.e. a fresh catalog, per test; the table files on its S3).
"""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from runtime.core.config import load_config
from runtime.lake.catalog import Lake
from tests.lake.memstore import MemoryTableStore

STORES = ["memory"] + (["local"] if importlib.util.find_spec("runtime.storage.local") else [])


@pytest.fixture
def config(tmp_path):
    return load_config(home=tmp_path / "home", project_dir=tmp_path)


@pytest.fixture
def lake(request, config):
    kind = getattr(request, "param", "sql")
    if kind == "rest":
        props = request.getfixturevalue("seaweedfs").catalog_properties()
        config = dataclasses.replace(config, values={**config.values, "lake.catalog": props})
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
