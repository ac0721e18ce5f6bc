"""Hot streaming storage: Arrow log tables and primary-key tables with a changelog (see :mod:`.api`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runtime.core.literals import BUCKET, CHANGE, OFFSET, SYSTEM_COLUMNS, TS  # noqa: F401
from runtime.core.settings import default
from runtime.storage.api import (  # noqa: F401
    TS_TYPE,
    BatchInfo,
    Bootstrap,
    TableMeta,
    TableStore,
    WriteResult,
    bucket_of,
)

if TYPE_CHECKING:  # pragma: no cover
    from runtime.core.config import Config


def open_configured(
    config: Config,
    *,
    fsync: bool | None = None,
    bootstrap: Bootstrap | None = None,
    shared_writers: bool = False,
) -> TableStore:
    """The hot store of a project configuration: ``storage.root`` with the settings it takes
    (``storage.fsync`` unless ``fsync`` is given, ``storage.segment_bytes``, ``storage.metastore``,
    ``storage.s3``, ``storage.state_snapshot_rows``). The one way a project's store is opened — by the
    façade and by the Spark data source's Python workers alike; both inject the lake as ``bootstrap`` (the
    storage layer does not know the lake)."""
    return open_store(
        config.storage_root,
        fsync=config.get("storage.fsync") if fsync is None else fsync,
        segment_bytes=config.get("storage.segment_bytes"),
        metastore=config.get("storage.metastore"),
        s3=config.get("storage.s3"),
        bootstrap=bootstrap,
        shared_writers=shared_writers,
        state_snapshot_rows=config.get("storage.state_snapshot_rows"),
    )


def open_store(
    root: str,
    *,
    fsync: bool = default("storage.fsync"),
    segment_bytes: int = default("storage.segment_bytes"),
    metastore: str | None = None,
    s3: Mapping[str, Any] | None = None,
    bootstrap: Bootstrap | None = None,
    shared_writers: bool = False,
    state_snapshot_rows: int = default("storage.state_snapshot_rows"),
) -> TableStore:
    """The table store for a storage root, chosen by its scheme.

    * a local (or mounted) path or a ``file://`` URI: the embedded
      :class:`~runtime.storage.local.LocalTableStore` (``metastore``/``s3`` are refused: nothing would use
      them);
    * ``s3://bucket/prefix``: :class:`~runtime.storage.objectstore.ObjectTableStore`, with the SQLAlchemy URL
      ``metastore`` (required) and the S3 options ``s3`` (endpoint, region, access_key, secret_key,
      session_token); ``bootstrap(meta, bucket) -> (rows, offset) | None`` gives primary-key snapshots
      (a local store needs none: its state is complete on its disk).

    ``shared_writers``: this process takes turns with others writing the same primary-key buckets (Spark's
    Python workers on the executor data path): it hands a bucket over after each write instead of holding it.

    Any other scheme is refused (``STORAGE_IO``) rather than becoming a local folder named after it."""
    from runtime.core.errors import ErrorCode, Location, TidehouseError
    from runtime.core.uris import local_path, scheme_of

    text = str(root)
    if scheme_of(text) == "s3":
        from runtime.storage.objectstore import ObjectTableStore

        # on S3 the store refuses to start without a metastore (CONFIG_INVALID naming storage.metastore)
        return ObjectTableStore.from_uri(
            text,
            s3=dict(s3 or {}),
            metastore=metastore or None,
            fsync=fsync,
            bootstrap=bootstrap,
            shared_writers=shared_writers,
            snapshot_min_rows=state_snapshot_rows,
        )
    try:
        path = local_path(text)
    except ValueError as exc:
        raise TidehouseError(
            ErrorCode.STORAGE_IO,
            f"hot storage root: {exc}",
            location=Location(path=text),
            hint="storage.root (and the tidehouse source's 'root' option) takes a local path, "
            "a file:// URI or an s3:// URI",
        ) from None
    for name, value in (("storage.metastore", metastore), ("storage.s3", s3)):
        if value:
            raise TidehouseError(
                ErrorCode.CONFIG_INVALID,
                f"{name} is set, but the hot storage root {text} is "
                "local: only an object-store root (s3://) uses it",
                location=Location(path=name),
                hint=f"remove {name}, or point storage.root at s3://bucket/prefix",
            )
    from runtime.storage.local import LocalTableStore

    return LocalTableStore(path, fsync=fsync, segment_bytes=segment_bytes, shared_writers=shared_writers)
