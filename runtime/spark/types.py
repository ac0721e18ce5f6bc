"""Schema mapping between Spark and Arrow, and a Spark DDL parser that needs no SparkSession.

Mapping (both directions):

============================  ==================================
Spark                         Arrow
============================  ==================================
string / varchar / char       string (large_string read as string)
tinyint, smallint, int,       int8, int16, int32, int64
bigint
float, double                 float32, float64
decimal(p, s)                 decimal128(p, s)
boolean                       bool
date                          date32
timestamp (with time zone)    timestamp[us, tz=UTC]
timestamp_ntz                 timestamp[us]
binary                        binary (large_binary read as binary)
array<T>                      list<T>
map<K, V>                     map<K, V>
struct<a: T, ...>             struct<a: T, ...>
============================  ==================================

Arrow timestamps of another unit or zone map to Spark ``timestamp``; :func:`conform` casts such data to
``timestamp[us, tz=UTC]`` because Spark refuses ``timestamp[ms]``. Anything else raises
``TidehouseError(SPARK_TYPE_UNSUPPORTED)`` naming the column.

:func:`parse_ddl` reads the DDL that flows use for source schemas (``"user_id string, ts timestamp"``)
without starting Spark (``StructType.fromDDL`` needs an active session), so validation stays fast: the
grammar is the core's (:mod:`runtime.core.sparktypes`, shared with the registry); this module only maps
its tree to pyspark types.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
from pyspark.sql import types as T

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.sparktypes import Column, SparkType, SparkTypeError, parse_columns

_SIMPLE_TO_ARROW: dict[type, pa.DataType] = {
    T.StringType: pa.string(),
    T.VarcharType: pa.string(),
    T.CharType: pa.string(),
    T.ByteType: pa.int8(),
    T.ShortType: pa.int16(),
    T.IntegerType: pa.int32(),
    T.LongType: pa.int64(),
    T.FloatType: pa.float32(),
    T.DoubleType: pa.float64(),
    T.BooleanType: pa.bool_(),
    T.DateType: pa.date32(),
    T.TimestampType: pa.timestamp("us", tz="UTC"),
    T.TimestampNTZType: pa.timestamp("us"),
    T.BinaryType: pa.binary(),
}


def _unsupported(column: str, what: str, location: Location | None = None) -> TidehouseError:
    return TidehouseError(
        ErrorCode.SPARK_TYPE_UNSUPPORTED,
        f"column '{column}': type {what} is not supported by the Spark bridge",
        location=location,
        hint="use string, tinyint..bigint, float, double, decimal(p,s), boolean, date, timestamp, "
        "timestamp_ntz, binary, array, map or struct",
        params={"column": column, "type": what},
    )


# -- Spark -> Arrow ---------------------------------------------------------------------------------
def spark_type_to_arrow(dtype: T.DataType, column: str = "?") -> pa.DataType:
    """The Arrow type of a Spark type; ``column`` names the field in errors (``a.b[]`` for nested)."""
    simple = _SIMPLE_TO_ARROW.get(type(dtype))
    if simple is not None:
        return simple
    if isinstance(dtype, T.DecimalType):
        return pa.decimal128(dtype.precision, dtype.scale)
    if isinstance(dtype, T.ArrayType):
        return pa.list_(
            pa.field(
                "element", spark_type_to_arrow(dtype.elementType, f"{column}[]"), nullable=dtype.containsNull
            )
        )
    if isinstance(dtype, T.MapType):
        return pa.map_(
            spark_type_to_arrow(dtype.keyType, f"{column}.key"),
            pa.field(
                "value",
                spark_type_to_arrow(dtype.valueType, f"{column}.value"),
                nullable=dtype.valueContainsNull,
            ),
        )
    if isinstance(dtype, T.StructType):
        return pa.struct([spark_field_to_arrow(f, prefix=f"{column}.") for f in dtype.fields])
    raise _unsupported(column, dtype.simpleString())


def spark_field_to_arrow(field: T.StructField, prefix: str = "") -> pa.Field:
    return pa.field(
        field.name, spark_type_to_arrow(field.dataType, prefix + field.name), nullable=field.nullable
    )


def spark_to_arrow(schema: T.StructType) -> pa.Schema:
    """Arrow schema of a Spark ``StructType``."""
    return pa.schema([spark_field_to_arrow(f) for f in schema.fields])


# -- Arrow -> Spark ---------------------------------------------------------------------------------
def arrow_type_to_spark(dtype: pa.DataType, column: str = "?") -> T.DataType:
    """The Spark type of an Arrow type; raises SPARK_TYPE_UNSUPPORTED naming ``column``."""
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_string_view(dtype):
        return T.StringType()
    if pa.types.is_boolean(dtype):
        return T.BooleanType()
    for check, spark in (
        (pa.types.is_int8, T.ByteType),
        (pa.types.is_int16, T.ShortType),
        (pa.types.is_int32, T.IntegerType),
        (pa.types.is_int64, T.LongType),
        (pa.types.is_float32, T.FloatType),
        (pa.types.is_float64, T.DoubleType),
        (pa.types.is_date32, T.DateType),
    ):
        if check(dtype):
            return spark()
    if pa.types.is_decimal(dtype) and dtype.precision <= 38:
        return T.DecimalType(dtype.precision, dtype.scale)
    if pa.types.is_timestamp(dtype):
        return T.TimestampType() if dtype.tz is not None else T.TimestampNTZType()
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return T.BinaryType()
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        item = dtype.value_field
        return T.ArrayType(arrow_type_to_spark(item.type, f"{column}[]"), containsNull=item.nullable)
    if pa.types.is_map(dtype):
        return T.MapType(
            arrow_type_to_spark(dtype.key_type, f"{column}.key"),
            arrow_type_to_spark(dtype.item_type, f"{column}.value"),
            valueContainsNull=dtype.item_field.nullable,
        )
    if pa.types.is_struct(dtype):
        return T.StructType(
            [arrow_field_to_spark(dtype.field(i), prefix=f"{column}.") for i in range(dtype.num_fields)]
        )
    raise _unsupported(column, str(dtype))


def arrow_field_to_spark(field: pa.Field, prefix: str = "") -> T.StructField:
    return T.StructField(
        field.name, arrow_type_to_spark(field.type, prefix + field.name), nullable=field.nullable
    )


def arrow_to_spark(schema: pa.Schema) -> T.StructType:
    """Spark ``StructType`` of an Arrow schema."""
    return T.StructType([arrow_field_to_spark(f) for f in schema])


def spark_compatible(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema Spark exchanges for ``schema``: the round trip through Spark's type system
    (e.g. ``large_string`` -> ``string``, ``timestamp[ms]`` -> ``timestamp[us, tz=UTC]``)."""
    return spark_to_arrow(arrow_to_spark(schema))


