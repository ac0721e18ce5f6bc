"""Big micro-batches on the driver data path: Arrow data over ``materializer.local_relation_rows`` reaches
Spark as a Parquet file (:mod:`materializer.handoff`), a smaller one as a local relation; file sources are
read in batches of at most ``materializer.source_bytes_per_batch``. Either way every table equals the batch
oracle."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import random

import pyarrow as pa
import pytest

from materializer.admission import source_options
from materializer.handoff import Handoff, parquet_carries
from materializer.plan import SourcePlan
from tests._support import scale
from tests.materializer._flowkit import (
    FLOW,
    make_events,
    oracle,
    oracle_connection,
    write_batch,
    write_project,
)
from tests.materializer.test_mat_run import check_against_oracle


class _Config:
    def __init__(self, cap: int, executors: int = -1) -> None:
        self.caps = {
            "materializer.source_bytes_per_batch": cap,
            "materializer.executor_source_bytes_per_batch": executors,
        }

    def get(self, name: str):
        return self.caps[name]


def _source(fmt: str = "json", **options: str) -> SourcePlan:
    return SourcePlan("clicks", fmt, "/data" if fmt != "rate" else None, None, tuple(options.items()))


@pytest.mark.parametrize(
    ("source", "cap", "expected"),
    [
        (_source(), 1000, {"maxBytesPerTrigger": "1000"}),
        (_source("parquet", mergeSchema="true"), 7, {"mergeSchema": "true", "maxBytesPerTrigger": "7"}),
        (_source(maxFilesPerTrigger="2"), 1000, {"maxFilesPerTrigger": "2"}),  # the flow's own cap
        (_source(MAXBYTESPERTRIGGER="5"), 1000, {"MAXBYTESPERTRIGGER": "5"}),  # options are case-insensitive
        (_source(), 0, {}),  # 0: no cap
        (_source("rate", rowsPerSecond="5"), 1000, {"rowsPerSecond": "5"}),  # not a file source
    ],
)
def test_a_file_source_batch_is_capped_unless_the_flow_caps_it(source, cap, expected):
    assert source_options(source, _Config(cap)) == expected
    assert source_options(source, _Config(-1, cap), "executors") == expected  # the executor path's own cap


@pytest.mark.parametrize(
    ("arrow_type", "carried"),
    [
        (pa.string(), True),
        (pa.int8(), True),
        (pa.decimal128(12, 3), True),
        (pa.timestamp("us", tz="UTC"), True),
        (pa.timestamp("us"), False),  # timestamp_ntz
        (pa.duration("us"), False),  # a day-time interval
        (pa.null(), False),
        (pa.list_(pa.struct([("a", pa.float64()), ("b", pa.date32())])), True),
        (pa.list_(pa.duration("us")), False),
        (pa.map_(pa.string(), pa.int64()), True),
        (pa.struct([("a b", pa.int32())]), False),  # a nested name Spark's Parquet reader refuses
    ],
)
def test_parquet_carries_the_types_spark_reads_back_as_written(arrow_type, carried):
    assert parquet_carries(pa.schema([("c", arrow_type)])) is carried
    assert parquet_carries(pa.schema([("bad name", pa.int32())])) is False
    assert parquet_carries(pa.schema([])) is False


@pytest.mark.spark
def test_a_handed_off_file_reads_back_as_the_local_relation_in_order(spark, tmp_path, seed):
    """Every type the hand-off carries, NULLs, NaN and -0.0, in a file of several row groups: Spark reads the
    same rows as from a local relation, in the same order (a SQL may depend on it: the last upsert of a key
    wins); the file goes at release."""
    from materializer import handoff as module
    from materializer.strategies import local_df

    rng = random.Random(seed)
    n = 3 * 1000 + 7
    ddl = (
        "k string, i bigint, b tinyint, f double, d decimal(12,3), t timestamp, day date, "
        "tags array<string>, m map<string,int>, s struct<x: double, y: string>"
    )
    rows = []
    for j in range(n):
        rows.append(
            {
                "k": None if j % 97 == 0 else f"k{rng.randrange(50)}",
                "i": j,
                "b": rng.randrange(-128, 128),
                "f": rng.choice([float("nan"), -0.0, 0.0, None, rng.uniform(-1e9, 1e9)]),
                "d": decimal.Decimal(rng.randrange(-(10**9), 10**9)) / 1000,
                "t": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=j * 7919),
                "day": dt.date(2024, 1, 1) + dt.timedelta(days=j % 400),
                "tags": None if j % 13 == 0 else [f"t{x}" for x in range(j % 4)],
                "m": {"a": j % 7} if j % 5 else None,
                "s": {"x": j / 3, "y": None if j % 2 else "y"},
            }
        )
    from materializer.analyze import struct_of
    from runtime.spark.types import spark_to_arrow

    data = pa.Table.from_pylist(rows, schema=spark_to_arrow(struct_of(ddl)))
    handoff = Handoff(tmp_path / "handoff", local_rows=10)
    old_groups = module.ROW_GROUP_ROWS
    module.ROW_GROUP_ROWS = 1000  # several row groups: Spark splits the file in more than one task
    try:
        session = spark.newSession()
        session.conf.set("spark.sql.files.maxPartitionBytes", str(32 * 1024))  # splits at the row groups
        session.conf.set("spark.sql.files.openCostInBytes", "0")
        via_file = local_df(session, data, ddl, handoff)
        assert any(p.suffix == ".parquet" for p in (tmp_path / "handoff").iterdir())
        got = via_file.toArrow()
        want = local_df(session, data, ddl).toArrow()
        assert got.schema == want.schema
        assert got.to_pylist() == want.to_pylist() or _same_with_nan(got, want)
        assert via_file.rdd.getNumPartitions() >= 2  # the order holds across tasks
        handoff.release()
        assert not list((tmp_path / "handoff").iterdir())
        small = local_df(session, data.slice(0, 10), ddl, handoff)  # at the threshold: a local relation
        assert small.count() == 10 and not list((tmp_path / "handoff").iterdir())
    finally:
        module.ROW_GROUP_ROWS = old_groups


def _same_with_nan(a: pa.Table, b: pa.Table) -> bool:
    """Row lists equal, NaN equal to NaN (NaN != NaN in Python's comparison of floats)."""

    def norm(v):
        if isinstance(v, float) and v != v:
            return "NaN"
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, list):
            return [norm(x) for x in v]
        return v

    return [norm(r) for r in a.to_pylist()] == [norm(r) for r in b.to_pylist()]


