"""The driver data path's JSON Lines reader: a micro-batch's files parsed by Arrow in the driver, giving
exactly the rows Spark's JSON source gives, or nothing (then Spark reads the batch).

Why: on the driver path a source's micro-batch is collected into the driver anyway. Spark parsing it and
handing it over as Arrow costs ~2 CPU s per million rows of the vs_sdp events, Arrow's JSON parser ~0.6
(docs/benchmarks.md). The two parsers differ in many corners, so this reader takes only what both read
alike and hands everything else to Spark, whole batch, never part of one:

* **When** (:func:`refusal`): format ``json`` with a declared schema of string, int, bigint, double,
  boolean and timestamp columns; no option that changes parsing (only file-selection options such as
  ``maxFilesPerTrigger``); Spark's session time zone UTC and its default date-time parsing.
* **What** (:meth:`JsonLinesReader.read`), per file: a local file without a compression suffix and not in
  a ``key=value`` folder (Spark reads partition columns from those), UTF-8
  without a byte-order mark, ``\\n`` line ends, the first record an object; Arrow's parse must succeed with
  **one row per line** (a blank line, or two records on one line, is Spark's) and no all-null row (Spark
  quarantines a ``null`` line, Arrow would give a row); strings valid UTF-8; every timestamp in the ISO
  forms both read alike (``2026-11-26``, ``2026-11-26T19:33``, ``2026-11-26 19:33:17.123456+01:00``, ...).
  Anything Arrow refuses — a malformed record, a number in a string column, ``1e400`` — goes to Spark,
  which quarantines what does not parse.

Arrow's JSON parser crashes the process on a ``null`` first record of a block (apache/arrow#47409); each
file is one block here and its first record is checked to be an object before Arrow sees it.
``tests/materializer/test_mat_jsonlines.py`` compares both parsers on randomized files.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from materializer.analyze import struct_of
from materializer.plan import FlowPlan, SourcePlan, TablePlan
from materializer.rows import CORRUPT, FILE
from runtime.core.uris import local_path, scheme_of
from runtime.spark.types import spark_to_arrow

# options that choose files, not how they parse (compared lower-cased)
_FILE_OPTIONS = {
    "maxfilespertrigger",
    "maxbytespertrigger",
    "latestfirst",
    "filenameonly",
    "maxfileage",
    "maxcachedfiles",
    "discardcachedinputratio",
    "cleansource",
    "sourcearchivedir",
    "pathglobfilter",
    "recursivefilelookup",
    "modifiedbefore",
    "modifiedafter",
}
_TYPES = (pa.string(), pa.int32(), pa.int64(), pa.float64(), pa.bool_(), pa.timestamp("us", tz="UTC"))
_UTC = {"UTC"}  # Spark names its batch's timestamp zone after the session's
# Hadoop picks a decompression codec by these suffixes
_COMPRESSED = {".gz", ".bz2", ".deflate", ".lz4", ".snappy", ".zst", ".zstd", ".xz", ".br", ".lzo"}
# the timestamp forms Spark's default parsing and Arrow's ISO 8601 cast read alike (the tests compare them)
_OFFSET = r"(?:Z|[+-]\d{2}:?\d{2})"
_TIME = r"[T ]\d{2}(?::\d{2}(?::\d{2}(?:\.\d{1,6})?)?)?"  # T19, T19:33, T19:33:17, T19:33:17.123456
_TIMESTAMP = rf"^[1-9]\d{{3}}-\d{{2}}-\d{{2}}(?:{_TIME}{_OFFSET}?)?$"
log = logging.getLogger(__name__)
_FIRST_OBJECT = re.compile(rb"[ \t\n]*\{")
# Spark settings that change how it parses JSON dates and times, and the values this reader matches
_CONF = {
    "spark.sql.legacy.timeParserPolicy": ("CORRECTED",),
    "spark.sql.json.enableDateTimeParsingFallback": (None, "true"),
}


SPARK_SETTINGS = ("spark.sql.session.timeZone", *_CONF)


def refusal(source: SourcePlan, conf: dict[str, str | None]) -> str | None:
    """Why this reader never reads ``source`` (Spark does), or None when it reads its batches. ``conf``:
    the session's values of :data:`SPARK_SETTINGS` (None: not set)."""
    if source.format != "json" or not source.ddl:
        return "not a JSON source with a declared schema"
    for field in spark_to_arrow(struct_of(source.ddl)):
        if field.type not in _TYPES:
            return (
                f"column {field.name} is {field.type} (the Arrow reader takes string, int, bigint, double, "
                "boolean and timestamp)"
            )
    for key, value in source.options:
        if key.lower() not in _FILE_OPTIONS and not (key.lower() == "multiline" and value.lower() == "false"):
            return f"option {key} changes how Spark parses"
    zone = conf.get("spark.sql.session.timeZone")
    if zone not in _UTC:
        return f"the session time zone is {zone}, not UTC"
    for key, allowed in _CONF.items():
        value = conf.get(key)
        if (value.upper() if key.endswith("Policy") and value else value) not in allowed:
            return f"{key} is {value}"
    return None


