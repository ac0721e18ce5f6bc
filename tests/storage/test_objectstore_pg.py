"""The object-store hot storage against a real PostgreSQL metastore (and SeaweedFS): what only a server
shows."""

from __future__ import annotations

import psycopg

from runtime.storage import open_store
from tests.storage._util import log_meta, read_all, rows


def _drop_connections(postgres, url: str) -> None:
    with psycopg.connect(
        host="127.0.0.1", port=postgres.port, user="postgres", dbname="postgres", autocommit=True
    ) as admin:
        killed = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s",
            (url.rsplit("/", 1)[1],),
        ).fetchone()[0]
    assert killed >= 1


def test_a_metastore_connection_the_server_dropped_costs_a_retry_not_a_failed_write(seaweedfs, postgres):
    url = postgres.create_database()
    store = open_store(seaweedfs.root(), metastore=url, s3=seaweedfs.s3_options(), fsync=False)
    store.create_table(log_meta())
    store.write("ods.events", rows(0, 3), writer="w", seq=1)
    _drop_connections(postgres, url)  # e.g. a server restart or an idle timeout
    assert store.write("ods.events", rows(3, 3), writer="w", seq=2).ranges == {0: (3, 6)}
    _drop_connections(postgres, url)
    assert store.end_offsets("ods.events") == [6]  # reads too
    assert read_all(store, "ods.events").column("id").to_pylist() == list(range(6))
    store.close()
