"""The registry's database: every test that takes ``registry_url`` runs on the embedded SQLite file and on a
real PostgreSQL (a fresh database per test in the session's server, through psycopg 3): the registry is one
implementation on SQLAlchemy, and these are the two databases it is declared for."""

from __future__ import annotations

import pytest

DATABASES = ["sqlite", "postgresql"]


@pytest.fixture(params=DATABASES)
def registry_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'registry.db'}"
    return request.getfixturevalue("postgres").create_database()
