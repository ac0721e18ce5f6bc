"""The quarantine's reason for a malformed JSON or CSV record names the field and value Spark's parser
refused (``materializer.malformed``), checked against Spark itself: a seeded mix of records, each with values
of every declared type, some of them ones Spark refuses, is read by Spark's reader in permissive mode. No
record Spark accepts is blamed for anything, and every record Spark refuses for one value of the pool's sure
faults is blamed for that field."""

from __future__ import annotations

import json
import os
import random

import pytest

from materializer.malformed import GENERAL, Malformed
from materializer.rows import CORRUPT, split_corrupt

DDL = (
    "rid bigint, n int, big bigint, tiny tinyint, price double, ok boolean, ts timestamp, day date, "
    "amount decimal(4,2), name string, tags array<int>, s struct<a: int, b: boolean>, m map<string,bigint>, "
    "blob binary, local timestamp_ntz"
)
# column -> (values Spark takes, values it surely refuses, values whose fate depends on more than the type)
POOL: dict[str, tuple[list, list, list]] = {
    "n": ([1, -5, 2147483647, None], [1.5, "12", True, 3000000000, "", [1], {"a": 1}, 1e2], []),
    "big": ([2**63 - 1, -(2**63)], [2**63, 1.0, "7"], []),
    "tiny": ([127, -128, 255], [256, -129], []),
    "price": (
        [1, 1.5, "NaN", "-Infinity", "+INF", 1e308, None],
        ["twelve", "", True, [1], {"x": 1}, "1.5"],
        [],
    ),
    "ok": ([True, False], ["true", 1, 0, ""], []),
    "ts": (
        ["2024-05-01T09:00:00.000Z", "2024-05-01", 1714554000, "2024-05-01 09:00"],
        ["yesterday", "", True, 1.5, [1], {"a": 1}],
        ["2024-13-45", "20240501"],
    ),
    "day": (["2024-05-01"], ["x", True, [1], {"a": 1}, 1.5], [19000, "2024-02-30"]),
    "amount": ([12.34, 1, "12.5", 99.994, -99.99], [99.999, 100, "abc", True, [1]], ["1,5"]),
    "name": (["a", 1, True, {"a": 1}, [1, 2], 2.5], [], []),
    "tags": ([[1, 2], [], [None]], ["x", [1, "x"], {"a": 1}, [1.5]], []),
    "s": ([{"a": 1, "b": True}, {}, {"c": "x"}], [[1], {"a": "x"}, "s", {"b": "no"}], []),
    "m": ([{"k": 1}, {}], [{"k": "v"}, [1]], []),
    "blob": (["aGVsbG8="], [1, True], ["!!!"]),
    "local": (["2024-05-01T09:00:00"], [True, [1]], [1714554000]),
}
WHOLE = ['{"rid": 1, "n": 1', '"a string"', "3", "[1, 2]", "{'rid': 2, 'n': 'x'}", '{"rid": 3} trailing']


def test_reasons_name_the_field_value_and_type():
    why = Malformed("json", "user_id string, price double, n int, tags array<int>, d decimal(4,2)")
    assert why.reason('{"price": "twelve"}') == 'malformed json record: field price: "twelve" is not a double'
    assert why.reason('{"n": 1.5, "tags": [1, "x"], "d": 99.999}') == (
        'malformed json record: field n: 1.5 is not an int; field tags[1]: "x" is not an int; '
        "field d: 99.999 does not fit decimal(4,2)"
    )
    assert why.reason('{"user_id":"u0097","pri') == (
        "malformed json record: not valid JSON (Unterminated string starting at: character 20)"
    )
    assert why.reason("42") == "malformed json record: a JSON integer, not an object"
    assert (
        why.reason('{"n": 3000000000}') == "malformed json record: field n: 3000000000 is out of int's range"
    )
    # an integer of more digits than Python converts (4,300) is no reason to fail the batch
    assert why.reason('{"n": ' + "9" * 5000 + "}") == f"malformed json record: {GENERAL}"
    huge = Malformed("csv", "n int").reason("9" * 5000)
    assert huge == 'malformed csv record: field n: "' + "9" * 36 + "... is out of int's range"
    # not sure why (a value of the right kind, a parser option, no schema): the general reason
    assert why.reason('{"d": "12.5x"}') == f"malformed json record: {GENERAL}"
    assert Malformed("json", "n int", (("allowComments", "true"),)).reason('{"n": 1.5}').endswith(GENERAL)
    assert Malformed("csv", "n int", (("quote", "'"),)).reason("1.5") == f"malformed csv record: {GENERAL}"
    assert Malformed("json", None).reason('{"n": 1.5}').endswith(GENERAL)


def test_split_corrupt_gives_each_record_its_reason():
    import pyarrow as pa

    data = pa.table({"n": [None, 1, None], CORRUPT: ['{"n": "x"}', None, "{"]})
    kept, bad = split_corrupt(data, "events", Malformed("json", "n int"))
    assert kept.num_rows == 1 and bad.column("source").to_pylist() == ["events", "events"]
    assert bad.column("reason").to_pylist() == [
        'malformed json record: field n: "x" is not an int',
        "malformed json record: not valid JSON "
        "(Expecting property name enclosed in double quotes: character 2)",
    ]


