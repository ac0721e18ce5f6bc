"""DuckDB for the driver's small relational steps (:func:`materializer.strategies.output_difference`).

``duckdb.connect()`` builds a new in-memory database each time: ~14 ms of CPU on this machine, paid by every
micro-batch of a table that diffs its output (a recompute on the driver path, a top-N, and the incremental
strategies when they rebuild a result). A cursor of one
database per process costs ~2 ms, and what a cursor registers is its own (DuckDB's registered relations are
connection-local), so concurrent queries' batches cannot see each other's rows. A forked child (a Spark
Python worker) opens its own database: a DuckDB handle does not survive a fork.
"""

from __future__ import annotations

import os
import threading

_lock = threading.Lock()
_database: tuple[int, object] | None = None  # (the pid that opened it, its connection)


def cursor():
    """A new DuckDB connection to this process's in-memory database; close it after use."""
    import duckdb

    global _database
    with _lock:  # DuckDB connections are not thread-safe, cursor() on the shared one included
        if _database is None or _database[0] != os.getpid():
            _database = (os.getpid(), duckdb.connect(":memory:"))
        return _database[1].cursor()