def reader_of(flow: FlowPlan, table: TablePlan, spark) -> JsonLinesReader | None:
    """The reader of ``table``'s JSON source — in the driver on the driver path, in one task on the executor
    path —, or None: Spark reads it (not an append over a JSON source, or a refusal, logged)."""
    stream = next((i for i in table.inputs if i.kind in ("source", "log")), None)
    if table.strategy != "append" or stream is None or stream.kind != "source":
        return None
    source = flow.source(stream.ref.split(":", 1)[1])
    if source.format != "json":
        return None
    why = refusal(source, {key: _setting(spark, key) for key in SPARK_SETTINGS})
    if why:
        log.info("flow %s: Spark parses source %s of %s: %s", flow.flow, source.name, table.name, why)
        return None
    return JsonLinesReader(source)


def _setting(spark, key: str) -> str | None:
    """A Spark SQL setting's value (its default when not set), None for a setting without a default."""
    from pyspark.errors import PySparkException

    try:
        return spark.conf.get(key)
    except PySparkException:  # SQL_CONF_NOT_FOUND
        return None


class JsonLinesReader:
    """Reads the files of a micro-batch of one JSON source, as Spark's source would read them."""

    def __init__(self, source: SourcePlan) -> None:
        self.target = spark_to_arrow(struct_of(source.ddl))
        self.corrupt = source.quarantines  # Spark's batch carries the malformed-record column (all null here)
        self.required = [c for c in source.required if c in self.target.names]  # the rows to name a file of
        as_read = [  # timestamps as text: checked and converted here (_timestamps)
            pa.field(f.name, pa.string() if pa.types.is_timestamp(f.type) else f.type) for f in self.target
        ]
        self.options = pj.ParseOptions(explicit_schema=pa.schema(as_read), unexpected_field_behavior="ignore")

    def read(self, files: list[str]) -> tuple[pa.Table | None, str | None]:
        """(the batch's rows with the schema of Spark's batch, None) or (None, why Spark reads them)."""
        parts, named = [], []
        for uri in files:
            table, why = self._file(uri)
            if table is None:
                return None, why
            parts.append(table)
            named.append(self._named(table, uri))
        table = pa.concat_tables(parts) if parts else self.target.empty_table()
        if self.corrupt:
            table = table.append_column(pa.field(CORRUPT, pa.string()), pa.nulls(table.num_rows, pa.string()))
            file = pa.chunked_array(named, pa.string()) if named else pa.nulls(0, pa.string())
            table = table.append_column(pa.field(FILE, pa.string()), file)
        return table, None

    def _named(self, table: pa.Table, uri: str) -> pa.Array:
        """The :data:`~materializer.rows.FILE` column of a file's rows: ``uri`` where a column declared NOT
        NULL is null (the row goes to quarantine), else null — as Spark's reader gives it."""
        if not self.required or not any(table.column(c).null_count for c in self.required):
            return pa.nulls(table.num_rows, pa.string())
        missing = pc.is_null(table.column(self.required[0]))
        for c in self.required[1:]:
            missing = pc.or_(missing, pc.is_null(table.column(c)))
        return pc.if_else(missing, pa.scalar(uri), pa.scalar(None, pa.string())).combine_chunks()

    def _file(self, uri: str) -> tuple[pa.Table | None, str | None]:
        if scheme_of(uri) not in ("", "file"):
            return None, f"{uri} is not a local file"
        path = local_path(uri)
        if path.suffix.lower() in _COMPRESSED:
            return None, f"{path.name} is compressed"
        if any("=" in part for part in path.parent.parts):  # Spark adds partition columns from key=value
            return None, f"{path} is in a key=value folder"
        try:
            data = path.read_bytes()
        except OSError as exc:
            return None, f"{path.name}: {exc.strerror or exc}"
        return self._parse(path, data)

    def _parse(self, path: Path, data: bytes) -> tuple[pa.Table | None, str | None]:
        if not data.strip():
            return self.target.empty_table(), None
        if b"\r" in data:
            return None, f"{path.name} has \\r line ends"
        if not _FIRST_OBJECT.match(data):
            return None, f"{path.name} does not start with a JSON object"
        if len(data) >= 2**31 - 1:
            return None, f"{path.name} is 2 GiB or more"
        lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
        try:
            read = pj.ReadOptions(use_threads=False, block_size=len(data) + 1)  # one block: see the module
            table = pj.read_json(pa.BufferReader(data), read_options=read, parse_options=self.options)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            return None, f"{path.name}: {str(exc).splitlines()[0]}"
        if table.num_rows != lines:
            return None, f"{path.name}: {lines} lines, {table.num_rows} records"
        try:
            table.validate(full=True)  # Arrow keeps invalid UTF-8 in strings; Spark replaces it
        except pa.ArrowInvalid:
            return None, f"{path.name} is not valid UTF-8"
        if table.num_columns and table.num_rows:
            nulls = [pc.is_null(c) for c in table.columns]
            all_null = nulls[0]
            for n in nulls[1:]:
                all_null = pc.and_(all_null, n)
            if pc.any(all_null).as_py():
                return None, f"{path.name} has a record with no column of the schema (null or {{}})"
        columns = []
        for field, column in zip(self.target, table.columns):
            if pa.types.is_timestamp(field.type):
                column = _timestamps(column, field.type)
                if column is None:
                    return None, f"{path.name}: a {field.name} value Spark may read otherwise"
            columns.append(column)
        return pa.Table.from_arrays(columns, schema=self.target), None


def _timestamps(column: pa.ChunkedArray, to: pa.DataType) -> pa.ChunkedArray | None:
    """ISO 8601 strings as UTC timestamps (no offset: UTC, the session's zone), or None if a value is not in
    a form both parsers read alike or names no valid instant."""
    if column.null_count == len(column):
        return column.cast(to)
    ok = pc.match_substring_regex(column, _TIMESTAMP)
    if not pc.all(ok).as_py():  # nulls skipped
        return None
    date_only = pc.equal(pc.utf8_length(column), 10)
    zoned = pc.match_substring_regex(column, _OFFSET + "$")
    if pc.all(zoned).as_py() and not pc.any(date_only).as_py():  # every value names its offset: as it is
        text = column
    else:
        text = pc.if_else(
            date_only,
            pc.binary_join_element_wise(column, "T00:00:00Z", ""),
            pc.if_else(zoned, column, pc.binary_join_element_wise(column, "Z", "")),
        )
    try:
        return text.cast(to)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


__all__ = ["SPARK_SETTINGS", "JsonLinesReader", "reader_of", "refusal"]
