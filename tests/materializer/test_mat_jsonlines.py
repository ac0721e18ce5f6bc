"""The JSON Lines reader gives exactly Spark's rows, or refuses the file (materializer.jsonlines).

Randomized files — typed values, nulls, absent and unknown fields, escapes, every timestamp form, numbers in
every JSON spelling, and lines Spark quarantines or reads differently (``null``, ``{}``, two records on a
line, trailing text, a blank line, ``\\r\\n``, invalid UTF-8, single quotes, NaN) — are read by Spark's JSON
source (the schema and options a flow's source gets) and by the reader, file by file: each file the reader
accepts must hold Spark's multiset of rows, with Spark's Arrow schema, and every file made of forms both
parsers read alike must be accepted (so the test fails if the reader refuses too much). Each file is parsed
by Arrow in this process: a parser crash fails the test run loudly.
"""

from __future__ import annotations

import json
import random

import pytest

from tests._support import scale

pytestmark = pytest.mark.spark

DDL = "s string, l bigint, i int, d double, b boolean, t timestamp"
CORRUPT = "_corrupt_record"
FILE = "__source_file"

# timestamps: forms both parsers read alike, and forms the reader must refuse (Spark's own lenient forms,
# invalid instants)
ALIKE_TIMES = [
    "2026-11-26T19:33:17Z",
    "2026-11-26T19:33:17",
    "2026-11-26 19:33:17",
    "2026-11-26T19:33:17.5Z",
    "2026-11-26T19:33:17.123456+05:30",
    "2026-11-26 19:33:17.12-0800",
    "2026-11-26T19:33",
    "2026-11-26T19",
    "2026-11-26",
    "1999-12-31T23:59:59.999999-00:00",
    "1582-10-10T00:00:00Z",
]
OTHER_TIMES = [
    "2026-11-26T19:33:17.1234567Z",
    "2026-1-2T19:33:17Z",
    " 2026-11-26T19:33:17Z",
    "2026-02-30T00:00:00Z",
    "2026-11-26T24:00:00Z",
    "2026-11-26t19:33:17z",
    "12026-11-26T00:00:00Z",
    "2026-11-26Z",
    "garbage",
    "",
]
ALIKE_STRINGS = ["a", "", "é", "😀", "tab\there", "line\nbreak", 'quote"', "back\\slash", "\u2028", "a\x00b"]
ALIKE_STRINGS += ["/", "{not json}"]


def _value(rng: random.Random, column: str, clean: bool):
    """(JSON text of a value for ``column``, or None to leave the field out)."""
    roll = rng.random()
    if roll < 0.08:
        return "null"
    if roll < 0.14:
        return None
    if not clean and roll < 0.24:  # a value of another type, or a spelling only Spark reads
        return rng.choice(
            [
                '"5"',
                "5",
                "1.5",
                "true",
                '{"x":1}',
                "[1,2]",
                "NaN",
                "Infinity",
                "1e400",
                "01",
                '"\\ud83d"',
                "''",
            ]
        )
    if column == "s":
        text = rng.choice(ALIKE_STRINGS) + str(rng.randrange(100))
        return json.dumps(text, ensure_ascii=rng.random() < 0.5)
    if column == "l":
        return str(rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randrange(-(10**12), 10**12)]))
    if column == "i":
        return str(rng.choice([0, -(2**31), 2**31 - 1, rng.randrange(-1000, 1000)]))
    if column == "d":
        return rng.choice(
            [
                repr(rng.uniform(-1e6, 1e6)),
                "5",
                "-0.0",
                "1E5",
                "1.5e-3",
                "4.9e-324",
                repr(rng.random() * 1e300),
            ]
        )
    if column == "b":
        return rng.choice(["true", "false"])
    times = ALIKE_TIMES + (OTHER_TIMES if not clean else [])
    return json.dumps(rng.choice(times))


def _record(rng: random.Random, clean: bool) -> str:
    fields, values = [], []
    for column in ("s", "l", "i", "d", "b", "t"):
        value = _value(rng, column, clean)
        if value is not None:
            fields.append(f'"{column}":{value}')
            values.append(value)
    if all(v == "null" for v in values):  # no value: the reader refuses such a record (as a null line)
        fields = [f for f in fields if not f.startswith('"s"')] + ['"s":"only"']
    if rng.random() < 0.2:  # a field the schema does not name, nested
        fields.insert(rng.randrange(len(fields) + 1), '"extra":{"y":[1,{"z":null}],"w":"x"}')
    rng.shuffle(fields)
    sep = rng.choice([",", ", ", " , "])
    return "{" + sep.join(fields) + "}"


