"""The project file ``tidehouse.yaml`` is read as strictly as a flow: every error names its line and setting.

Invalid project files are a table of cases: ``(id, content, error code, line, col, setting path)``. Each one
must raise that code at ``tidehouse.yaml:LINE:COL: setting.path`` (tests assert the code and the location,
not the prose). Valid ones check that nothing is dropped or replaced on the way in.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.core.config import PROJECT_FILE, load_config
from runtime.core.errors import ErrorCode, TidehouseError, TidehouseErrors

C, E = ErrorCode.CONFIG_INVALID, ErrorCode.CONFIG_MISSING_ENV

INVALID = [
    # a duplicated key used to keep the last value silently
    (
        "duplicate-key",
        "storage:\n  fsync: false\n  fsync: true\n",
        ErrorCode.YAML_DUPLICATE_KEY,
        3,
        3,
        "storage.fsync",
    ),
    (
        "duplicate-group",
        "tiering:\n  interval: 5s\nstorage: {fsync: false}\ntiering:\n  max_snapshots: 3\n",
        ErrorCode.YAML_DUPLICATE_KEY,
        4,
        1,
        "tiering",
    ),
    # one setting written twice, once nested and once dotted: the later one used to win silently
    (
        "same-setting-two-spellings",
        "storage.fsync: false\nstorage:\n  fsync: true\n",
        C,
        3,
        3,
        "storage.fsync",
    ),
    ("unknown-setting", "storage:\n  fsynk: false\n", C, 2, 3, "storage.fsynk"),
    ("unknown-group", "sparkk:\n  master: local[2]\n", C, 1, 1, "sparkk"),
    ("unknown-dotted", "lake.catalog.uri: x\n", C, 1, 1, "lake.catalog.uri"),
    ("group-is-a-scalar", "storage: fast\n", C, 1, 10, "storage"),
    ("bad-integer", "storage:\n  segment_bytes: lots\n", C, 2, 18, "storage.segment_bytes"),
    ("boolean-for-integer", "storage:\n  segment_bytes: true\n", C, 2, 18, "storage.segment_bytes"),
    ("bad-duration", "tiering:\n  interval: soon\n", C, 2, 13, "tiering.interval"),
    # sizes and caps that 0 or a negative number would not bound: 0 rows per batch read as no cap at all
    (
        "zero-batch-cap",
        "materializer:\n  max_rows_per_batch: 0\n",
        C,
        2,
        23,
        "materializer.max_rows_per_batch",
    ),
    (
        "negative-executor-cap",
        "materializer:\n  executor_rows_per_batch: -3\n",
        C,
        2,
        28,
        "materializer.executor_rows_per_batch",
    ),
    ("zero-segment", "storage:\n  segment_bytes: 0\n", C, 2, 18, "storage.segment_bytes"),
    ("zero-snapshot-rows", "storage:\n  state_snapshot_rows: 0\n", C, 2, 24, "storage.state_snapshot_rows"),
    ("negative-target", "tiering:\n  compact_target_bytes: -1\n", C, 2, 25, "tiering.compact_target_bytes"),
    # 0 turns these off (their descriptions say so); not below 0, nor 1 file to compact (rewritten alone)
    ("negative-snapshots", "tiering:\n  max_snapshots: -1\n", C, 2, 18, "tiering.max_snapshots"),
    ("compact-one-file", "tiering:\n  compact_min_files: 1\n", C, 2, 22, "tiering.compact_min_files"),
    # YAML's .nan and .inf are floats: a NaN interval was accepted
    ("nan-duration", "tiering:\n  interval: .nan\n", C, 2, 13, "tiering.interval"),
    ("infinite-duration", "tiering:\n  interval: .inf\n", C, 2, 13, "tiering.interval"),
    # YAML 1.1 read 1:30 as 90 (seconds): now it is the string '1:30', which is not a duration
    ("sexagesimal-duration", "tiering:\n  interval: 1:30\n", C, 2, 13, "tiering.interval"),
    # APScheduler made an interval of 0 one of 1 s, without a word
    ("zero-interval", "tiering:\n  interval: 0s\n", C, 2, 13, "tiering.interval"),
    # master URLs the JVM's launcher refused with a Java stack trace, after Spark began to start
    ("master-no-threads", "spark:\n  master: local[0]\n", C, 2, 11, "spark.master"),
    ("master-not-a-url", "spark:\n  master: local[x]\n", C, 2, 11, "spark.master"),
    ("master-no-port", "spark:\n  master: spark://h\n", C, 2, 11, "spark.master"),
    ("master-a-host", "spark:\n  master: localhost\n", C, 2, 11, "spark.master"),
    ("ambiguous-boolean", "storage:\n  fsync: no\n", C, 2, 10, "storage.fsync"),
    (
        "ambiguous-in-spark-conf",
        "spark:\n  conf:\n    spark.sql.adaptive.enabled: off\n",
        C,
        3,
        33,
        "spark.conf.spark.sql.adaptive.enabled",
    ),
    ("ambiguous-string-setting", "spark:\n  master: on\n", C, 2, 11, "spark.master"),
    # an empty value used to fall back to the default without a word
    ("empty-storage-root", "storage:\n  root: ''\n", C, 2, 9, "storage.root"),
    (
        "empty-registry-url-from-env",
        'registry:\n  url: "${TH_TEST_UNSET_VARIABLE:-}"\n',
        C,
        2,
        8,
        "registry.url",
    ),
    ("null-setting", "checkpoints:\n  root:\n", C, 2, 3, "checkpoints.root"),
    # spark.conf / lake.catalog take flat key -> scalar maps; nested maps and nulls used to become
    # "{...}"/"None"
    (
        "nested-spark-conf",
        "spark:\n  conf:\n    spark:\n      executor.memory: 4g\n",
        C,
        3,
        5,
        "spark.conf.spark",
    ),
    (
        "null-spark-conf",
        "spark:\n  conf:\n    spark.executor.memory:\n",
        C,
        3,
        5,
        "spark.conf.spark.executor.memory",
    ),
    ("list-in-catalog", "lake:\n  catalog:\n    type: rest\n    uri: [a, b]\n", C, 4, 5, "lake.catalog.uri"),
    # a misspelt catalog type passed every check and failed only at the first tiering cycle
    ("unknown-catalog-type", "lake:\n  catalog:\n    type: nessie\n", C, 3, 5, "lake.catalog.type"),
    (
        "missing-env",
        'lake:\n  catalog:\n    type: rest\n    token: "${TH_TEST_UNSET_VARIABLE}"\n',
        E,
        4,
        12,
        "lake.catalog.token",
    ),
    ("remote-not-connect", "spark:\n  remote: http://host:15002\n", C, 2, 11, "spark.remote"),
    # a master and a Connect server at once: one of them would be ignored
    ("master-and-remote", "spark:\n  master: local[2]\n  remote: sc://h:15002\n", C, 3, 3, "spark.remote"),
    # the driver path over Connect would move every batch into the server's one Python process
    (
        "driver-path-over-connect",
        "spark:\n  remote: sc://h:15002\nmaterializer:\n  data_path: driver\n",
        C,
        4,
        14,
        "materializer.data_path",
    ),
    ("home-not-a-string", "home: [a, b]\n", C, 1, 7, "home"),
    ("home-empty", "home: ''\n", C, 1, 7, "home"),
    ("not-a-mapping", "- storage\n- fsync\n", C, 1, 1, None),
    ("syntax-error", "storage: {fsync: false\n", ErrorCode.YAML_SYNTAX, 2, 1, None),
]


def _load(tmp_path: Path, content: str):
    (tmp_path / PROJECT_FILE).write_text(content)
    return load_config(home=tmp_path / "home", project_dir=tmp_path)


def _errors(exc: TidehouseError) -> list[TidehouseError]:
    return list(exc.errors) if isinstance(exc, TidehouseErrors) else [exc]


@pytest.mark.parametrize("content,code,line,col,path", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_project_file_is_refused_at_its_line_and_setting(
    tmp_path, monkeypatch, content, code, line, col, path
):
    monkeypatch.delenv("TH_TEST_UNSET_VARIABLE", raising=False)
    with pytest.raises(TidehouseError) as info:
        _load(tmp_path, content)
    found = [(e.code, e.location.line, e.location.col, e.location.path) for e in _errors(info.value)]
    assert (code, line, col, path) in found, found
    for error in _errors(info.value):
        assert Path(error.location.file).name == PROJECT_FILE, error.render()
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    "master",
    ["local", "local[*]", "local[2]", "local[*, 3]", "local[2,4]", "local-cluster[2, 1, 1024]"]
    + ["spark://127.0.0.1:7077", "spark://h1:7077,h2:7077", "yarn", "k8s://https://k8s.example:6443"]
    + ["armada://cluster:50051"],  # a cluster manager's plugin: Spark finds it, or says it cannot parse it
)
def test_every_master_url_form_spark_parses_is_taken(tmp_path, master):
    assert _load(tmp_path, f"spark:\n  master: '{master}'\n").get("spark.master") == master


def test_the_catalog_types_are_pyicebergs_in_any_case(tmp_path):
    from pyiceberg.catalog import CatalogType

    from runtime.core.settings import CATALOG_TYPES

    assert sorted(CATALOG_TYPES) == sorted(t.value for t in CatalogType)
    config = _load(tmp_path, "lake:\n  catalog:\n    type: REST\n    uri: http://x:8181\n")
    assert config.lake_catalog_properties == {"type": "REST", "uri": "http://x:8181"}


def test_the_message_reads_file_line_col_setting(tmp_path):
    with pytest.raises(TidehouseError) as info:
        _load(tmp_path, "# settings\nstorage:\n  fsync: no\n")
    assert info.value.render().startswith(f"{tmp_path / PROJECT_FILE}:3:10: storage.fsync: ")


def test_unknown_setting_suggests_the_closest_one(tmp_path):
    with pytest.raises(TidehouseError) as info:
        _load(tmp_path, "tiering:\n  intervall: 5s\n")
    assert "tiering.interval" in (info.value.hint or "")


@pytest.mark.parametrize(
    "content",
    ["", "\n\n", "# nothing set yet\n# storage:\n#   fsync: false\n"],
    ids=["empty", "blank-lines", "comments-only"],
)
def test_an_empty_project_file_means_no_settings(tmp_path, content):
    config = _load(tmp_path, content)
    assert dict(config.values) == {} and config.home == (tmp_path / "home").resolve()


def test_settings_are_read_with_yaml_1_2_values(tmp_path):
    config = _load(
        tmp_path,
        "storage.fsync: false\ntiering:\n  interval: 1m\n  max_snapshots: 0x10\n"
        "spark:\n  conf: {spark.executor.cores: 2, spark.sql.adaptive.enabled: true}\n"
        "lake:\n  catalog: {type: sql, s3.endpoint: 'http://x:8333'}\n",
    )
    assert config.get("storage.fsync") is False
    assert config.get("tiering.interval") == 60.0 and config.get("tiering.max_snapshots") == 16
    assert config.get("spark.conf") == {"spark.executor.cores": 2, "spark.sql.adaptive.enabled": True}
    assert config.lake_catalog_properties == {"type": "sql", "s3.endpoint": "http://x:8333"}


def test_env_references_still_expand_and_count_as_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("TH_TEST_ROOT", str(tmp_path / "hot-from-env"))
    config = _load(
        tmp_path, 'storage:\n  root: "${TH_TEST_ROOT}"\nregistry:\n  url: ${TH_TEST_UNSET:-sqlite:///x.db}\n'
    )
    assert config.storage_root == str(tmp_path / "hot-from-env")
    assert config.registry_url == "sqlite:///x.db"
    assert {"storage.root", "registry.url"} <= set(config.from_env)


def test_home_in_the_project_file_is_relative_to_it(tmp_path, monkeypatch):
    monkeypatch.delenv("TIDEHOUSE_HOME", raising=False)
    (tmp_path / PROJECT_FILE).write_text("home: state\n")
    assert load_config(project_dir=tmp_path).home == (tmp_path / "state").resolve()


def test_a_project_file_that_is_not_a_file_is_an_error(tmp_path):
    (tmp_path / PROJECT_FILE).mkdir()
    with pytest.raises(TidehouseError) as info:
        load_config(home=tmp_path / "home", project_dir=tmp_path)
    assert info.value.code is ErrorCode.CONFIG_INVALID and Path(info.value.location.file).name == PROJECT_FILE


def test_cli_prints_the_located_project_file_error(run_cli, project_dir):
    (project_dir / PROJECT_FILE).write_text("storage:\n  fsync: false\n  fsync: true\n")
    code, _, err = run_cli("info")
    assert code == 2 and "Traceback" not in err
    assert f"{PROJECT_FILE}:3:3: storage.fsync: duplicate key 'fsync'" in err and "[TH201]" in err
