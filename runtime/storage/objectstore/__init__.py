"""The hot storage on an object store (``storage.root: s3://bucket/prefix``), or any pyarrow filesystem.

A write puts one immutable data object (never overwritten; a unique name per attempt) and then commits its
frames in one SQL transaction of the **metastore** (``storage.metastore``: PostgreSQL for a team, SQLite for
one machine) that checks the writer's seq (idempotency) and, for a primary-key bucket, the writer's fencing
epoch and the bucket's end offset, and assigns the offsets. Reads list frames from the metastore and fetch
the objects. A primary-key table's state is a cache in memory rebuilt from a snapshot (the injected
``bootstrap``, the lake) plus the changelog. The protocol, its crash cases and the alternatives rejected are
in docs/architecture.md, "Hot storage on an object store".

Modules: :mod:`.blobs` (objects: names, format, put/get, cache), :mod:`.metastore` (the SQL side, one
transaction per commit), :mod:`.reader` (committed frames: listed, fetched, checked, decoded), :mod:`.state`
(primary-key state), :mod:`.garbage` (objects no frame references), :mod:`.store` (:class:`ObjectTableStore`:
the catalog, the commit protocol of a write, reads, retention).
"""

from __future__ import annotations

from runtime.storage.objectstore.store import ObjectTableStore  # noqa: F401