ODD_LINES = [
    "null",
    "{}",
    "   ",
    "",
    '{"s":"a"}{"s":"b"}',
    '{"s":"a"} trailing',
    "{'s':'single'}",
    '{"s":"a",}',
    "{this is not json",
    '{"d":NaN}',
    '{"s":"x","s":"y"}',
    '[{"s":"in an array"}]',
]


def _mutate(rng: random.Random, line: str) -> str:
    chars = list(line)
    for _ in range(rng.randrange(1, 4)):
        at = rng.randrange(len(chars) + 1)
        edit = rng.choice(("set", "add", "drop"))
        new = rng.choice('{}[]":,. -+0123456789eEnulltrfsaZT\\')
        if edit == "add" or not chars:
            chars.insert(at, new)
        elif edit == "set":
            chars[min(at, len(chars) - 1)] = new
        else:
            del chars[min(at, len(chars) - 1)]
    return "".join(chars).replace("\n", " ")


def _file(rng: random.Random) -> tuple[bytes, bool]:
    """(a file's bytes, whether only forms both parsers read alike are in it)."""
    clean = rng.random() < 0.5
    lines = [_record(rng, clean) for _ in range(rng.randrange(1, 25))]
    if not clean and rng.random() < 0.6:
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(ODD_LINES))
    if not clean and rng.random() < 0.4:  # a record with a few characters changed, added or removed
        k = rng.randrange(len(lines))
        lines[k] = _mutate(rng, lines[k])
    data = "\n".join(lines).encode()
    if not clean and rng.random() < 0.1:
        data = data.replace(b"\n", b"\r\n")
    if not clean and rng.random() < 0.05:
        data = data.replace(b'"s":"', b'"s":"\xff', 1)
    return data + (b"\n" if rng.random() < 0.8 else b""), clean


def _rows(table) -> list[str]:
    """The rows as a sorted list of their reprs (NaN equals NaN, -0.0 differs from 0.0; timestamps as
    microseconds and their zone: Spark reads years Python's datetime cannot hold)."""
    import pyarrow as pa

    cols = [c for c in table.column_names if c != "file"]
    types = {c: table.schema.field(c).type for c in cols}
    zones = {c: t.tz for c, t in types.items() if pa.types.is_timestamp(t)}
    table = table.select(cols)
    for c in zones:
        table = table.set_column(cols.index(c), c, table.column(c).cast(pa.int64()))
    return sorted(repr((tuple(r[c] for c in cols), zones)) for r in table.to_pylist())


def test_the_arrow_reader_gives_sparks_rows_or_refuses(spark, tmp_path, seed):
    import pyarrow.compute as pc

    from materializer.jsonlines import JsonLinesReader
    from materializer.plan import SourcePlan
    from materializer.sources import with_file

    rng = random.Random(seed)
    folder = tmp_path / "in"
    folder.mkdir()
    clean = {}
    for n in range(scale(120, 600)):
        data, alike = _file(rng)
        path = folder / f"f{n:04d}.json"
        path.write_bytes(data)
        clean[path.as_uri()] = alike
    source = SourcePlan("events", "json", str(folder), DDL)
    read = (
        spark.read.schema(f"{DDL}, {CORRUPT} string")
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(str(folder))
    )
    # with the column a flow's Spark reader adds (the file of each record to quarantine)
    spark_rows = with_file(read, source).selectExpr("*", "_metadata.file_path AS file").toArrow()
    reader = JsonLinesReader(source)
    accepted = 0
    for uri, alike in clean.items():
        table, why = reader.read([uri])
        if table is None:
            assert not alike, f"{uri} holds only forms both parsers read alike, refused: {why}"
            continue
        accepted += 1
        name = uri.rsplit("/", 1)[1]
        theirs = spark_rows.filter(pc.ends_with(spark_rows.column("file"), "/" + name))
        assert table.schema == theirs.drop_columns(["file"]).schema, uri
        assert _rows(table) == _rows(theirs), f"{uri}:\n{(folder / name).read_bytes()!r}"
    assert accepted >= sum(clean.values()) > 0


