"""Fixtures of the lake tests: a lake under a temporary home, and hot stores to tier from.

``store`` runs each test against every :class:`TableStore` implementation available: the in-memory one of
these tests and the real embedded :class:`runtime.storage.local.LocalTableStore`.

``lake`` is the embedded SQL catalog on SQLite; a test (or module) marked ``pytest.mark.catalogs(*names)``
runs on each of those catalogs: ``sql``, ``rest`` (SeaweedFS's Iceberg REST catalog: a fresh table bucket,
i.e. a fresh catalog, per test, the table files on its S3) and ``sql-postgres`` (pyiceberg's SQL catalog on
PostgreSQL, the warehouse on SeaweedFS's S3). The shared catalogs run with the real local store only (the
in-memory store is a test double of the hot side: pairing it with every catalog would add time, not
coverage).
"""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from runtime.core.config import load_config
from runtime.lake.catalog import Lake
from tests.lake.memstore import MemoryTableStore

STORES = ["memory"] + (["local"] if importlib.util.find_spec("runtime.storage.local") else [])


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "catalogs(*names): run the test's lake on each catalog named (sql, rest, sql-postgres)"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc):
    """Turn a ``catalogs`` mark into a ``parametrize`` mark before pytest reads those (as a mark, it also
    takes precedence over the ``store`` fixture's own params)."""
    mark = metafunc.definition.get_closest_marker("catalogs")
    if mark is None or "lake" not in metafunc.fixturenames:
        return
    names = list(mark.args)
    fixed = {
        n.strip()
        for m in metafunc.definition.iter_markers("parametrize")
        for n in (m.args[0].split(",") if isinstance(m.args[0], str) else m.args[0])
    }
    if "store" in metafunc.fixturenames and "store" not in fixed:
        pairs = [(s, "sql") for s in STORES if "sql" in names]
        pairs += [("local", c) for c in names if c != "sql"]
        param = pytest.mark.parametrize(
            ("store", "lake"), pairs, indirect=True, ids=[f"{s}-{c}" for s, c in pairs]
        )
    else:
        param = pytest.mark.parametrize("lake", names, indirect=True)
    metafunc.definition.add_marker(param)


@pytest.fixture
def config(tmp_path):
    return load_config(home=tmp_path / "home", project_dir=tmp_path)


@pytest.fixture
def lake(request, config):
    kind = getattr(request, "param", "sql")
    if kind == "rest":
        props = request.getfixturevalue("seaweedfs").catalog_properties()
        config = dataclasses.replace(config, values={**config.values, "lake.catalog": props})
    elif kind == "sql-postgres":
        s3 = request.getfixturevalue("seaweedfs")
        props = {
            "type": "sql",
            "uri": request.getfixturevalue("postgres").create_database(),
            "warehouse": s3.root(),
            "s3.endpoint": s3.endpoint,
            "s3.access-key-id": s3.access_key,
            "s3.secret-access-key": s3.secret_key,
            "s3.region": "us-east-1",
        }
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