def _spy(monkeypatch, counts: dict[str, int]) -> None:
    """Count the hand-offs of the driver path: as a file, as a local relation."""
    import materializer.handoff as module

    frame = module.Handoff.frame

    def spied(self, session, data, schema):
        counts["file" if data.num_rows > self.local_rows and parquet_carries(data.schema) else "local"] += 1
        return frame(self, session, data, schema)

    monkeypatch.setattr(module.Handoff, "frame", spied)


@pytest.mark.spark
def test_big_batches_go_to_spark_as_files_and_equal_the_oracle(
    spark, project_dir, test_flow, seed, monkeypatch
):
    """local_relation_rows 20 and batches of at most 25 rows: dwd.clicks' bigger batches reach Spark as
    Parquet files, its smaller ones and the rest as local relations; the hot and lake tables equal the oracle
    after a first run (and after one with more input, TIDEHOUSE_SCALE=full), and no file is left behind."""
    from runtime.project import Project

    (project_dir / "tidehouse.yaml").write_text(
        "materializer:\n  data_path: driver\n  local_relation_rows: 20\n  max_rows_per_batch: 25\n"
    )
    counts = {"file": 0, "local": 0}
    _spy(monkeypatch, counts)
    rng = random.Random(seed)
    lines = make_events(rng, 60)
    write_batch(project_dir, "part-0", lines)
    project = Project.open()
    try:
        project.trigger(test_flow, until_idle=True, spark=spark)
        check_against_oracle(project, lines)
        if scale(0, 1):  # CI: one run (more batches of both kinds with TIDEHOUSE_SCALE=full)
            more = make_events(rng, 80, bad=1)
            write_batch(project_dir, "part-1", more)
            project.trigger("testflow", until_idle=True, spark=spark)
            check_against_oracle(project, lines + more)
        folder = project.config.home / "tmp" / "handoff"
        assert not [p for p in folder.rglob("*") if p.is_file()], "hand-off files left behind"
    finally:
        project.close()
    # ODS commits the file's 60 rows in one batch; dwd.clicks reads them as 25 + 25 (files) + 10 (local)
    assert counts["file"] >= 2 and counts["local"] >= 1, counts