def conform(data: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Select ``schema``'s columns of ``data`` in order and cast them where types differ (cheap no-op when
    they already match). Columns missing from ``data`` become nulls."""
    if data.schema.equals(schema, check_metadata=False):
        return data
    arrays = []
    for field in schema:
        idx = data.schema.get_field_index(field.name)
        if idx < 0:
            arrays.append(pa.nulls(data.num_rows, field.type))
            continue
        column = data.column(idx)
        arrays.append(column if column.type.equals(field.type) else column.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# -- DDL: the core grammar's tree mapped to Spark types ------------------------------------------------
_PRIMITIVE_TYPES: dict[str, type] = {
    "string": T.StringType,
    "tinyint": T.ByteType,
    "smallint": T.ShortType,
    "int": T.IntegerType,
    "bigint": T.LongType,
    "float": T.FloatType,
    "double": T.DoubleType,
    "boolean": T.BooleanType,
    "date": T.DateType,
    "timestamp": T.TimestampType,
    "timestamp_ntz": T.TimestampNTZType,
    "binary": T.BinaryType,
    "varchar": T.StringType,
    "char": T.StringType,  # Spark reads and writes them as strings
}


def to_spark_type(parsed: SparkType) -> T.DataType:
    """The pyspark type of a type parsed by :mod:`runtime.core.sparktypes`."""
    if parsed.name in _PRIMITIVE_TYPES:
        return _PRIMITIVE_TYPES[parsed.name]()
    if parsed.name == "decimal":
        return T.DecimalType(*parsed.args)
    if parsed.name == "array":
        return T.ArrayType(to_spark_type(parsed.args[0]))
    if parsed.name == "map":
        return T.MapType(to_spark_type(parsed.args[0]), to_spark_type(parsed.args[1]))
    return to_spark_struct(parsed.args)  # struct


def to_spark_struct(columns: Iterable[Column]) -> T.StructType:
    """The pyspark ``StructType`` of parsed columns (``NOT NULL`` kept; comments dropped)."""
    return T.StructType([T.StructField(c.name, to_spark_type(c.type), c.nullable) for c in columns])


def parse_ddl(ddl: str, location: Location | None = None) -> T.StructType:
    """Parse a Spark DDL schema (``"a int, b array<string>, c struct<x: double>"``) into a StructType.

    Raises ``SPEC_BAD_VALUE`` for syntax errors and ``SPARK_TYPE_UNSUPPORTED`` for unknown types, both
    carrying ``location`` (e.g. the YAML position of the ``schema:`` field).
    """
    try:
        return to_spark_struct(parse_columns(ddl))
    except SparkTypeError as exc:
        if exc.unknown_type is not None:
            raise _unsupported(exc.column, exc.unknown_type, location) from None
        raise TidehouseError(
            ErrorCode.SPEC_BAD_VALUE,
            f"invalid schema: {exc}",
            location=location,
            hint="write a Spark DDL schema such as 'id bigint, name string, ts timestamp'",
        ) from None


def ddl_to_arrow(ddl: str, location: Location | None = None) -> pa.Schema:
    """Arrow schema of a Spark DDL string."""
    return spark_to_arrow(parse_ddl(ddl, location))


def arrow_to_ddl(schema: pa.Schema) -> str:
    """Spark DDL of an Arrow schema (round-trips through :func:`parse_ddl`)."""
    return ", ".join(
        f"`{f.name}` {_ddl(f.dataType)}" + ("" if f.nullable else " NOT NULL")
        for f in arrow_to_spark(schema).fields
    )


def _ddl(dtype: T.DataType) -> str:
    if isinstance(dtype, T.StructType):
        return (
            "struct<"
            + ", ".join(
                f"`{f.name}`: {_ddl(f.dataType)}" + ("" if f.nullable else " NOT NULL") for f in dtype.fields
            )
            + ">"
        )
    if isinstance(dtype, T.ArrayType):
        return f"array<{_ddl(dtype.elementType)}>"
    if isinstance(dtype, T.MapType):
        return f"map<{_ddl(dtype.keyType)}, {_ddl(dtype.valueType)}>"
    return dtype.simpleString()
