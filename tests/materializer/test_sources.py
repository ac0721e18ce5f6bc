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
