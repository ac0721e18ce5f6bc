"""One Spark DDL grammar (runtime/core/sparktypes.py) for the registry and the Spark bridge.

Before, the registry and the Spark bridge each had a parser, with different grammars. Every spelling either
accepted is accepted by both now (the table below names which side accepted it before), and every error is
refused by both, at the same place.
"""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from registry.specs import parse_action_text, parse_flow_text
from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.sparktypes import Column, SparkType, SparkTypeError, parse_columns, parse_type
from runtime.spark.types import parse_ddl

S = T.StructField

# (DDL, the StructType the Spark bridge makes of it, who accepted it before the grammar was one)
SPELLINGS = [
    ("a int, b string", T.StructType([S("a", T.IntegerType()), S("b", T.StringType())]), "both"),
    (
        "A INTEGER, b Long, c SHORT, d BYTE, e REAL, f BOOL",
        T.StructType(
            [
                S("A", T.IntegerType()),
                S("b", T.LongType()),
                S("c", T.ShortType()),
                S("d", T.ByteType()),
                S("e", T.FloatType()),
                S("f", T.BooleanType()),
            ]
        ),
        "both",
    ),
    (
        "t timestamp_ltz, n timestamp_ntz, d date, x binary",
        T.StructType(
            [
                S("t", T.TimestampType()),
                S("n", T.TimestampNTZType()),
                S("d", T.DateType()),
                S("x", T.BinaryType()),
            ]
        ),
        "both",
    ),
    (
        "d dec, n numeric(5), m decimal(38, 38)",
        T.StructType(
            [S("d", T.DecimalType(10, 0)), S("n", T.DecimalType(5, 0)), S("m", T.DecimalType(38, 38))]
        ),
        "both",
    ),
    ("v varchar(10), c char(2)", T.StructType([S("v", T.StringType()), S("c", T.StringType())]), "both"),
    (
        "`odd name` string, `a``b` int",
        T.StructType([S("odd name", T.StringType()), S("a`b", T.IntegerType())]),
        "both",
    ),
    (
        "m map<string, array<struct<x: double, y int>>>",
        T.StructType(
            [
                S(
                    "m",
                    T.MapType(
                        T.StringType(),
                        T.ArrayType(T.StructType([S("x", T.DoubleType()), S("y", T.IntegerType())])),
                    ),
                )
            ]
        ),
        "both",
    ),
    (
        "id bigint NOT NULL, k string not null",
        T.StructType([S("id", T.LongType(), False), S("k", T.StringType(), False)]),
        "both",
    ),
    ("a: int, b: string", T.StructType([S("a", T.IntegerType()), S("b", T.StringType())]), "registry"),
    (
        "a int COMMENT 'the \\'a\\' column', b string NOT NULL COMMENT 'b'",
        T.StructType([S("a", T.IntegerType()), S("b", T.StringType(), False)]),
        "bridge",
    ),
    (
        "s struct<a: int NOT NULL COMMENT 'x', `b c`: string>",
        T.StructType([S("s", T.StructType([S("a", T.IntegerType(), False), S("b c", T.StringType())]))]),
        "bridge",
    ),
    ("e struct<>", T.StructType([S("e", T.StructType([]))]), "bridge"),
]


@pytest.mark.parametrize("ddl, struct, before", SPELLINGS, ids=[s[0][:30] for s in SPELLINGS])
def test_every_spelling_either_side_accepted_is_accepted_by_both(ddl, struct, before):
    assert parse_ddl(ddl) == struct  # the Spark bridge
    source = parse_flow_text(  # the registry: a source schema
        'flow: f\nsources:\n  s: {format: json, path: x, schema: "' + ddl.replace("\\", "\\\\") + '"}\n'
        "layers:\n  ods:\n    t: {action: ingest, inputs: {raw: s}}\n",
        "f.yaml",
    ).sources["s"]
    assert source.schema_ == ddl
    columns = parse_columns(ddl)
    assert [(c.name, c.nullable) for c in columns] == [(f.name, f.nullable) for f in struct.fields]


