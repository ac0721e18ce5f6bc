"""Secrets in the project file come from ``${ENV_VAR}`` and are never printed.

A unique secret is put in the environment and referenced from every place a credential lives: the registry
URL's password, lake catalog token / credential / object-store keys, a storage URI and Spark's Hadoop S3 keys.
Then ``tidehouse info`` (text and JSON), failing commands, and the same with ``--debug`` (tracebacks
included) must not contain it anywhere -- nor the Config's ``repr`` (what a traceback with locals, a log
line or a test failure would show).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from runtime.core.config import load_config
from tests.reliability._project import cli

TIDEHOUSE = str(Path(sys.executable).with_name("tidehouse"))


def _secrets() -> dict[str, str]:
    tag = uuid.uuid4().hex[:12]
    return {
        name: f"S3cr3t{name[3:]}{tag}"
        for name in (
            "TH_DB_PASSWORD",
            "TH_CATALOG_TOKEN",
            "TH_CATALOG_CREDENTIAL",
            "TH_S3_SECRET",
            "TH_STORAGE_KEY",
            "TH_SPARK_S3_SECRET",
        )
    }


def _project_file(home: Path, *, registry_url: str, catalog_uri: str | None = None) -> str:
    lake = home / "lake"
    return f"""
registry:
  url: "{registry_url}"
lake:
  catalog:
    type: sql
    uri: "{catalog_uri or f"sqlite:///{lake}/catalog.db"}"
    warehouse: "{(lake / "warehouse").as_uri()}"
    token: "${{TH_CATALOG_TOKEN}}"
    credential: "client:${{TH_CATALOG_CREDENTIAL}}"
    s3.secret-access-key: "${{TH_S3_SECRET}}"
storage:
  root: "{home}/hot?key=${{TH_STORAGE_KEY}}"
spark:
  conf:
    spark.hadoop.fs.s3a.secret.key: "${{TH_SPARK_S3_SECRET}}"
"""


@pytest.fixture
def secret_project(tmp_path, monkeypatch):
    secrets = _secrets()
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    root = tmp_path / "proj"
    root.mkdir()
    home = tmp_path / "home"
    monkeypatch.chdir(root)
    return root, home, secrets


def _assert_clean(outputs: list[str], secrets: dict[str, str]) -> None:
    text = "\n".join(outputs)
    leaked = [name for name, value in secrets.items() if value in text]
    assert not leaked, f"secrets {leaked} printed in:\n{text[:4000]}"


def test_config_repr_and_masked_never_show_secrets(secret_project):
    root, home, secrets = secret_project
    (root / "tidehouse.yaml").write_text(
        _project_file(home, registry_url="postgresql://th:${TH_DB_PASSWORD}@db/th")
    )
    config = load_config(home=home, project_dir=root)
    assert secrets["TH_DB_PASSWORD"] in config.registry_url  # the value is there for the code that needs it
    _assert_clean(
        [repr(config), str(config), json.dumps(config.masked(), default=str), repr(config.masked())], secrets
    )


@pytest.mark.reliability
@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
def test_info_never_prints_secrets(secret_project, debug):
    root, home, secrets = secret_project
    (root / "tidehouse.yaml").write_text(
        _project_file(
            home,
            registry_url="sqlite:///" + str(home / "r.db") + "?pw=${TH_DB_PASSWORD}",
            catalog_uri="postgresql://th:${TH_DB_PASSWORD}@catalog-db/iceberg",
        )
    )
    flags = ["--debug"] if debug else []
    outputs = []
    for fmt in ("text", "json"):
        code, out, err = cli(home, *flags, "info", "--format", fmt)
        assert code == 0, err
        outputs += [out, err]
    assert "****" in outputs[0]
    assert f"logs:      {home / 'logs'} (spark.log" in outputs[0]  # where to look when Spark fails
    assert json.loads(outputs[2])["logs"] == str(home / "logs")
    _assert_clean(outputs, secrets)


FAILING = [
    # (registry url, command): every one fails, with and without --debug
    ("postgresql+nosuchdriver://th:${TH_DB_PASSWORD}@127.0.0.1:1/th", ["action", "list"]),
    ("postgresql://th:${TH_DB_PASSWORD}@127.0.0.1:1/th", ["flow", "list"]),
    ("sqlite:////nonexistent/dir/${TH_DB_PASSWORD}/r.db", ["flow", "list"]),
    ("not a url ${TH_DB_PASSWORD}", ["action", "list"]),
    ("sqlite:///${TH_DB_PASSWORD}/../r.db", ["flow", "register", "missing.yaml"]),
]


@pytest.mark.reliability
@pytest.mark.parametrize("url,command", FAILING, ids=[f"{c[1][0]}-{i}" for i, c in enumerate(FAILING)])
def test_failing_commands_never_print_secrets(secret_project, url, command):
    root, home, secrets = secret_project
    (root / "tidehouse.yaml").write_text(_project_file(home, registry_url=url))
    outputs = []
    for flags in ([], ["--debug"]):
        code, out, err = cli(home, *flags, *command)
        assert code != 0, (out, err)
        outputs += [out, err]
    _assert_clean(outputs, secrets)


@pytest.mark.reliability
def test_missing_env_var_names_the_variable_not_a_value(secret_project, monkeypatch):
    root, home, secrets = secret_project
    monkeypatch.delenv("TH_CATALOG_TOKEN")
    (root / "tidehouse.yaml").write_text(_project_file(home, registry_url="sqlite:///x?pw=${TH_DB_PASSWORD}"))
    code, out, err = cli(home, "--debug", "info")
    assert code == 2 and "TH_CATALOG_TOKEN" in err and "[TH101]" in err, err
    _assert_clean([out, err], secrets)


@pytest.mark.reliability
def test_real_process_with_debug_never_prints_secrets(secret_project, tmp_path):
    """A real ``tidehouse --debug`` process (stderr, warnings and logging included)."""
    root, home, secrets = secret_project
    (root / "tidehouse.yaml").write_text(
        _project_file(home, registry_url="postgresql://th:${TH_DB_PASSWORD}@127.0.0.1:1/th")
    )
    env = {**os.environ, "TIDEHOUSE_HOME": str(home), "PYTHONWARNINGS": "always"}
    outputs = []
    for args in (
        ["--debug", "info", "--format", "json"],
        ["--debug", "flow", "list"],
        ["--debug", "tier", "run"],
    ):
        proc = subprocess.run(
            [TIDEHOUSE, *args], cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        outputs += [proc.stdout, proc.stderr]
    _assert_clean(outputs, secrets)
