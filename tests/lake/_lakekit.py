"""What the lake tests share: their table schemas and rows, and reading a lake table with plain pyiceberg."""

from __future__ import annotations

import pyarrow as pa

from runtime.lake.catalog import Lake

# the lake fixture's catalogs: the embedded SQL catalog on SQLite, SeaweedFS's Iceberg REST catalog, and
# pyiceberg's SQL catalog on PostgreSQL with its warehouse on SeaweedFS's S3 (``sql-postgres``)
CATALOGS = ["sql", "rest"]
ALL_CATALOGS = [*CATALOGS, "sql-postgres"]

CLICKS = pa.schema(
    [
        ("user_id", pa.string()),
        ("item", pa.int64()),
        ("price", pa.float64()),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)
ACTIVITY = pa.schema([("user_id", pa.string()), ("events", pa.int64()), ("last_item", pa.string())])


def clicks(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "user_id": [f"u{i % 7}" for i in range(start, start + n)],
            "item": list(range(start, start + n)),
            "price": [i / 10 for i in range(start, start + n)],
            "ts": pa.array(
                [1_700_000_000_000_000 + i for i in range(start, start + n)], pa.timestamp("us", tz="UTC")
            ),
        },
        schema=CLICKS,
    )


def lake_rows(lake: Lake, name: str, *, user_only: bool = True) -> list[dict]:
    """The lake table read with plain pyiceberg (a fresh catalog load), as sorted row dicts."""
    table = lake.catalog.load_table(tuple(name.split(".")))
    data = table.scan().to_arrow()
    if user_only:
        data = data.select([c for c in data.column_names if not c.startswith("__")])
    return sorted(data.to_pylist(), key=repr)


def data_files_stored(table) -> list[str]:
    """Paths of the Parquet files under a lake table's location, on whatever storage holds it (a local
    warehouse, or S3 through the table's own FileIO settings)."""
    from urllib.parse import urlparse

    import pyarrow.fs as pafs

    where = urlparse(table.location())
    fs = table.io.fs_by_scheme(where.scheme or "file", where.netloc)
    base = f"{where.netloc}{where.path}" if where.scheme == "s3" else where.path
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    return [i.path for i in infos if i.type == pafs.FileType.File and i.path.endswith(".parquet")]


def rows_of(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=repr)