def test_a_batch_is_read_whole_by_one_reader(tmp_path):
    """One file the reader refuses hands the whole batch to Spark; an empty file and no file are no rows."""
    from materializer.jsonlines import JsonLinesReader
    from materializer.plan import SourcePlan

    good, bad, empty = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    good.write_text('{"s":"a","t":"2026-11-26T19:33:17Z"}\n')
    bad.write_text('{"s":"a"}\nnull\n')
    empty.write_text("\n\n")
    reader = JsonLinesReader(SourcePlan("events", "json", str(tmp_path), DDL))
    table, why = reader.read([good.as_uri(), empty.as_uri()])
    assert table.num_rows == 1 and why is None and table.column_names[-2:] == [CORRUPT, FILE]
    assert table.column(CORRUPT).null_count == 1
    table, why = reader.read([good.as_uri(), bad.as_uri()])
    assert table is None and "b.json" in why and "null" in why
    table, why = reader.read([])
    assert table.num_rows == 0 and why is None
    gz = tmp_path / "d.json.gz"
    gz.write_bytes(b"")
    assert reader.read([gz.as_uri()]) == (None, "d.json.gz is compressed")
    assert reader.read(["s3a://bucket/e.json"])[0] is None
    part = tmp_path / "day=1"
    part.mkdir()
    (part / "f.json").write_text('{"s":"a"}\n')  # Spark would add a column day from the folder
    assert "key=value" in reader.read([(part / "f.json").as_uri()])[1]


@pytest.mark.parametrize(
    ("ddl", "options", "conf", "why"),
    [
        (DDL, (), {}, None),
        ("s string, d date", (), {}, "column d is date32[day]"),
        ("m map<string,int>", (), {}, "column m is map"),
        (DDL, (("maxFilesPerTrigger", "2"), ("multiLine", "false")), {}, None),
        (DDL, (("multiLine", "true"),), {}, "option multiLine"),
        (DDL, (("timestampFormat", "yyyy"),), {}, "option timestampFormat"),
        (DDL, (), {"spark.sql.session.timeZone": "Europe/Paris"}, "time zone is Europe/Paris"),
        (DDL, (), {"spark.sql.legacy.timeParserPolicy": "LEGACY"}, "timeParserPolicy is LEGACY"),
        (DDL, (), {"spark.sql.json.enableDateTimeParsingFallback": "false"}, "ParsingFallback is false"),
    ],
)
def test_what_the_reader_never_reads(ddl, options, conf, why):
    from materializer.jsonlines import refusal
    from materializer.plan import SourcePlan

    settings = {"spark.sql.session.timeZone": "UTC", "spark.sql.legacy.timeParserPolicy": "CORRECTED"}
    found = refusal(SourcePlan("events", "json", "/x", ddl, options), {**settings, **conf})
    assert found == why if why is None else why in found
    assert refusal(SourcePlan("events", "csv", "/x", ddl), settings) is not None


