"""Arrow data the driver hands to Spark, on the driver data path: a micro-batch's rows, a table's state for a
lookup or a recomputation, a result to check expectations on.

A few rows go as a local relation (``createDataFrame``): no file, the least latency. Many rows go as one
Parquet file in the query's scratch folder that Spark reads with its own vectorised reader: building and
scanning a local relation costs Spark ~6 CPU µs per row, the file ~1 (measured here: 200,000 rows of the
vs_sdp events and its DWD filter, 1.3 s of CPU against 0.24 s; docs/benchmarks.md, Scale-out). The threshold
is ``materializer.local_relation_rows``.

The file keeps the rows' order (one file, its row groups in offset order, which Spark splits in order), so a
SQL whose result depends on input order (the last of several upserts of one key wins) sees what a local
relation shows. Types Parquet does not carry into Spark exactly (intervals, ``timestamp_ntz``, ``void``,
``variant``) and column names Spark's Parquet reader refuses go as a local relation, whatever their size.

The files live until the micro-batch ends (:meth:`Handoff.release`: a DataFrame is lazy, and a view over it
may be evaluated several times within the batch); a query's folder is emptied when it starts, which also
removes what a killed run left behind. Only on the driver data path: the file is on the driver's disk, which
tasks of a ``local[...]`` master share and executors elsewhere do not.
"""

from __future__ import annotations

import shutil
import threading
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROW_GROUP_ROWS = 65_536  # Spark splits a file at row groups: several let several tasks read one file
_NAME_REFUSED = set(" ,;{}()\n\t=")  # characters Spark's Parquet reader refuses in a column name


def parquet_carries(schema: pa.Schema) -> bool:
    """Whether every column of ``schema`` goes through a Parquet file into Spark as the same type."""
    return all(_carries(f.type) and not (_NAME_REFUSED & set(f.name)) for f in schema) and len(schema) > 0


def _carries(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t):
        return t.tz is not None  # without a zone it is Spark's timestamp_ntz: left to a local relation
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _carries(t.value_type)
    if pa.types.is_struct(t):
        return t.num_fields > 0 and all(
            _carries(t.field(i).type) and not (_NAME_REFUSED & set(t.field(i).name))
            for i in range(t.num_fields)
        )
    if pa.types.is_map(t):
        return _carries(t.key_type) and _carries(t.item_type)
    return (
        pa.types.is_boolean(t)
        or pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_date32(t)
    )


class Handoff:
    """One query's hand-off of Arrow data to Spark (see the module docstring)."""

    def __init__(self, folder: Path, local_rows: int) -> None:
        self.folder = folder
        self.local_rows = local_rows
        self._local = threading.local()  # the files of the calling thread's batch (a reconcile has its own)

    def clear(self) -> None:
        """Empty the query's folder (at its start: files a killed run left)."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def frame(self, session, data: pa.Table, schema):
        """A DataFrame of ``data`` (already of ``schema``'s Arrow types) with Spark schema ``schema``."""
        if data.num_rows <= self.local_rows or not parquet_carries(data.schema):
            return session.createDataFrame(data, schema=schema)
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{uuid.uuid4().hex}.parquet"
        self._files().append(path)
        pq.write_table(
            data,
            path,
            row_group_size=ROW_GROUP_ROWS,
            compression="none",
            use_dictionary=False,
            write_statistics=False,
        )
        return session.read.schema(schema).parquet(str(path))

    def release(self) -> None:
        """Delete the files this thread handed over (at the end of its micro-batch or reconcile)."""
        files = self._files()
        for path in files:
            path.unlink(missing_ok=True)
        files.clear()

    def _files(self) -> list[Path]:
        files = getattr(self._local, "files", None)
        if files is None:
            files = self._local.files = []
        return files
