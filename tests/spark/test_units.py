"""Fast tests of the bridge's pure parts: type mapping, DDL parsing, offsets, partition planning, options."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.spark.datasource import Ranges, output_schema, plan_partitions
from runtime.spark.options import SourceOptions, cap_rows, make_offset, offset_ends, parse_starting
from runtime.spark.types import (
    arrow_to_ddl,
    arrow_to_spark,
    conform,
    ddl_to_arrow,
    parse_ddl,
    spark_compatible,
    spark_to_arrow,
)
from runtime.spark.writer import origin_from_checkpoint, read_offset_log
from runtime.storage.api import TS_TYPE, BatchInfo, TableMeta
from tests.spark._sparkkit import ALL_TYPES_ARROW, ALL_TYPES_DDL


def test_ddl_maps_every_type_to_the_documented_arrow_type():
    got = ddl_to_arrow(ALL_TYPES_DDL)
    assert got.names == ALL_TYPES_ARROW.names
    for g, want in zip(got, ALL_TYPES_ARROW):
        # list element names differ between writers ("item"/"element"); compare the types structurally
        assert g.type.equals(want.type, check_metadata=False) or str(g.type).replace(
            "element", "item"
        ) == str(want.type).replace("element", "item"), (g, want)


def test_arrow_spark_arrow_round_trip_is_identity_on_supported_types():
    arrow = ddl_to_arrow(ALL_TYPES_DDL)
    assert spark_to_arrow(arrow_to_spark(arrow)) == arrow
    assert parse_ddl(arrow_to_ddl(arrow)) == arrow_to_spark(arrow)


def test_arrow_variants_map_to_what_spark_accepts():
    odd = pa.schema(
        [
            ("a", pa.large_string()),
            ("b", pa.timestamp("ms")),
            ("c", pa.timestamp("ns", tz="UTC")),
            ("d", pa.large_binary()),
        ]
    )
    assert spark_compatible(odd) == pa.schema(
        [
            ("a", pa.string()),
            ("b", pa.timestamp("us")),
            ("c", pa.timestamp("us", tz="UTC")),
            ("d", pa.binary()),
        ]
    )


@pytest.mark.parametrize(
    "arrow_type, column",
    [
        (pa.uint32(), "bad"),
        (pa.duration("s"), "bad"),
        (pa.struct([("inner", pa.time32("s"))]), "bad.inner"),
        (pa.list_(pa.float16()), "bad[]"),
        (pa.decimal256(60, 2), "bad"),
    ],
)
def test_unsupported_arrow_type_names_the_column(arrow_type, column):
    with pytest.raises(TidehouseError) as info:
        arrow_to_spark(pa.schema([("ok", pa.int32()), ("bad", arrow_type)]))
    assert info.value.code == ErrorCode.SPARK_TYPE_UNSUPPORTED
    assert info.value.params["column"] == column


def test_unsupported_spark_type_names_the_column():
    schema = T.StructType([T.StructField("when", T.DayTimeIntervalType())])
    with pytest.raises(TidehouseError) as info:
        spark_to_arrow(schema)
    assert info.value.code == ErrorCode.SPARK_TYPE_UNSUPPORTED and info.value.params["column"] == "when"


@pytest.mark.parametrize(
    "ddl, code",
    [
        ("", ErrorCode.SPEC_BAD_VALUE),
        ("a int,", ErrorCode.SPEC_BAD_VALUE),
        ("a int b", ErrorCode.SPEC_BAD_VALUE),
        ("a array<int", ErrorCode.SPEC_BAD_VALUE),
        ("a decimal(40,2)", ErrorCode.SPEC_BAD_VALUE),
        ("a int, A string", ErrorCode.SPEC_BAD_VALUE),
        ("a interval", ErrorCode.SPARK_TYPE_UNSUPPORTED),
        ("a int; drop table x", ErrorCode.SPEC_BAD_VALUE),
    ],
)
def test_bad_ddl_is_a_located_error(ddl, code):
    where = Location("flows/f.yaml", 7, 13, "sources.clicks.schema")
    with pytest.raises(TidehouseError) as info:
        parse_ddl(ddl, where)
    assert info.value.code == code and info.value.location == where


def test_ddl_accepts_spark_spellings():
    schema = parse_ddl("`odd name` varchar(10) NOT NULL COMMENT 'x', n NUMERIC(5), l LONG, st struct<a int>")
    assert schema == T.StructType(
        [
            T.StructField("odd name", T.StringType(), False),
            T.StructField("n", T.DecimalType(5, 0)),
            T.StructField("l", T.LongType()),
            T.StructField("st", T.StructType([T.StructField("a", T.IntegerType())])),
        ]
    )


def test_conform_selects_casts_and_fills():
    batch = pa.record_batch({"b": pa.array([1, 2], pa.int32()), "a": ["x", "y"], "zz": [0, 0]})
    schema = pa.schema([("a", pa.string()), ("b", pa.int64()), ("c", pa.float64())])
    out = conform(batch, schema)
    assert out.schema == schema and out.column(1).to_pylist() == [1, 2] and out.column(2).null_count == 2


def test_cap_rows_never_exceeds_budget_nor_backlog(seed):
    rng = random.Random(seed)
    for _ in range(500):
        n = rng.randint(1, 6)
        starts = [rng.randint(0, 100) for _ in range(n)]
        ends = [s + rng.choice([0, rng.randint(0, 1000)]) for s in starts]
        budget = rng.randint(1, 1500)
        capped = cap_rows(starts, ends, budget)
        taken = [c - s for c, s in zip(capped, starts)]
        assert all(0 <= t <= e - s for t, s, e in zip(taken, starts, ends))
        assert sum(taken) == min(budget, sum(e - s for s, e in zip(starts, ends)))


def test_plan_partitions_covers_every_range_exactly_once(seed):
    rng = random.Random(seed)
    for _ in range(300):
        n = rng.randint(1, 5)
        starts = [rng.randint(0, 50) for _ in range(n)]
        ends = [s + rng.randint(0, 400) for s in starts]
        parts = plan_partitions(starts, ends, split=rng.randint(1, 100), single=rng.randint(1, 300))
        covered = {b: [] for b in range(n)}
        for part in parts:
            for b, s, e in part.ranges:
                assert e > s
                covered[b].extend(range(s, e))
        for b in range(n):
            assert covered[b] == list(range(starts[b], ends[b]))


def test_small_batches_are_one_task_and_large_ones_split():
    assert plan_partitions([0, 0], [10, 5], split=100, single=100) == [Ranges([(0, 0, 10), (1, 0, 5)])]
    assert plan_partitions([0, 0], [0, 0], split=100, single=100) == []
    assert len(plan_partitions([0, 0], [250, 10], split=100, single=100)) == 4


class _Ends:
    def __init__(self, ends):
        self.ends = ends

    def end_offsets(self, name):
        return self.ends


def test_starting_offsets():
    meta = TableMeta("ods.t", pa.schema([("a", pa.int64())]), buckets=3)
    store = _Ends([5, 6, 7])
    assert parse_starting("earliest", meta, store) == [0, 0, 0]
    assert parse_starting("latest", meta, store) == [5, 6, 7]
    assert parse_starting('{"1": 4}', meta, store) == [0, 4, 0]
    assert parse_starting(json.dumps(make_offset("ods.t", [1, 2, 3])), meta, store) == [1, 2, 3]
    for bad in ('{"3": 1}', '{"0": -1}', '{"x": 1}', "[1]", "soon", '{"0": true}'):
        with pytest.raises(TidehouseError) as info:
            parse_starting(bad, meta, store)
        assert info.value.code == ErrorCode.SOURCE_INVALID


def test_offsets_round_trip_and_unknown_buckets_start_at_zero():
    offset = json.loads(json.dumps(make_offset("ods.t", [3, 0, 9])))
    assert offset_ends(offset, 3) == [3, 0, 9]
    assert offset_ends({"table": "ods.t", "offsets": {"0": 3}}, 2) == [3, 0]


@pytest.mark.parametrize(
    "options, option",
    [
        ({"root": "/x"}, "table"),
        ({"root": "/x", "table": "a.b", "maxRowsPerTrigger": "0"}, "maxrowspertrigger"),
        ({"root": "/x", "table": "a.b", "maxRowsPerTrigger": "lots"}, "maxrowspertrigger"),
        ({"root": "/x", "table": "a.b", "fsync": "yes"}, "fsync"),
    ],
)
def test_bad_options(options, option):
    with pytest.raises(TidehouseError) as info:
        SourceOptions.parse(options)
    assert info.value.code == ErrorCode.SOURCE_INVALID and info.value.params["option"] == option


def test_options_are_case_insensitive_and_project():
    opts = SourceOptions.parse({"ROOT": "/x", "Table": "a.b", "columns": " u, v ", "MAXROWSPERTRIGGER": "7"})
    assert (opts.place.root, opts.table, opts.columns, opts.max_rows_per_trigger) == (
        "/x",
        "a.b",
        ("u", "v"),
        7,
    )
    assert opts.place.config is None  # a bare storage root: no lake


def test_a_source_finds_its_project_and_reads_views_by_suffix(tmp_path, monkeypatch):
    (tmp_path / "tidehouse.yaml").write_text("storage:\n  root: hot\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TIDEHOUSE_HOME", raising=False)
    opts = SourceOptions.parse({"path": "dwd.events$lake"})  # spark.read.format("tidehouse").load(...)
    assert (opts.table, opts.view, opts.place.root) == ("dwd.events", "lake", str(tmp_path / "hot"))
    assert opts.place.config.project_dir == tmp_path
    assert SourceOptions.parse({"table": "dws.u$changelog"}).view == "changelog"
    other = tmp_path / "other"
    other.mkdir()
    (other / "tidehouse.yaml").write_text("")
    opts = SourceOptions.parse({"path": "ods.x", "project": str(other), "home": str(tmp_path / "h")})
    assert opts.place.root == str(tmp_path / "h" / "hot") and opts.view == ""
    with pytest.raises(TidehouseError) as info:  # a root that is not the project's is a contradiction
        SourceOptions.parse({"path": "ods.x", "project": str(other), "root": "/elsewhere"})
    assert info.value.params["option"] == "root"


def test_output_schema_projection_and_system_columns():
    log = TableMeta("ods.t", pa.schema([("u", pa.string()), ("v", pa.int64()), ("w", pa.large_string())]))
    pk = TableMeta("dws.t", log.schema, kind="primary_key", primary_key=("u",))
    assert output_schema(log, ("v",), True).names == ["v", "__offset", "__bucket", "__ts"]
    assert output_schema(pk, None, True).names == ["u", "v", "w", "__offset", "__bucket", "__ts", "__change"]
    assert output_schema(pk, None, False).field("w").type == pa.string()
    assert output_schema(log, None, True).field("__ts").type == TS_TYPE
    with pytest.raises(TidehouseError) as info:
        output_schema(log, ("nope",), True)
    assert info.value.code == ErrorCode.SOURCE_INVALID


class _Times:
    """offset_times of an upstream table whose batch ``k`` holds offsets [10k, 10k+10) with origin 1000+k."""

    def offset_times(self, name, bucket, offset):
        k = offset // 10
        return BatchInfo(
            bucket, 10 * k, 10, commit_ts=2000.0 + k, origin_ts=1000.0 + k + bucket, writer="w", seq=k
        )


def _offset_file(checkpoint, batch_id, *sources):
    path = checkpoint / "offsets"
    path.mkdir(parents=True, exist_ok=True)
    lines = ["v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}})]
    lines += [json.dumps(s) for s in sources]
    (path / str(batch_id)).write_text("\n".join(lines))


def test_origin_is_the_oldest_input_row_origin(tmp_path):
    _offset_file(tmp_path, 4, make_offset("ods.a", [30, 50]), make_offset("ods.b", [7]))
    _offset_file(tmp_path, 5, make_offset("ods.a", [45, 50]), make_offset("ods.b", [7]))
    assert read_offset_log(tmp_path, 5)[0]["offsets"] == {"0": 45, "1": 50}
    # batch 5 reads ods.a bucket 0 from offset 30 (batch k=3, origin 1003); nothing new elsewhere
    assert origin_from_checkpoint(_Times(), tmp_path, 5) == 1003.0
    # batch 0: no start known -> the newest row's origin (a lower bound)
    _offset_file(tmp_path, 0, make_offset("ods.a", [25, 0]))
    assert origin_from_checkpoint(_Times(), tmp_path, 0) == 1002.0


def test_input_times_are_the_oldest_origin_and_the_oldest_upstream_commit(tmp_path):
    from runtime.spark.writer import input_times

    _offset_file(tmp_path, 4, make_offset("ods.a", [30, 50]), make_offset("ods.b", [7]))
    _offset_file(tmp_path, 5, make_offset("ods.a", [45, 50]), make_offset("ods.b", [27]))
    # ods.a bucket 0 from offset 30 (k=3: origin 1003, commit 2003); ods.b bucket 0 from 7 (k=0: 1000, 2000)
    assert input_times(_Times(), tmp_path, 5) == (1000.0, 2000.0)
    _offset_file(tmp_path, 6, make_offset("ods.a", [45, 50]), make_offset("ods.b", [27]))
    assert input_times(_Times(), tmp_path, 6) == (None, None)  # nothing new: no times


def test_batch_ranges_start_where_the_previous_batch_ended(tmp_path):
    """The driver-side read of a micro-batch: a replayed batch id reads the same range again."""
    from runtime.spark.writer import batch_ranges

    _offset_file(tmp_path, 0, make_offset("ods.a", [3, 0]))
    _offset_file(tmp_path, 1, make_offset("ods.a", [30, 50]), make_offset("ods.b", [7]))
    _offset_file(tmp_path, 2, make_offset("ods.a", [45, 50]), make_offset("ods.b", [7]))
    assert batch_ranges(tmp_path, 0) == {"ods.a": ({}, {"0": 3, "1": 0})}  # earliest: every bucket at 0
    assert batch_ranges(tmp_path, 1) == {
        "ods.a": ({"0": 3, "1": 0}, {"0": 30, "1": 50}),
        "ods.b": ({}, {"0": 7}),
    }
    assert (
        batch_ranges(tmp_path, 2)
        == batch_ranges(tmp_path, 2)
        == {"ods.a": ({"0": 30, "1": 50}, {"0": 45, "1": 50}), "ods.b": ({"0": 7}, {"0": 7})}
    )


def test_a_micro_batch_whose_offset_log_is_missing_fails_instead_of_reading_nothing(tmp_path):
    """Spark writes a batch's offset-log entry before running it: no entry (a checkpoint on a file system the
    driver cannot read, a damaged checkpoint) must stop the query, not make the batch read and write
    nothing."""
    from runtime.spark.writer import batch_ranges

    _offset_file(tmp_path, 0, make_offset("ods.a", [3, 0]))
    for batch_id, call in ((3, batch_ranges), (6, lambda c, b: origin_from_checkpoint(_Times(), c, b))):
        with pytest.raises(TidehouseError) as info:
            call(tmp_path, batch_id)
        assert info.value.code is ErrorCode.STORAGE_IO
        assert info.value.location.file == str(tmp_path / "offsets" / str(batch_id))
    (tmp_path / "offsets" / "1").mkdir()  # unreadable (a folder where the entry should be)
    with pytest.raises(TidehouseError):
        batch_ranges(tmp_path, 1)


def test_session_conf_merges_project_conf_and_keeps_logs_quiet():
    from runtime.spark.session import DEFAULT_CONF, session_conf

    conf = session_conf(
        "local[*]", {"spark.sql.shuffle.partitions": 8, "spark.driver.extraJavaOptions": "-Dx=1"}
    )
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.python.worker.reuse"] == DEFAULT_CONF["spark.python.worker.reuse"]
    opts = conf["spark.driver.extraJavaOptions"]
    assert opts.startswith("-Dx=1 ") and "log4j2.configurationFile=file:" in opts
    log4j = opts.split("log4j2.configurationFile=file:", 1)[1]
    assert "rootLogger.level = warn" in Path(log4j).read_text()
    # a trigger that waits for rows lasts longer than its interval by design: Spark's warning is off
    assert "ProcessingTimeExecutor\nlogger.trigger.level = error" in Path(log4j).read_text()
    cluster = session_conf("spark://head:7077", {})
    assert "spark.driver.host" not in cluster and "spark.driver.bindAddress" not in cluster
    # the driver JVM of a cluster only plans: C1 only; in local mode it runs the tasks (C2)
    assert "-XX:TieredStopAtLevel=1" in cluster["spark.driver.extraJavaOptions"]
    assert "TieredStopAtLevel" not in session_conf("local[2]", {})["spark.driver.extraJavaOptions"]
    # executors leave C2 to their hottest code; local mode has no executors; a project's own options win
    assert "-XX:Tier4InvocationThreshold=100000" in cluster["spark.executor.extraJavaOptions"]
    assert "spark.executor.extraJavaOptions" not in session_conf("local[2]", {})
    theirs = session_conf("spark://head:7077", {"spark.executor.extraJavaOptions": "-Dy=2"})
    assert theirs["spark.executor.extraJavaOptions"] == "-Dy=2"
    own = session_conf("spark://head:7077", {"spark.driver.extraJavaOptions": "-Dx=1"})
    assert (
        own["spark.driver.extraJavaOptions"].startswith("-Dx=1 ")
        and "Tiered" not in own["spark.driver.extraJavaOptions"]
    )
    assert (
        session_conf("spark://head:7077", {"spark.driver.host": "10.0.0.5"})["spark.driver.host"]
        == "10.0.0.5"
    )


def test_local_checkpoints_use_a_checkpoint_manager_that_does_not_fork():
    """Spark's default checkpoint manager forks chmod/readlink per log file on a local disk: the session names
    a FileSystem manager class that the installed Spark jar holds (checkpoints are always local)."""
    import zipfile

    import pyspark

    from runtime.spark.session import local_checkpoint_conf, session_conf

    local = local_checkpoint_conf()
    cls = local["spark.sql.streaming.checkpointFileManagerClass"]
    jar = next((Path(pyspark.__file__).parent / "jars").glob("spark-sql_*.jar"))
    assert cls.replace(".", "/") + ".class" in zipfile.ZipFile(jar).namelist()
    assert session_conf("local[2]")["spark.sql.streaming.checkpointFileManagerClass"] == cls
    mine = {"spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.LocalFileSystem"}
    assert session_conf("local[2]", mine)["spark.hadoop.fs.file.impl"] == mine["spark.hadoop.fs.file.impl"]


@pytest.mark.spark
def test_every_new_session_can_read_a_tidehouse_stream(spark, tmp_path):
    """Sessions made by ``newSession()`` (one per query) each find the data source, however many there are
    and whichever session was active last."""
    import pyarrow as pa

    from runtime.spark.session import new_session
    from runtime.storage import TableMeta, open_store

    store = open_store(str(tmp_path / "hot"), fsync=False)
    store.create_table(TableMeta("ods.a", pa.schema([("x", pa.int64())])))
    for _ in range(4):
        session = new_session(spark)
        stream = (
            session.readStream.format("tidehouse")
            .option("root", str(tmp_path / "hot"))
            .option("table", "ods.a")
            .load()
        )
        assert stream.columns[0] == "x"
        session.createDataFrame([(1,)], "x long").createOrReplaceTempView("v")
        assert session.sql("SELECT count(*) FROM v").collect()[0][0] == 1


def test_driver_jvm_runs_the_serial_collector_unless_the_project_says_otherwise():
    """The serial collector keeps the driver's heap near its live data (G1 grew it to 0.5-0.8 GiB on the
    vs_sdp benchmark); a project's own JVM options replace the default, with the log4j option still added."""
    from runtime.spark.session import DEFAULT_CONF, session_conf

    assert "-XX:+UseSerialGC" in DEFAULT_CONF["spark.driver.extraJavaOptions"]
    assert "-XX:+UseSerialGC" in session_conf("local[2]")["spark.driver.extraJavaOptions"]
    mine = session_conf("local[2]", {"spark.driver.extraJavaOptions": "-XX:+UseG1GC"})
    opts = mine["spark.driver.extraJavaOptions"]
    assert (
        opts.startswith("-XX:+UseG1GC ") and "UseSerialGC" not in opts and "log4j2.configurationFile" in opts
    )


