"""One DuckDB database per process, a cursor per use (materializer.duck)."""

from __future__ import annotations

import threading

import pyarrow as pa

from materializer import duck


def test_a_cursors_registered_rows_are_its_own_under_concurrent_use():
    errors: list[str] = []
    start = threading.Barrier(4)

    def run(n: int) -> None:
        start.wait()
        for _ in range(20):
            con = duck.cursor()
            try:
                con.register("new_rows", pa.table({"v": [n] * (n + 1)}))
                got = con.sql("SELECT v, count(*) FROM new_rows GROUP BY v").fetchall()
                if got != [(n, n + 1)]:
                    errors.append(f"thread {n} saw {got}")
            finally:
                con.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_cursors_share_one_database_until_the_process_changes(monkeypatch):
    con = duck.cursor()
    con.execute("CREATE OR REPLACE TABLE shared_probe AS SELECT 1 AS x")
    con.close()
    other = duck.cursor()
    assert other.sql("SELECT x FROM shared_probe").fetchall() == [(1,)]  # the same database
    other.close()
    real = duck.os.getpid()
    monkeypatch.setattr(duck.os, "getpid", lambda: real + 1)  # as in a forked child
    child = duck.cursor()
    try:
        assert child.sql(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'shared_probe'"
        ).fetchall() == [(0,)]
    finally:
        child.close()
