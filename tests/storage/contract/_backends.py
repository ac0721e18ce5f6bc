"""The implementations the storage contract runs against, and how each one is hurt on purpose.

* ``local``: the embedded :class:`~runtime.storage.local.LocalTableStore` on a temporary folder;
* ``s3``: :class:`~runtime.storage.objectstore.ObjectTableStore` on SeaweedFS (a fresh ``s3://`` prefix per
  test) with its metastore on PostgreSQL (the team setup: nothing on the test host's disk).

A backend opens any number of store instances on one root (each one is what another process would see),
describes itself as JSON for a writer subprocess (``spec``), and injects the faults whose shape differs per
implementation: a torn (half-written, uncommitted) write and damage to committed data.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.storage import TableStore, open_store


@dataclass
class Backend:
    name: str
    root: str
    metastore: str | None = None
    s3: dict[str, str] = field(default_factory=dict)
    fs: Any = None  # pyarrow filesystem of the s3 backend (fault injection)
    opened: list[TableStore] = field(default_factory=list)

    @property
    def spec(self) -> str:
        """How a subprocess opens this store (``open_from_spec``)."""
        return json.dumps({"root": self.root, "metastore": self.metastore, "s3": self.s3 or None})

    def open(
        self,
        *,
        lock_timeout: float = 0.5,
        segment_bytes: int = 64 << 20,
        bootstrap=None,
        shared_writers: bool = False,
        state_snapshot_rows: int = 10_000,
    ) -> TableStore:
        if self.name == "local":
            from runtime.storage.local import LocalTableStore

            store = LocalTableStore(
                self.root,
                fsync=False,
                segment_bytes=segment_bytes,
                lock_timeout=lock_timeout,
                shared_writers=shared_writers,
            )
        else:
            store = open_store(
                self.root,
                fsync=False,
                metastore=self.metastore,
                s3=self.s3,
                bootstrap=bootstrap,
                shared_writers=shared_writers,
                state_snapshot_rows=state_snapshot_rows,
            )
        self.opened.append(store)
        return store

    def close_all(self) -> None:
        for store in self.opened:
            store.close()
        self.opened.clear()

    # -- faults ---------------------------------------------------------------------------------------
    def tear(self, store: TableStore, table: str, bucket: int, rng: random.Random) -> None:
        """Leave a write that died half-way: bytes of it on storage, nothing committed."""
        if self.name == "local":
            layer, name = table.split(".")
            import pyarrow as pa

            from runtime.storage.frames import encode_frame

            seg = max((Path(self.root) / layer / name / f"bucket-{bucket}").glob("*.log"))
            batch = pa.record_batch({"id": pa.array(range(rng.randint(1, 50)), pa.int64())})
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, batch.schema) as w:
                w.write_batch(batch)
            pieces, _, _ = encode_frame(
                sink.getvalue(),
                base_offset=store.end_offsets(table)[bucket],
                rows=batch.num_rows,
                schema_id=0,
                commit_ts=0,
                origin_ts=-1,
                writer="w",
                seq=1 << 40,
            )
            frame = b"".join(bytes(p) for p in pieces)
            with open(seg, "ab") as fh:  # a strict prefix of the next frame: the tail of a killed append
                fh.write(frame[: rng.randint(1, len(frame) - 1)])
        else:
            from runtime.storage.objectstore import blobs

            inc = store.incarnation(table)
            whole = self.fs.open_input_stream(_any_object(store, table)).read()
            for _ in range(2):  # a whole object put before a crash, and a half-written one
                path = blobs.new_object_name(store.base, table, inc)
                with self.fs.open_output_stream(path) as out:
                    out.write(whole if _ == 0 else whole[: len(whole) // 2])

    def damage(self, store: TableStore, table: str, bucket: int) -> None:
        """Flip a byte inside the payload of the first committed frame of ``bucket``."""
        if self.name == "local":
            layer, name = table.split(".")
            seg = min((Path(self.root) / layer / name / f"bucket-{bucket}").glob("*.log"))
            data = bytearray(seg.read_bytes())
            data[200] ^= 0xFF
            seg.write_bytes(bytes(data))
        else:
            frame = store.metastore.frames(store.incarnation(table), bucket, 0, 1)[0]
            data = bytearray(self.fs.open_input_stream(frame.object).read())
            data[frame.position + frame.length // 2] ^= 0xFF
            with self.fs.open_output_stream(frame.object) as out:
                out.write(bytes(data))


def _any_object(store, table: str) -> str:
    return max(store.metastore.objects(store.incarnation(table)))


def open_from_spec(spec: str, **kwargs) -> TableStore:
    doc = json.loads(spec)
    return open_store(doc["root"], metastore=doc["metastore"], s3=doc["s3"], **kwargs)


def make_backend(name: str, tmp_path: Path, request) -> Backend:
    if name == "local":
        return Backend("local", str(tmp_path / "hot"))
    seaweedfs = request.getfixturevalue("seaweedfs")
    postgres = request.getfixturevalue("postgres")
    return Backend(
        "s3", seaweedfs.root(), metastore=postgres.url, s3=seaweedfs.s3_options(), fs=seaweedfs.filesystem()
    )


def subprocess_env() -> dict[str, str]:
    from tests._support import REPO

    return dict(os.environ, PYTHONPATH=str(REPO))
