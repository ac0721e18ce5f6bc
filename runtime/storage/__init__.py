"""Hot streaming storage: Arrow log tables and primary-key tables with a changelog (see :mod:`.api`)."""

from __future__ import annotations

from runtime.storage.api import (  # noqa: F401
    BUCKET,
    CHANGE,
    OFFSET,
    SYSTEM_COLUMNS,
    TS,
    TS_TYPE,
    BatchInfo,
    TableMeta,
    TableStore,
    WriteResult,
    bucket_of,
)


def open_store(root: str, *, fsync: bool = True, segment_bytes: int = 64 * 1024 * 1024) -> TableStore:
    """The table store for a storage root: a local (or mounted) path or a ``file://`` URI.

    Any other scheme is refused (``STORAGE_IO``) rather than becoming a local folder named after it."""
    from runtime.core.errors import ErrorCode, Location, TidehouseError
    from runtime.core.uris import local_path
    from runtime.storage.local import LocalTableStore

    try:
        path = local_path(str(root))
    except ValueError as exc:
        raise TidehouseError(ErrorCode.STORAGE_IO, f"hot storage root: {exc}", location=Location(path=str(root)),
                             hint="storage.root (and the tidehouse source's 'root' option) takes a local path or "
                                  "a file:// URI") from None
    return LocalTableStore(path, fsync=fsync, segment_bytes=segment_bytes)
