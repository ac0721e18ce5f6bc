"""Version semantics of the store: immutable integers per name, identical content = same version,
changed content = next version, and no lost or duplicate versions when processes register at once."""

from __future__ import annotations

import random

import pytest

from registry.service import Registry, content_hash
from runtime.core.errors import ErrorCode, TidehouseError
from tests.registry._reg_workers import race


def action_text(name: str, n: int) -> str:
    return f"/*---\nname: {name}\ninputs: [t]\n---*/\nSELECT {n} AS n FROM t\n"


@pytest.fixture
def registry(registry_url):
    reg = Registry.open(registry_url)
    yield reg
    reg.close()


def test_identical_content_is_the_same_version(registry):
    first = registry.register_action(action_text("a", 1))
    again = registry.register_action(action_text("a", 1).replace("\n", "\r\n"))  # line endings do not count
    assert (first.version, first.unchanged) == (1, False)
    assert (again.version, again.unchanged) == (1, True)
    assert again.content_hash == first.content_hash


def test_changed_content_is_the_next_version_and_old_versions_stay(registry):
    versions = [registry.register_action(action_text("a", n)).version for n in (1, 2, 3)]
    assert versions == [1, 2, 3]
    assert registry.register_action(action_text("a", 1)).version == 1  # going back answers the old version
    assert registry.get_action("a").version == 3
    assert registry.get_action("a", 2).spec.sql == "SELECT 2 AS n FROM t"
    assert registry.resolve("a@1").spec.sql == "SELECT 1 AS n FROM t"
    assert [v.version for v in registry.action_versions("a")] == [1, 2, 3]
    (listed,) = registry.list_actions()
    assert (listed.name, listed.version, listed.version_count) == ("a", 3, 3)


def test_names_are_versioned_independently(registry):
    registry.register_action(action_text("a", 1))
    registry.register_action(action_text("a", 2))
    assert registry.register_action(action_text("b", 1)).version == 1


def test_unknown_names_and_versions(registry):
    registry.register_action(action_text("clean", 1))
    with pytest.raises(TidehouseError) as info:
        registry.get_action("claen")
    assert info.value.code is ErrorCode.ACTION_UNKNOWN and "did you mean 'clean'" in info.value.hint
    with pytest.raises(TidehouseError) as info:
        registry.resolve("clean@4")
    assert info.value.code is ErrorCode.ACTION_VERSION_UNKNOWN
    with pytest.raises(TidehouseError) as info:
        registry.get_flow("nope")
    assert info.value.code is ErrorCode.FLOW_UNKNOWN


def test_reopening_keeps_everything(registry_url):
    url = registry_url
    first = Registry.open(url)
    first.register_action(action_text("a", 1))
    first.close()
    second = Registry.open(url)
    assert second.register_action(action_text("a", 1)).unchanged
    assert second.register_action(action_text("a", 2)).version == 2
    second.close()


@pytest.mark.parametrize("dialect_sees_it", [True, False])
def test_a_session_the_server_ended_costs_a_reconnect(postgres, monkeypatch, dialect_sees_it):
    """The registry's pooled PostgreSQL sessions ended by the server (a restart, an idle timeout): the next
    calls reconnect. Also when SQLAlchemy's psycopg dialect does not call the error a disconnect (psycopg had
    not marked the connection broken yet: runtime.core.dbsessions)."""
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

    if not dialect_sees_it:
        monkeypatch.setattr(PGDialect_psycopg, "is_disconnect", lambda self, e, connection, cursor: False)
    url = postgres.create_database()
    registry = Registry.open(url)
    try:
        registry.register_action(action_text("a", 1))
        assert postgres.drop_connections(url) >= 1
        assert registry.register_action(action_text("a", 2)).version == 2
        assert postgres.drop_connections(url) >= 1
        assert [a.version for a in registry.action_versions("a")] == [1, 2]
    finally:
        registry.close()


def test_unreachable_database_is_a_user_error(tmp_path):
    with pytest.raises(TidehouseError) as info:
        Registry.open(f"sqlite:///{tmp_path / 'missing-dir' / 'deeper' / 'r.db'}")
    assert info.value.code is ErrorCode.REGISTRY_UNAVAILABLE
    with pytest.raises(TidehouseError) as info:  # nothing listens on port 1
        Registry.open("postgresql+psycopg://tidehouse@127.0.0.1:1/registry")
    assert info.value.code is ErrorCode.REGISTRY_UNAVAILABLE
    with pytest.raises(TidehouseError) as info:
        Registry.open("nosuchdialect://x")
    assert info.value.code is ErrorCode.REGISTRY_UNAVAILABLE


def test_content_hash_includes_pins():
    assert content_hash("x") == content_hash("x\r\n")
    assert content_hash("x", {"a": "f@1"}) != content_hash("x", {"a": "f@2"})


@pytest.mark.slow
def test_concurrent_processes_lose_nothing_and_duplicate_nothing(tmp_path, seed, registry_url):
    """Four processes register the same ten texts (each in its own order) and five texts of their own."""
    rng = random.Random(seed)
    url = registry_url
    Registry.open(url).close()  # schema exists before the race (creating it concurrently is tested below)
    shared = [action_text("same", n) for n in range(10)]
    jobs = []
    for worker in range(4):
        mine = [action_text("mixed", 100 * worker + n) for n in range(5)]
        texts = shared[:] + mine
        rng.shuffle(texts)
        jobs.append(texts)
    outcome = race(url, tmp_path / "gate", jobs)
    results = [r for r, _ in outcome]
    slowest = max(t for _, t in outcome)
    print(
        f"\n[measured] {url.split(':')[0]}: 4 processes x 15 registrations under contention: {slowest:.2f}s "
        f"({60 / slowest:.0f} registrations/s)"
    )

    registry = Registry.open(url)
    try:
        same = registry.action_versions("same")
        mixed = registry.action_versions("mixed")
    finally:
        registry.close()
    assert [v.version for v in same] == list(range(1, 11))  # dense, nothing lost
    assert len({v.content_hash for v in same}) == 10  # no identical content twice
    assert [v.version for v in mixed] == list(range(1, 21))
    assert len({v.content_hash for v in mixed}) == 20
    stored = {v.content_hash: v.version for v in same + mixed}
    created = [h for result in results for h, _, unchanged in result if not unchanged]
    assert sorted(created) == sorted(stored)  # each version was created by exactly one process
    for result in results:  # every process was told the version that is stored
        for digest, version, _ in result:
            assert stored[digest] == version


@pytest.mark.slow
def test_concurrent_first_open_creates_the_schema_once(tmp_path, registry_url):
    url = registry_url  # a fresh database: the three processes race to create the tables
    results = [r for r, _ in race(url, tmp_path / "gate", [[action_text("x", 1)]] * 3)]
    assert sorted(r[0][1] for r in results) == [1, 1, 1]
    assert sorted(r[0][2] for r in results) == [False, True, True]
