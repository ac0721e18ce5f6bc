"""A file source's options are checked: Spark's reader ignores an option it does not know, so a misspelt
``maxFilesPerTriger: 1`` capped nothing and ``recursive: true`` read no subfolder, with no word. The options
Tidehouse sets itself on JSON and CSV sources (``mode``, ``columnNameOfCorruptRecord``) were silently
overridden: ``mode: FAILFAST`` still quarantined."""

from __future__ import annotations

import pytest

from registry.specs import parse_flow_text
from registry.specs.sourceoptions import OPTIONS, option_problems
from runtime.core.errors import ErrorCode as E
from runtime.core.errors import TidehouseError, TidehouseErrors

FLOW = """\
flow: shop
sources:
  events:
    format: {fmt}
    path: data/events
    schema: "user_id string"
    options: {options}
layers:
  ods:
    events: {{action: ingest, inputs: {{raw: events}}}}
"""


def _problems(fmt, **options):
    return [(key, code) for key, code, _message, _hint in option_problems(fmt, options)]


def test_the_options_of_spark_file_readers_pass_in_any_case():
    assert (
        _problems("json", multiLine="true", MAXFILESPERTRIGGER="1", timestampformat="x", allowComments="1")
        == []
    )
    assert _problems("csv", header="true", sep=";", nullValue="", recursiveFileLookup="true") == []
    assert _problems("parquet", mergeSchema="true", datetimeRebaseMode="CORRECTED", latestFirst="true") == []
    assert _problems("orc", mergeSchema="true", ignoreCorruptFiles="true") == []
    assert _problems("text", wholetext="true", lineSep="\n", pathGlobFilter="*.txt") == []
    # a key with a dot goes to the read's Hadoop configuration (parquet.*, fs.s3a.*): not Spark's to check
    assert _problems("parquet", **{"parquet.enable.dictionary": "true", "fs.s3a.endpoint": "http://x"}) == []
    # other formats' options are their own: a connector's are not known here
    assert _problems("rate", rowsPerSecond="10", anything="x") == []
    assert _problems("kafka", subscribe="t", **{"kafka.bootstrap.servers": "h:9092"}) == []


def test_an_option_no_reader_of_the_format_knows_is_refused_with_the_closest_one():
    [(key, code, message, hint)] = option_problems("json", {"maxFilesPerTriger": "1"})
    assert (key, code) == ("maxFilesPerTriger", E.SPEC_UNKNOWN_KEY)
    assert (
        message == "unknown option 'maxFilesPerTriger' of a json source: Spark's json reader would ignore it"
    )
    assert hint == "did you mean 'maxFilesPerTrigger'?"
    [(_, _, _, hint)] = option_problems("csv", {"recursive": "true"})
    assert hint == "did you mean 'recursiveFileLookup'?"
    [(_, _, _, hint)] = option_problems("parquet", {"header": "true"})  # a CSV option, not a Parquet one
    assert hint == "see Spark's parquet data source options"
    assert _problems("orc", mode="PERMISSIVE") == [("mode", E.SPEC_UNKNOWN_KEY)]


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_the_options_that_route_bad_records_to_quarantine_are_tidehouses(fmt):
    found = option_problems(fmt, {"mode": "FAILFAST", "ColumnNameOfCorruptRecord": "bad", "path": "x"})
    assert [(key, code) for key, code, _, _ in found] == [
        ("mode", E.SPEC_BAD_VALUE),
        ("ColumnNameOfCorruptRecord", E.SPEC_BAD_VALUE),
        ("path", E.SPEC_BAD_VALUE),
    ]
    assert found[0][2].startswith(f"the option mode is set by Tidehouse on a {fmt} source: a record that")
    assert found[2][2] == "the option path: a source's folder is its key 'path'"


def test_every_bad_option_of_a_flow_file_is_an_error_at_its_key():
    text = FLOW.format(fmt="json", options="{multiLine: true, maxFilesPerTriger: 1, mode: DROPMALFORMED}")
    with pytest.raises(TidehouseErrors) as info:
        parse_flow_text(text, "flows/shop.yaml")
    found = [(e.code, e.location.line, e.location.col, e.location.path) for e in info.value.errors]
    assert found == [
        (E.SPEC_UNKNOWN_KEY, 7, 32, "sources.events.options.maxFilesPerTriger"),
        (E.SPEC_BAD_VALUE, 7, 54, "sources.events.options.mode"),
    ]
    assert str(info.value.errors[0]).startswith(
        "flows/shop.yaml:7:32: sources.events.options.maxFilesPerTriger: unknown option 'maxFilesPerTriger' "
        "of a json source: Spark's json reader would ignore it (did you mean 'maxFilesPerTrigger'?)"
    )
    with pytest.raises(TidehouseError) as one:
        parse_flow_text(FLOW.format(fmt="csv", options="{heder: true}"), "flows/shop.yaml")
    assert one.value.code is E.SPEC_UNKNOWN_KEY and one.value.hint == "did you mean 'header'?"
    assert parse_flow_text(FLOW.format(fmt="csv", options="{header: true}")).sources["events"].options == {
        "header": "true"
    }


def test_a_flow_registered_before_the_check_still_reads(tmp_path):
    """The check is on what is registered now: a stored version keeps its meaning (and its tables run)."""
    from registry.service import Registry, content_hash

    text = FLOW.format(fmt="json", options="{maxFilesPerTriger: 1}")
    with pytest.raises(TidehouseError):
        parse_flow_text(text, "shop.yaml")
    registry = Registry.open(f"sqlite:///{tmp_path / 'registry.db'}")
    try:
        registry.store.put("flow", "shop", content_hash(text), text, None)  # as an older Tidehouse stored it
        assert registry.get_flow("shop").spec.sources["events"].options == {"maxFilesPerTriger": "1"}
    finally:
        registry.close()


@pytest.mark.spark
def test_the_lists_hold_every_option_of_the_installed_sparks_readers(spark):
    """The lists are Spark's: every option its readers' option objects declare is in them (a newer Spark's
    new option would otherwise be refused as unknown)."""

    def declared(cls: str) -> set[str]:
        module = spark._jvm.java.lang.Class.forName(cls + "$").getField("MODULE$").get(None)
        names, it = set(), module.getAllOptions().iterator()
        while it.hasNext():
            names.add(it.next().lower())
        return names

    files = declared("org.apache.spark.sql.execution.datasources.FileIndexOptions")
    readers = {
        "json": "org.apache.spark.sql.catalyst.json.JSONOptions",
        "csv": "org.apache.spark.sql.catalyst.csv.CSVOptions",
        "parquet": "org.apache.spark.sql.execution.datasources.parquet.ParquetOptions",
        "orc": "org.apache.spark.sql.execution.datasources.orc.OrcOptions",
        "text": "org.apache.spark.sql.execution.datasources.text.TextOptions",
    }
    for fmt, cls in readers.items():
        ours = {o.lower() for o in OPTIONS[fmt]}
        missing = sorted(o for o in declared(cls) | files if "." not in o and o not in ours)
        assert missing == [], fmt
