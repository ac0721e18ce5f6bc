"""Settings and options that name a place: an unsupported URI scheme is an error at start-up, never a local
folder named after the scheme; relative paths resolve against the project directory, not the current one."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.core.config import load_config
from runtime.core.errors import ErrorCode, TidehouseError
from runtime.storage import open_store


@pytest.mark.parametrize(
    "setting, value",
    [
        ("storage", "root: s3a://bucket/prefix"),
        ("storage", "root: s3:///no-bucket"),
        ("storage", "root: gs://bucket/prefix"),
        ("checkpoints", "root: s3://bucket/ckpt"),
        ("checkpoints", "root: s3a://bucket/ckpt"),
        ("checkpoints", "root: hdfs://namenode/ckpt"),
        ("storage", "root: file://otherhost/data"),
    ],
)
def test_an_unsupported_scheme_for_a_place_is_refused_at_its_line(tmp_path, monkeypatch, setting, value):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tidehouse.yaml").write_text(f"# places\n{setting}:\n  {value}\n")
    with pytest.raises(TidehouseError) as info:
        load_config()
    error = info.value
    assert error.code is ErrorCode.CONFIG_INVALID
    assert (error.location.line, error.location.path) == (3, f"{setting}.root")
    assert not any(p.name.endswith(":") for p in tmp_path.rglob("*")), "a folder named after the scheme"


def test_local_places_accept_paths_and_file_uris_relative_to_the_project(tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    (project / "tidehouse.yaml").write_text(
        f"storage:\n  root: hot-here\ncheckpoints:\n  root: {(tmp_path / 'ck').as_uri()}\n"
    )
    monkeypatch.chdir(project / "sub")  # found by searching upwards; relative to the project, not the cwd
    config = load_config()
    assert config.storage_root == str(project / "hot-here")
    assert config.checkpoint_root == str(tmp_path / "ck")


def test_an_s3_storage_root_loads_with_its_metastore_and_s3_options_masked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TH_TEST_SECRET", "s3cr3t-value")
    (tmp_path / "tidehouse.yaml").write_text(
        "storage:\n  root: s3://bucket/prefix\n  metastore: postgresql+psycopg://th:pw123@db.example/th\n"
        "  s3: {endpoint: 'http://127.0.0.1:8333', access_key: AKIDEXAMPLE, "
        "secret_key: '${TH_TEST_SECRET}'}\n"
    )
    config = load_config()
    assert config.storage_root == "s3://bucket/prefix"  # kept as a URI, not made a local path
    shown = repr(config.masked())
    assert "s3cr3t-value" not in shown and "pw123" not in shown and "AKIDEXAMPLE" not in shown
    assert config.masked()["storage.metastore"] == "postgresql+psycopg://th:****@db.example/th"


def test_an_unknown_s3_option_is_refused_at_its_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tidehouse.yaml").write_text(
        "storage:\n  root: s3://b/p\n  s3:\n    endpiont: http://x:1\n  metastore: sqlite:///m.db\n"
    )
    with pytest.raises(TidehouseError) as info:
        load_config()
    assert info.value.code is ErrorCode.CONFIG_INVALID
    assert (info.value.location.line, info.value.location.path) == (4, "storage.s3.endpiont")


@pytest.mark.parametrize(
    ("storage", "line", "message"),
    [
        ("  root: s3://b/p\n", 2, "storage.root: an object-store root (s3://) needs storage.metastore"),
        ("  metastore: sqlite:///m.db\n", 2, "storage.metastore: the hot storage root is local: only an"),
        ("  root: hot\n  s3: {endpoint: 'http://x:1'}\n", 3, "storage.s3: the hot storage root is local"),
    ],
)
def test_storage_settings_that_need_each_other_are_refused_at_their_line(
    tmp_path, monkeypatch, storage, line, message
):
    """An s3:// root without a metastore, or a metastore or S3 options beside a local root, were refused
    only when the store opened, without a line (`tidehouse info` showed them as fine)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tidehouse.yaml").write_text("storage:\n" + storage)
    with pytest.raises(TidehouseError) as info:
        load_config()
    assert info.value.location.line == line and info.value.render().startswith(
        f"{tmp_path / 'tidehouse.yaml'}:{line}:"
    )
    assert message in info.value.render(), info.value.render()


def test_an_s3_root_without_a_metastore_is_refused_naming_the_setting(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TidehouseError) as info:
        open_store("s3://bucket/prefix")
    assert info.value.code is ErrorCode.CONFIG_INVALID and info.value.location.path == "storage.metastore"
    assert list(tmp_path.iterdir()) == []


def test_a_metastore_with_a_local_root_is_refused(tmp_path):
    with pytest.raises(TidehouseError) as info:
        open_store(str(tmp_path / "hot"), metastore="sqlite:///x.db")
    assert info.value.code is ErrorCode.CONFIG_INVALID and info.value.location.path == "storage.metastore"


@pytest.mark.parametrize("root", ["gs://b/p", "s3a://x", "hdfs://nn/p"])
def test_opening_a_store_on_an_unsupported_scheme_fails_without_creating_a_local_folder(
    tmp_path, monkeypatch, root
):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TidehouseError) as info:
        open_store(root)
    assert info.value.code is ErrorCode.STORAGE_IO
    assert list(tmp_path.iterdir()) == []


def test_a_store_opens_on_a_file_uri(tmp_path):
    store = open_store((tmp_path / "hot").as_uri())
    assert Path(store.root) == tmp_path / "hot" and (tmp_path / "hot").is_dir()


@pytest.mark.parametrize("where", ["--home", "home:"])
def test_a_home_that_cannot_be_a_folder_is_a_user_error(run_cli, project_dir, tmp_path, monkeypatch, where):
    """A file, or a folder that cannot be made under one: exit 2 naming the home (was TH900, an internal
    error; click checks --home and $TIDEHOUSE_HOME against a regular file, not what lies below one)."""
    afile = tmp_path / "a-file"
    afile.write_text("")
    if where == "--home":
        home, why, args = afile / "below", "Not a directory", ["--home", str(afile / "below")]
    else:
        (project_dir / "tidehouse.yaml").write_text(f"home: {afile}\n")
        monkeypatch.delenv("TIDEHOUSE_HOME", raising=False)  # (the tests' own home would win)
        home, why, args = afile, "it exists and is not a directory", []
    code, out, err = run_cli(*args, "flow", "list")
    assert (code, out) == (2, "")
    assert err.startswith(f"error: cannot use {home} as the home directory: {why} ("), err
    assert err.rstrip().endswith("[TH100]")
