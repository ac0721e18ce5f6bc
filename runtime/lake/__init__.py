"""The lake: Iceberg catalog, exactly-once tiering of hot tables, its scheduler and maintenance, union
reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from runtime.lake.catalog import Lake
    from runtime.storage.api import Bootstrap


def lake_bootstrap(lake: Callable[[], Lake | None]) -> Bootstrap:
    """The ``bootstrap`` a project injects into its hot store (:func:`runtime.storage.open_configured`): a
    primary-key bucket's snapshot from the lake (:func:`runtime.lake.history.bucket_snapshot`), from which a
    store whose state is a cache (the object store) rebuilds it before replaying the changelog after it.
    ``lake`` is called, and pyiceberg imported, only when a state is rebuilt: a store that never does so
    never opens the catalog."""

    def bootstrap(meta, bucket):
        from runtime.lake.history import bucket_snapshot

        return bucket_snapshot(lake(), meta, bucket)

    return bootstrap
