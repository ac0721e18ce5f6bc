"""A misspelt key under ``spark.conf`` (``spark.sql.shufle.partitions: 4``) was passed to Spark, which
ignores keys it does not define: the setting changed nothing, with no word. Now a key within two edits (or a
change of case) of one Spark defines is refused at its line; a key far from every Spark key (a connector's)
is passed as before."""

from __future__ import annotations

import pytest

from runtime.spark.confkeys import _edits, refused_key, typo_of

KNOWN = frozenset({"spark.sql.shuffle.partitions", "spark.executor.memory", "spark.executor.cores"})


def test_a_key_near_one_spark_defines_is_a_typo_of_it():
    assert typo_of("spark.sql.shuffle.partitions", KNOWN) is None  # Spark's own
    assert typo_of("spark.sql.shufle.partitions", KNOWN) == "spark.sql.shuffle.partitions"  # one edit
    assert typo_of("spark.executor.memroy", KNOWN) == "spark.executor.memory"  # two edits
    assert typo_of("spark.Executor.Memory", KNOWN) == "spark.executor.memory"  # Spark's keys keep their case
    assert typo_of("spark.exec.memory", KNOWN) is None  # four edits: not a typo of it
    assert typo_of("spark.cassandra.connection.host", KNOWN) is None  # a connector's own key
    assert typo_of("sprak.executor.memory", KNOWN) is None  # not Spark's name space: Spark warns itself
    assert typo_of("spark.hadoop.fs.s3a.endpoint", KNOWN | {"spark.hadoop.fs.s3a.endpoints"}) is None
    assert typo_of("spark.sql.shufle.partitions", frozenset()) is None  # a Spark whose keys were not read
    assert [_edits(a, b) for a, b in [("", "ab"), ("ab", "ba"), ("kitten", "sitting"), ("x", "x")]] == [
        2,
        2,
        3,
        0,
    ]


@pytest.mark.spark
def test_the_installed_spark_s_keys_are_read_and_tidehouse_s_own_settings_are_among_them(spark):
    from runtime.spark.confkeys import known_keys
    from runtime.spark.session import DEFAULT_CONF, local_checkpoint_conf

    known = known_keys(spark)
    assert len(known) > 1000, len(known)  # SQL and core settings both
    assert {
        "spark.sql.shuffle.partitions",
        "spark.executor.memory",
        "spark.sql.streaming.pollingDelay",
    } <= known
    # not every key Spark reads is in its registries (spark.hadoop.*, a checkpoint manager's class), so what
    # matters is that none of them reads as a typo of one that is
    ours = {*DEFAULT_CONF, *local_checkpoint_conf(), "spark.python.daemon.module", "spark.jars"}
    assert {k: typo_of(k, known) for k in ours if typo_of(k, known)} == {}


@pytest.mark.spark
def test_a_misspelt_spark_conf_key_is_refused_at_its_line(spark, tmp_path, monkeypatch):
    from runtime.core.errors import TidehouseError, TidehouseErrors
    from runtime.project import Project

    (tmp_path / "tidehouse.yaml").write_text(
        "spark:\n"
        "  conf:\n"
        "    spark.sql.shuffle.partitions: 2\n"
        "    spark.cassandra.connection.host: db\n"
        "    spark.sql.shufle.partitions: 4\n"
        "    spark.Executor.memory: 1g\n"
    )
    monkeypatch.chdir(tmp_path)
    project = Project.open()
    try:
        with pytest.raises(TidehouseErrors) as info:
            project.spark()
    finally:
        project.close()
    file = str(tmp_path / "tidehouse.yaml")
    found = [
        (e.code.value, e.location.file, e.location.line, e.location.col, e.hint) for e in info.value.errors
    ]
    assert found == [
        ("TH100", file, 5, 5, "did you mean spark.sql.shuffle.partitions?"),
        ("TH100", file, 6, 5, "did you mean spark.executor.memory?"),
    ]
    assert (
        info.value.errors[0].message
        == "Spark has no setting spark.sql.shufle.partitions, so it would ignore it"
    )
    (tmp_path / "tidehouse.yaml").write_text("spark:\n  conf: {spark.cassandra.connection.host: db}\n")
    project = Project.open()
    try:
        assert project.spark() is spark
    except TidehouseError as exc:  # pragma: no cover - the assertion's message
        pytest.fail(str(exc))
    finally:
        project.close()


def test_a_refusal_is_placed_at_the_one_key_it_names():
    conf = {
        "spark.executor.memory": "lots",
        "spark.driver.memory": "2g",
        "spark.sql.shuffle.partitions": "abc",
    }
    quoted = "[INVALID_CONF_VALUE] The value 'abc' in the config \"spark.sql.shuffle.partitions\" is invalid"
    assert refused_key(quoted, conf) == "spark.sql.shuffle.partitions"
    assert refused_key("Executor memory must be a positive number", conf) == "spark.executor.memory"
    assert refused_key("Invalid maximum heap size: -Xmxlots", conf) == "spark.executor.memory"  # its value
    # two keys with that value, a value that is a number, nothing named: no place
    both = {"spark.executor.memory": "lots", "spark.driver.memory": "lots"}
    assert refused_key("Invalid maximum heap size: -Xmxlots", both) is None
    assert refused_key("port 4040 is taken", {"spark.ui.port": "4040"}) is None
    assert refused_key("/usr/bin/java: No such file or directory", conf) is None
    assert refused_key("the app is wrong", {"spark.app": "tidehouse"}) is None  # one word: too common
