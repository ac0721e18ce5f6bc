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
    """The table store for a storage root (a local path; other pyarrow filesystems when implemented)."""
    from runtime.storage.local import LocalTableStore

    return LocalTableStore(root, fsync=fsync, segment_bytes=segment_bytes)
