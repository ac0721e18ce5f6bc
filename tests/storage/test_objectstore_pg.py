"""The object-store hot storage against a real PostgreSQL metastore (and SeaweedFS): what only a server
shows."""

from __future__ import annotations

import psycopg

from runtime.storage import open_store
from tests.storage._util import log_meta, read_all, rows


def test_a_metastore_connection_the_server_dropped_costs_a_retry_not_a_failed_write(seaweedfs, postgres):
    url = postgres.create_database()
    store = open_store(seaweedfs.root(), metastore=url, s3=seaweedfs.s3_options(), fsync=False)
    store.create_table(log_meta())
    store.write("ods.events", rows(0, 3), writer="w", seq=1)
    assert postgres.drop_connections(url) >= 1  # e.g. a server restart or an idle timeout
    assert store.write("ods.events", rows(3, 3), writer="w", seq=2).ranges == {0: (3, 6)}
    assert postgres.drop_connections(url) >= 1
    assert store.end_offsets("ods.events") == [6]  # reads too
    assert read_all(store, "ods.events").column("id").to_pylist() == list(range(6))
    store.close()


def test_a_dropped_connection_psycopg_has_not_marked_broken_yet_costs_a_retry(
    seaweedfs, postgres, monkeypatch
):
    """Fresh-clone CI at 19e37a0 (Python 3.10): a send found the server's FATAL message waiting ("sending
    query failed: terminating connection due to administrator command") before psycopg had marked the
    connection broken, so SQLAlchemy's psycopg dialect, which asks only that, did not call it a disconnect and
    the write failed. With the dialect's answer taken away, the store must still see the lost connection and
    retry."""
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

    monkeypatch.setattr(PGDialect_psycopg, "is_disconnect", lambda self, e, connection, cursor: False)
    test_a_metastore_connection_the_server_dropped_costs_a_retry_not_a_failed_write(seaweedfs, postgres)


def test_only_errors_of_a_lost_session_count_as_lost():
    from psycopg import errors

    from runtime.core.dbsessions import lost_connection

    sent = psycopg.OperationalError(
        "sending query failed: terminating connection due to administrator command"
    )
    assert lost_connection(sent)  # no SQLSTATE: the socket
    assert lost_connection(errors.AdminShutdown("terminating connection due to administrator command"))
    assert lost_connection(errors.ConnectionFailure("connection failure"))  # class 08
    assert not lost_connection(
        errors.SerializationFailure("could not serialize access")
    )  # 40001: retried else
    assert not lost_connection(errors.LockNotAvailable("could not obtain lock"))  # 55P03
    assert not lost_connection(errors.QueryCanceled("canceling statement"))  # 57014, not 57P
    assert not lost_connection(ValueError("not a driver error"))