EXPECT_FLOW = FLOW.replace(
    "    clicks: {action: t_clean, inputs: {events: ods.clicks}, params: {min_price: 1.0}}\n",
    "    clicks:\n      action: t_clean\n      inputs: {events: ods.clicks}\n      params: {min_price: 1.0}\n"
    "      expect: [{name: cheap, condition: 'price < 15', on_violation: quarantine}]\n",
)


@pytest.mark.spark
def test_expectations_over_handed_off_files_quarantine_exactly_the_violators(
    spark, project_dir, seed, monkeypatch
):
    """local_relation_rows 0: every batch and every result reaches Spark as a file, the expectation checks
    too; the kept rows and the quarantined ones are exactly the oracle's."""
    from runtime.project import Project

    assert EXPECT_FLOW != FLOW
    path = write_project(project_dir, flow=EXPECT_FLOW)
    (project_dir / "tidehouse.yaml").write_text(
        "materializer:\n  data_path: driver\n  local_relation_rows: 0\n"
    )
    counts = {"file": 0, "local": 0}
    _spy(monkeypatch, counts)
    lines = make_events(random.Random(seed), 80)
    write_batch(project_dir, "part-0", lines)
    project = Project.open()
    try:
        project.trigger(path, until_idle=True, spark=spark)
        con = oracle_connection(lines)
        clean = (
            "SELECT user_id, item_id, price FROM raw "
            "WHERE lower(event_type) IN ('click', 'view', 'buy') AND price >= 1.0"
        )
        want_kept = sorted(con.sql(f"SELECT * FROM ({clean}) WHERE price < 15").fetchall())
        want_bad = sorted(con.sql(f"SELECT * FROM ({clean}) WHERE price >= 15").fetchall())
        kept = project.store.scan("dwd.clicks").select(["user_id", "item_id", "price"]).to_pylist()
        assert sorted(tuple(r.values()) for r in kept) == want_kept
        raws = [json.loads(r) for r in project.store.scan("dwd.clicks__quarantine").column("raw").to_pylist()]
        assert sorted((r["user_id"], r["item_id"], r["price"]) for r in raws) == want_bad
        assert want_bad, "the seed made no violator: the test would prove nothing"
    finally:
        project.close()
    assert counts["file"] >= 2, counts  # the batch and its expectation check at least


@pytest.mark.spark
def test_a_backlog_of_files_is_read_in_batches_of_source_bytes_per_batch(spark, project_dir, test_flow, seed):
    """source_bytes_per_batch 1: Spark's maxBytesPerTrigger admits one file per batch, so three files are
    three ODS batches, and the result is the oracle's."""
    from runtime.project import Project

    (project_dir / "tidehouse.yaml").write_text("materializer:\n  source_bytes_per_batch: 1\n")
    rng = random.Random(seed)
    lines = []
    for i in range(3):
        part = make_events(rng, 20, bad=1)
        write_batch(project_dir, f"part-{i}", part)
        lines += part
    project = Project.open()
    try:
        report = project.trigger(test_flow, until_idle=True, spark=spark)
        assert report.tables["ods.clicks"]["batches"] == 3
        check_against_oracle(project, lines)
        assert oracle(lines)["ods.clicks__quarantine"] == 3
    finally:
        project.close()