def _checkpoint(root, offsets: dict[int, int], logs: dict[str, list[tuple[str, int]]]):
    (root / "offsets").mkdir(parents=True)
    (root / "sources" / "0").mkdir(parents=True)
    for batch, offset in offsets.items():
        (root / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{{"logOffset":{offset}}}')
    for name, entries in logs.items():
        lines = [json.dumps({"path": p, "timestamp": 1, "batchId": b}) for p, b in entries]
        (root / "sources" / "0" / name).write_text("\n".join(["v1", *lines]))


def test_the_files_of_a_micro_batch_come_from_sparks_source_log(tmp_path):
    """Micro-batch N covers the source batches after N-1's log offset up to N's, each read from its own file
    or, once Spark compacted and deleted it, from the compact file; anything else is None (Spark reads)."""
    from runtime.spark.filelog import source_files

    cp = tmp_path / "cp"
    _checkpoint(
        cp,
        {0: 1, 1: 1, 2: 3},
        {"0": [("file:///a", 0)], "1": [("file:///b", 1), ("file:///c", 1)], "3": [("file:///e", 3)]}
        | {"2.compact": [("file:///a", 0), ("file:///b", 1), ("file:///c", 1), ("file:///d", 2)]},
    )
    assert source_files(cp, 0) == ["file:///a", "file:///b", "file:///c"]  # two source batches, from -1
    assert source_files(cp, 1) == []  # no new files
    assert source_files(cp, 2) == ["file:///d", "file:///e"]  # 2 from the compact file
    assert source_files(cp, 3) is None  # no offset entry
    (cp / "sources" / "0" / "1").unlink()  # compacted and deleted: the next compact file holds it
    assert source_files(cp, 0) == ["file:///a", "file:///b", "file:///c"]
    (cp / "sources" / "0" / "3").write_text("v2\n")
    assert source_files(cp, 2) is None  # a log version this reader does not know
    (cp / "offsets" / "1").write_text('v1\n{}\n{"logOffset":1}\n{"table":"x","offsets":{}}')
    assert source_files(cp, 1) is None  # two sources


FLOW = """flow: testflow
trigger: 100ms
sources:
  clicks:
    format: json
    path: data/clicks
    schema: "user_id string NOT NULL, event_type string, item_id string, price double, ts timestamp"
layers:
  ods:
    clicks: {action: t_ingest, inputs: {raw: clicks}}
    latest: {action: t_ingest, inputs: {raw: clicks}, primary_key: [user_id]}
"""


def test_the_arrow_readers_quarantine_and_upsert_as_spark_does(spark, project_dir, data_path, seed):
    """A well-formed batch (Arrow's, in the driver or in one executor task) with records lacking the NOT
    NULL column: those are quarantined with Spark's reason and their file, the others written, into a log
    table and as upserts into a primary-key table (the last record of a key wins); then the same input read
    by Spark (materializer.arrow_json: false) into a second project gives the same tables."""
    from runtime.project import Project
    from tests.materializer._flowkit import ACTIONS, canon, make_events, write_batch, write_project

    rng = random.Random(seed)
    lines = make_events(rng, 40, bad=0)
    lines[3] = json.dumps({"event_type": "click", "price": 1.0})  # no user_id
    lines.insert(7, json.dumps({"user_id": None, "item_id": "i1"}))
    path = write_project(project_dir, flow=FLOW, actions={"t_ingest.sql": ACTIONS["t_ingest.sql"]})
    write_batch(project_dir, "part-0", lines)
    results = []
    for arrow in (True, False):
        if not arrow:  # the same project, rebuilt with Spark's parser
            with (project_dir / "tidehouse.yaml").open("a") as f:
                f.write("  arrow_json: false\n")
        project = Project.open()
        refresh = () if arrow else ("ods.clicks", "ods.latest")
        report = project.trigger(path, until_idle=True, spark=spark, full_refresh=refresh)
        assert report.tables["ods.clicks"]["source_batches"] == {"arrow" if arrow else "spark": 1}
        quarantine = project.store.scan("ods.clicks__quarantine").to_pylist()
        results.append(
            (
                canon(project.store.scan("ods.clicks")),
                canon(project.store.scan("ods.latest")),
                sorted((q["raw"], q["reason"], q["file"]) for q in quarantine),
            )
        )
        project.close()
    assert results[0] == results[1]
    log, latest, quarantined = results[0]
    assert sum(log.values()) == 39 and len(quarantined) == 2, quarantined
    assert all("user_id" in reason for _, reason, _ in quarantined), quarantined
    assert {file for _, _, file in quarantined} == {str(project_dir / "data" / "clicks" / "part-0.json")}
    assert sum(latest.values()) == len({json.loads(x).get("user_id") for x in lines} - {None})


def test_records_with_invalid_utf8_are_quarantined_not_a_failed_flow(spark, project_dir):
    """Spark keeps a malformed record's bytes verbatim, invalid UTF-8 included (a record with an invalid byte
    is malformed for its parser): the quarantine holds it with U+FFFD for each invalid byte. Before, reading
    it back failed the ODS query (UnicodeDecodeError) and with it the flow."""
    from runtime.project import Project
    from tests.materializer._flowkit import ACTIONS, write_project

    path = write_project(project_dir, flow=FLOW, actions={"t_ingest.sql": ACTIONS["t_ingest.sql"]})
    good = json.dumps({"user_id": "u1", "price": 1.0, "ts": "2024-01-01T00:00:00Z"})
    data = good.encode() + b'\n{"user_id": "u\xff2", "price": 1.0}\n{"user_id": "u3", "price": "\xfe"}\n'
    (project_dir / "data" / "clicks" / "p0.json").write_bytes(data)
    project = Project.open()
    report = project.trigger(path, until_idle=True, spark=spark)
    assert report.tables["ods.clicks"]["source_batches"] == {"spark": 1}  # the Arrow reader refuses it
    assert project.store.scan("ods.clicks").column("user_id").to_pylist() == ["u1"]
    raws = sorted(project.store.scan("ods.clicks__quarantine").column("raw").to_pylist())
    assert raws == ['{"user_id": "u3", "price": "\ufffd"}', '{"user_id": "u\ufffd2", "price": 1.0}']
    project.close()


def test_raw_texts_decodes_invalid_utf8_with_replacement_characters():
    import pyarrow as pa

    from materializer.rows import raw_texts

    column = pa.chunked_array([pa.array([b"ok", None, b"a\xffb"], pa.binary()).cast(pa.string(), safe=False)])
    assert raw_texts(column) == ["ok", None, "a\ufffdb"]
    assert raw_texts(pa.chunked_array([pa.array(["é"])])) == ["é"]