BAD = [
    # (DDL, the bridge's error code, 1-based character the message points at or None)
    ("", ErrorCode.SPEC_BAD_VALUE, None),
    ("a int,", ErrorCode.SPEC_BAD_VALUE, None),
    ("a int b", ErrorCode.SPEC_BAD_VALUE, 7),
    ("a array<int", ErrorCode.SPEC_BAD_VALUE, None),
    ("a decimal(40,2)", ErrorCode.SPEC_BAD_VALUE, None),
    ("a varchar(x)", ErrorCode.SPEC_BAD_VALUE, 11),  # the bridge took any token as the length
    ("a decimal(p)", ErrorCode.SPEC_BAD_VALUE, 11),  # the bridge failed with a ValueError
    ("a int, A string", ErrorCode.SPEC_BAD_VALUE, 8),  # the registry took it until the plan refused it
    ("s struct<a int, a string>", ErrorCode.SPEC_BAD_VALUE, 17),
    ("a, b int", ErrorCode.SPEC_BAD_VALUE, 1),  # a schema needs types
    ("a int COMMENT x", ErrorCode.SPEC_BAD_VALUE, 15),
    ("a int; drop table x", ErrorCode.SPEC_BAD_VALUE, 6),
    ("a interval", ErrorCode.SPARK_TYPE_UNSUPPORTED, None),
    ("s struct<x: map<string, interval>>", ErrorCode.SPARK_TYPE_UNSUPPORTED, None),
]


@pytest.mark.parametrize("ddl, code, char", BAD, ids=[b[0] or "empty" for b in BAD])
def test_what_one_side_refuses_both_refuse_at_the_same_place(ddl, code, char):
    where = Location("flows/f.yaml", 7, 13, "sources.clicks.schema")
    with pytest.raises(TidehouseError) as bridge:
        parse_ddl(ddl, where)
    assert bridge.value.code == code and bridge.value.location == where
    with pytest.raises(SparkTypeError) as core:
        parse_columns(ddl)
    if char is not None:
        assert (
            f"at character {char} of" in str(core.value) and f"at character {char} of" in bridge.value.message
        )
    flow = (
        'flow: f\nsources:\n  s:\n    format: json\n    path: x\n    schema: "' + ddl + '"\n'
        "layers:\n  ods:\n    t: {action: ingest, inputs: {raw: s}}\n"
    )
    with pytest.raises(TidehouseError) as registry:
        parse_flow_text(flow, "f.yaml")
    assert registry.value.location.line == 6 and registry.value.location.path == "sources.s.schema"


def test_unknown_types_name_the_column_path():
    with pytest.raises(TidehouseError) as info:
        parse_ddl("s struct<x: map<string, interval>>")
    assert info.value.params == {"column": "s.x.value", "type": "interval"}
    with pytest.raises(SparkTypeError) as core:
        parse_type("array<interval>")
    assert core.value.unknown_type == "interval" and core.value.column == "[]"


def test_the_tree():
    assert parse_type("ARRAY<Map<string, DEC(5,2)>>") == SparkType(
        "array", (SparkType("map", (SparkType("string"), SparkType("decimal", (5, 2)))),)
    )
    assert str(parse_type("struct<a: int NOT NULL, b: varchar(3)>")) == "struct<a:int NOT NULL,b:varchar(3)>"
    assert parse_columns("a, b bigint", untyped=True) == (Column("a", None), Column("b", SparkType("bigint")))
    with pytest.raises(SparkTypeError, match="column 'a' has no type"):
        parse_columns("a, b bigint")
    with pytest.raises(SparkTypeError, match=r"field 's\.a' has no type"):
        parse_columns("s struct<a>", untyped=True)  # names alone only at the top of a contract


def test_parameter_types_and_output_contracts_use_the_same_grammar():
    action = parse_action_text(
        "/*---\nname: a\nparams:\n  p: {type: 'struct<x: int NOT NULL, y: string>', "
        "default: {x: 1, y: b}}\noutput: \"k string COMMENT 'key', n bigint\"\n---*/\n"
        "SELECT :p AS p\n"
    )
    assert action.params["p"].spark_type.args[0] == Column("x", SparkType("int"), nullable=False)
    assert action.output_columns == ("k", "n")
    with pytest.raises(TidehouseError, match=r"is listed twice|duplicate column"):
        parse_action_text("/*---\nname: a\noutput: [a, A]\n---*/\nSELECT 1\n")