def _records(rng: random.Random) -> tuple[list[str], dict[str, str]]:
    """(JSON lines, the line -> the one column given a value Spark surely refuses)."""
    lines, sure = [], {}
    for rid in range(10, 1500):
        record: dict = {"rid": rid}
        for column, (good, _, unsure) in POOL.items():
            if rng.random() < 0.4:
                record[column] = rng.choice(good + unsure if rng.random() < 0.2 else good)
        if rid % 2:  # one value Spark refuses, the others it takes
            column = rng.choice([c for c in POOL if POOL[c][1]])
            record[column] = rng.choice(POOL[column][1])
            for other in [c for c in record if c in POOL and c != column and record[c] not in POOL[c][0]]:
                del record[other]
            sure[json.dumps(record)] = column
        lines.append(json.dumps(record))
    return lines + WHOLE, sure


def _refused_by_spark(spark, tmp_path, why: Malformed, lines: list[str], sure: dict[str, str], seed) -> set:
    """The lines Spark's reader of ``why``'s format refuses with its schema, after checking that no line it
    takes is blamed for anything and each line of ``sure`` is refused and blamed for its column."""
    path = tmp_path / f"in.{why.format}"
    path.write_text("\n".join(lines) + "\n")
    reader = spark.read.schema(f"{why.ddl}, `{CORRUPT}` string").options(**dict(why.options))
    reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT)
    rows = reader.format(why.format).load(str(path)).collect()  # every column: Spark converts only those read
    refused = {r[CORRUPT] for r in rows if r[CORRUPT] is not None}
    taken = [line for line in lines if line not in refused]
    assert len(taken) > 400, len(taken)
    blamed = [(line, why.reason(line)) for line in taken if not why.reason(line).endswith(GENERAL)]
    assert not blamed, f"seed {seed}: Spark takes these records, yet a fault is named: {blamed[:5]}"
    for line, column in sure.items():
        assert line in refused, f"seed {seed}: Spark takes {line}: its value of {column} is in the wrong pool"
        assert f"field {column}" in why.reason(line), (seed, line, why.reason(line))
    return refused


@pytest.mark.spark
def test_no_record_spark_takes_is_blamed_and_each_sure_fault_is_named(spark, tmp_path):
    seed = int(os.environ.get("TIDEHOUSE_SEED", random.randrange(1 << 30)))
    print(f"seed {seed}")
    lines, sure = _records(random.Random(seed))
    why = Malformed("json", DDL)
    refused = _refused_by_spark(spark, tmp_path, why, lines, sure, seed)
    assert len(refused) > 700
    assert {c.split(" ")[0] for c in DDL.split(", ")} >= set(POOL)
    assert why.reason(WHOLE[0]).startswith("malformed json record: not valid JSON")
    assert all(w in refused for w in WHOLE if "'" not in w and "trailing" not in w)


def test_any_json_value_of_any_column_gets_a_reason():
    """The reasons are worked out in the batch that quarantines: no value may make them raise."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("ab"), inner, max_size=3),
        max_leaves=8,
    )
    why = Malformed("json", DDL)

    @settings(max_examples=300, deadline=None)
    @given(st.dictionaries(st.sampled_from(sorted(POOL)), values, max_size=4))
    def check(record):
        reason = why.reason(json.dumps(record))
        assert reason.startswith("malformed json record: ") and len(reason) < 400

    check()


CSV_DDL = (
    "n int, tiny tinyint, big bigint, price double, ok boolean, ts timestamp, day date, amount decimal(4,2), "
    "name string"
)
CSV_POOL: dict[
    str, tuple[list[str], list[str]]
] = {  # column -> (fields Spark takes, fields it surely refuses)
    "n": (["1", "-5", "+7", "2147483647", ""], ["1.5", " 3", "x", "3000000000", "1e2"]),
    "tiny": (["127", "-128"], ["200", "-129"]),
    "big": (["9223372036854775807"], ["9223372036854775808", "7L"]),
    "price": (["1", "1.5", "NaN", "Inf", "-Inf", "1e308", " 1.5", "1.5d", ""], ["twelve", "--1", "1..2"]),
    "ok": (["true", "FALSE", "True", ""], ["1", "yes", " true"]),
    "ts": (["2024-05-01T09:00:00.000Z", "2024-05-01", ""], ["yesterday"]),
    "day": (["2024-05-01"], ["x"]),
    "amount": (["12.34", "1"], ["abc"]),
    "name": (["a", "hello world", "1.5", ""], []),
}


@pytest.mark.spark
def test_csv_no_record_spark_takes_is_blamed_and_each_sure_fault_is_named(spark, tmp_path):
    seed = int(os.environ.get("TIDEHOUSE_SEED", random.randrange(1 << 30)))
    print(f"seed {seed}")
    rng = random.Random(seed)
    lines, sure = [], {}
    for i in range(1200):
        fields = {c: rng.choice(good) for c, (good, _) in CSV_POOL.items()}
        fields["name"] = f"r{i}"  # each line its own
        if i % 2:
            column = rng.choice([c for c in CSV_POOL if CSV_POOL[c][1]])
            fields[column] = rng.choice(CSV_POOL[column][1])
            sure[",".join(fields.values())] = column
        lines.append(",".join(fields.values()))
    lines += ["short,1", "1,2,3,4,5,6,7,8,9,10"]
    why = Malformed("csv", CSV_DDL, (("header", "false"),))
    refused = _refused_by_spark(spark, tmp_path, why, lines, sure, seed)
    assert len(refused) > 500
    assert why.reason("short,1") == "malformed csv record: 2 fields, the schema has 9 columns"
    assert {"short,1", "1,2,3,4,5,6,7,8,9,10"} <= refused
