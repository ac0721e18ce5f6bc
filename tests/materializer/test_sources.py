"""Which listing a flow source gets (materializer.sources.listing_refusal): Tidehouse's, unless a reason says
Spark's file source must list it."""

from __future__ import annotations

import pytest

from materializer.plan import SourcePlan
from materializer.sources import listing_refusal

DDL = "a string"


class Config:
    def __init__(self, listing: bool = True) -> None:
        self.listing = listing

    def get(self, key: str):
        assert key == "materializer.list_sources"
        return self.listing


def test_a_local_folder_with_a_schema_is_listed_by_tidehouse(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / ".hidden=1").mkdir()  # Spark skips it: not a partition folder
    for path in (str(tmp_path), tmp_path.as_uri()):
        assert listing_refusal(SourcePlan("s", "json", path, DDL), {}, Config(), connect=False) is None
    src = SourcePlan("s", "csv", str(tmp_path), DDL)
    assert (
        listing_refusal(src, {"maxFilesPerTrigger": "3", "header": "true"}, Config(), connect=False) is None
    )


@pytest.mark.parametrize(
    "fmt, path, ddl, options, listing, connect, why",
    [
        ("rate", None, None, {}, True, False, "not a file source"),
        ("json", "{tmp}", DDL, {}, False, False, "materializer.list_sources is false"),
        ("json", "{tmp}", DDL, {}, True, True, "Spark Connect"),
        ("parquet", "{tmp}", None, {}, True, False, "declares no schema"),
        ("json", "s3://bucket/in", DDL, {}, True, False, "is not a local folder"),
        ("json", "{tmp}/*.json", DDL, {}, True, False, "glob pattern"),
        ("json", "{tmp}", DDL, {"latestFirst": "true"}, True, False, "option latestFirst"),
        ("json", "{tmp}", DDL, {"CLEANSOURCE": "delete"}, True, False, "option CLEANSOURCE"),
        ("json", "{tmp}/parted", DDL, {}, True, False, "key=value folders"),
    ],
)
def test_spark_lists_what_tidehouses_listing_would_not_read_as_spark_does(
    tmp_path, fmt, path, ddl, options, listing, connect, why
):
    (tmp_path / "parted" / "plain" / "day=1").mkdir(parents=True)
    path = path.format(tmp=tmp_path) if path else None
    refusal = listing_refusal(SourcePlan("s", fmt, path, ddl), options, Config(listing), connect=connect)
    assert refusal is not None and why in refusal, refusal


class _ReadByName(str):
    """What the reader gives: "read by name", with the quarantine's file column added
    (materializer.sources.with_file)."""

    def __new__(cls):
        return super().__new__(cls, "read by name")

    def selectExpr(self, *exprs):
        assert exprs[0] == "*" and "input_file_name()" in exprs[1], exprs
        return self


class _Batch:
    """A Spark micro-batch DataFrame as SparkListed sees it: its files, and a session that reads by name."""

    def __init__(self, files: list[str]) -> None:
        self.files, self.read_paths = files, None
        self.sparkSession = self

    def inputFiles(self) -> list[str]:
        return self.files

    @property
    def read(self):
        batch = self

        class Reader:
            def format(self, _):
                return self

            def options(self, **_):
                return self

            def schema(self, _):
                return self

            def option(self, *_):
                return self

            def load(self, paths):
                batch.read_paths = paths
                return _ReadByName()

        return Reader()


def test_over_sparks_listing_a_batch_without_its_log_is_checked_by_its_plans_files(tmp_path):
    """The checkpoint does not list the batch (here: none at all): its plan's files are checked instead. A
    pattern name is read by its escaped name, or, without a declared schema, is an error naming the file."""
    from materializer.sources import SparkListed
    from runtime.core.errors import ErrorCode, TidehouseError

    folder = tmp_path / "in"
    plain = _Batch([(folder / "a.json").as_uri()])
    listed = SparkListed(SourcePlan("s", "json", str(folder), DDL), {}, str(tmp_path / "cp"))
    assert listed(plain, 3) is plain  # Spark's rows
    named = _Batch([(folder / "a.json").as_uri(), f"file://{folder}/x%5B1%5D.json"])
    assert listed(named, 3) == "read by name"
    assert named.read_paths == [str(folder / "a.json"), str(folder / "x\\[1\\].json")]
    inferred = SparkListed(SourcePlan("s", "json", str(folder), None), {}, str(tmp_path / "cp"))
    with pytest.raises(TidehouseError) as err:
        inferred(named, 3)
    assert err.value.code is ErrorCode.SOURCE_INVALID
    assert str(folder / "x[1].json") in err.value.message and "declares no schema" in err.value.message