@pytest.mark.spark
def test_the_shared_session_runs_the_serial_collector(spark):
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    assert {bean.getName() for bean in beans} == {"Copy", "MarkSweepCompact"}  # the serial collector's


def test_python_workers_get_time_to_connect_back_on_a_loaded_machine():
    from runtime.spark.session import session_conf

    assert session_conf("local[2]")["spark.python.authenticate.socketTimeout"] == "120s"
    assert (
        session_conf("local[2]", {"spark.python.authenticate.socketTimeout": "30s"})[
            "spark.python.authenticate.socketTimeout"
        ]
        == "30s"
    )


_RUNNER_END = """
import sys
from runtime.spark.datasource import StreamReader

reader = StreamReader.__new__(StreamReader)
try:  # as pyspark's python_streaming_source_runner ends: its loop's finally, then its error handler
    try:
        raise {error}("the JVM closed the socket")
    finally:
        reader.stop()
except BaseException:
    raise BrokenPipeError("writing the error back to the closed socket")
"""


@pytest.mark.parametrize("error, printed", [("EOFError", False), ("RuntimeError", True)])
def test_a_stopped_queries_source_runner_prints_no_traceback(error, printed):
    """After an EOF (the JVM closed the runner's socket) the runner's failure to report it is not printed; a
    real error still is."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _RUNNER_END.format(error=error)], capture_output=True, text=True, check=False
    )
    assert out.returncode != 0
    assert ("Traceback" in out.stderr) is printed, out.stderr
