"""Telling SQLAlchemy when a database server ended a pooled session, whichever way the driver reports it.

SQLAlchemy's psycopg dialect calls an error a disconnect only when psycopg has marked the connection broken.
A statement sent to a server that has just ended the session (a restart, an idle timeout,
``pg_terminate_backend``) can fail before that, with "sending query failed: terminating connection due to
administrator command" (seen in CI on Python 3.10): the pool then keeps the dead connection, a pre-ping
raises instead of reconnecting, and the object store's metastore does not retry. Both the registry and the
metastore install :func:`mark_lost_sessions` on their server engines.
"""

from __future__ import annotations

from sqlalchemy import event
from sqlalchemy.engine import Engine


def lost_connection(exc: BaseException) -> bool:
    """Whether a database driver's error means the server ended the session: SQLSTATE class 08 (connection
    exception) or 57P (an administrator's or a crash's shutdown), or a psycopg ``OperationalError`` without a
    SQLSTATE (sending or receiving on the socket failed)."""
    state = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    if state:
        return str(state).startswith(("08", "57P"))
    return type(exc).__name__ == "OperationalError" and type(exc).__module__.startswith("psycopg")


def mark_lost_sessions(engine: Engine) -> None:
    """Make ``engine`` treat :func:`lost_connection` errors as disconnects: the connection is discarded, a
    pre-ping reconnects, and the error says ``connection_invalidated`` (which a caller may retry on)."""

    @event.listens_for(engine, "handle_error")
    def _lost(context) -> None:
        if lost_connection(context.original_exception):
            context.is_disconnect = True
