"""Hostile inputs through the real CLI: every malformed flow or action exits 2 with a located message.

The case tables of the registry tests (``tests/registry``: ~70 malformed flows, ~20 malformed actions) are
reused and extended with hostile ones: homoglyph and zero-width identifiers, names with a trailing newline,
SQL and path traversal in names, very long names, NUL bytes, YAML tags that would run code, merge-key alias
bombs, oversized and endless files. Each goes through ``flow validate``, ``flow register`` and
``flow trigger`` (or ``action register``) and must

* exit 2 with a ``file:line:col: ...`` message (whole-file errors such as "too large" name the file),
* print no traceback and no "internal error",
* leave the registry exactly as it was (nothing half-registered).
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.registry import test_reg_actions as registry_actions
from tests.registry import test_reg_malformed_flows as registry_flows
from tests.registry._reg_helpers import OTHER_FLOW, write_actions
from tests.reliability._project import cli

TIDEHOUSE = str(Path(sys.executable).with_name("tidehouse"))
HEAD, ODS, flow = registry_flows.HEAD, registry_flows.ODS, registry_flows.flow
SRC = (
    "sources:\n"
    '  clicks: {format: json, path: data/clicks, schema: "user_id string, price double, event_type string"}\n'
)

# (id, file content, the error code's name) -- added to the registry's table
HOSTILE_FLOWS = [
    ("name-trailing-newline", 'flow: "shop\\n"\n' + SRC + "layers:\n  " + ODS, "SPEC_BAD_IDENTIFIER"),
    (
        "table-trailing-newline",
        HEAD + 'layers:\n  ods:\n    "clicks\\n": {action: ingest, inputs: {raw: clicks}}\n',
        "SPEC_BAD_IDENTIFIER",
    ),
    ("name-cyrillic-o", "flow: sh\u043ep\n" + SRC + "layers:\n  " + ODS, "SPEC_BAD_IDENTIFIER"),
    (
        "table-cyrillic-i",
        HEAD + "layers:\n  ods:\n    cl\u0456cks: {action: ingest, inputs: {raw: clicks}}\n",
        "SPEC_BAD_IDENTIFIER",
    ),
    ("name-fullwidth", "flow: \uff53\uff48\uff4f\uff50\n" + SRC + "layers:\n  " + ODS, "SPEC_BAD_IDENTIFIER"),
    ("name-zero-width-space", "flow: sh\u200bop\n" + SRC + "layers:\n  " + ODS, "SPEC_BAD_IDENTIFIER"),
    ("name-rtl-override", 'flow: "shop\u202egnp"\n' + SRC + "layers:\n  " + ODS, "SPEC_BAD_IDENTIFIER"),
    (
        "action-homoglyph",
        HEAD + "layers:\n  ods:\n    clicks: {action: \u0456ngest, inputs: {raw: clicks}}\n",
        "SPEC_BAD_IDENTIFIER",
    ),
    ("name-129-chars", "flow: " + "a" * 129 + "\n" + SRC + "layers:\n  " + ODS, "SPEC_BAD_IDENTIFIER"),
    ("name-100k-chars", "flow: " + "a" * 100_000 + "\n" + SRC + "layers:\n  " + ODS, "SPEC_BAD_IDENTIFIER"),
    (
        "table-10k-chars",
        HEAD + "layers:\n  ods:\n    " + "t" * 10_000 + ": {action: ingest, inputs: {raw: clicks}}\n",
        "YAML_SYNTAX",
    ),  # PyYAML refuses keys over 1024 characters
    (
        "name-sql-drop",
        'flow: "shop; DROP TABLE flows; --"\n' + SRC + "layers:\n  " + ODS,
        "SPEC_BAD_IDENTIFIER",
    ),
    ("name-sql-quote", 'flow: "x\') OR 1=1 --"\n' + SRC + "layers:\n  " + ODS, "SPEC_BAD_IDENTIFIER"),
    (
        "table-sql",
        HEAD
        + 'layers:\n  ods:\n    "c\'); DELETE FROM actions; --": {action: ingest, inputs: {raw: clicks}}\n',
        "SPEC_BAD_IDENTIFIER",
    ),
    (
        "action-sql",
        HEAD + 'layers:\n  ods:\n    clicks: {action: "ingest; DROP TABLE actions", inputs: {raw: clicks}}\n',
        "SPEC_BAD_IDENTIFIER",
    ),
    (
        "action-version-sql",
        HEAD + 'layers:\n  ods:\n    clicks: {action: "ingest@1 OR 1=1", inputs: {raw: clicks}}\n',
        "SPEC_BAD_IDENTIFIER",
    ),
    (
        "input-sql",
        flow(ODS + 'dwd:\n  clean: {action: clean, inputs: {events: "ods.clicks; DROP TABLE x"}}\n'),
        "INPUT_UNKNOWN_TABLE",
    ),
    (
        "source-sql",
        'flow: shop\nsources:\n  "clicks /* */ --": {format: rate}\nlayers:\n  ' + ODS,
        "SPEC_BAD_IDENTIFIER",
    ),
    (
        "param-name-sql",
        flow(
            ODS + "dwd:\n  clean: {action: clean, inputs: {events: ods.clicks},"
            ' params: {"min_price) OR (1=1": 1.0}}\n'
        ),
        "SPEC_BAD_IDENTIFIER",
    ),
    ("name-path-traversal", 'flow: "../../etc/passwd"\n' + SRC + "layers:\n  " + ODS, "SPEC_BAD_IDENTIFIER"),
    (
        "table-path-traversal",
        HEAD + 'layers:\n  ods:\n    "../hot": {action: ingest, inputs: {raw: clicks}}\n',
        "SPEC_BAD_IDENTIFIER",
    ),
    ("name-empty", 'flow: ""\n' + SRC + "layers:\n  " + ODS, "SPEC_BAD_IDENTIFIER"),
    ("name-escaped-nul", 'flow: "sh\\0op"\n' + SRC + "layers:\n  " + ODS, "SPEC_BAD_IDENTIFIER"),
    ("name-ansi-escape", 'flow: "\\e[31mshop"\n' + SRC + "layers:\n  " + ODS, "SPEC_BAD_IDENTIFIER"),
    ("name-reserved-system", "flow: __shop\n" + SRC + "layers:\n  " + ODS, "SPEC_BAD_IDENTIFIER"),
    (
        "table-key-integer",
        HEAD + "layers:\n  ods:\n    123: {action: ingest, inputs: {raw: clicks}}\n",
        "SPEC_WRONG_TYPE",
    ),
    (
        "table-key-complex",
        HEAD + "layers:\n  ods:\n    ? [a, b]\n    : {action: ingest, inputs: {raw: clicks}}\n",
        None,
    ),
    ("raw-nul-in-middle", (HEAD + "layers:\n  ods:\n    cli\x00cks: {}\n").encode(), "YAML_NOT_TEXT"),
    ("utf16-file", ("flow: shop\n" + SRC + "layers:\n  " + ODS).encode("utf-16"), "YAML_NOT_TEXT"),
    ("lone-surrogate-bytes", b"flow: shop\ndescription: \xed\xa0\x80\n", "YAML_NOT_TEXT"),
    (
        "python-apply-tag",
        "flow: !!python/object/apply:os.system ['touch PWNED']\n" + SRC + "layers:\n  " + ODS,
        "YAML_SYNTAX",
    ),
    ("python-name-tag", "flow: !!python/name:os.system\n" + SRC + "layers:\n  " + ODS, "YAML_SYNTAX"),
    ("custom-tag", "flow: !Ref shop\n" + SRC + "layers:\n  " + ODS, "YAML_SYNTAX"),
    (
        "mapping-alias-bomb",
        "".join(
            f"k{i}: &k{i} {{" + ", ".join(f"a{j}: " + (f"*k{i - 1}" if i else "x") for j in range(9)) + "}\n"
            for i in range(8)
        ),
        "YAML_TOO_LARGE",
    ),
    (
        "merge-key-chain",
        "".join(
            f"k{i}: &k{i}\n  <<: [" + ", ".join(f"*k{j}" for j in range(i)) + "]\n  v{i}: 1\n"
            for i in range(1, 60)
        ).replace("<<: []", "x: 0")
        + "flow: shop\n",
        None,
    ),
    ("deep-mapping", "flow: shop\ndescription: " + "{a: " * 100 + "x" + "}" * 100 + "\n", "YAML_TOO_DEEP"),
    (
        "deep-block-mapping",
        "flow: shop\nx:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 80)) + "  " * 80 + "v\n",
        "YAML_TOO_DEEP",
    ),
    ("two-megabyte-line", "flow: shop\ndescription: " + "x" * (2 << 20) + "\n", "YAML_TOO_LARGE"),
    (
        "many-small-tables",
        HEAD
        + "layers:\n  ods:\n"
        + "".join(f"    t{i}: {{action: nope, inputs: {{raw: clicks}}}}\n" for i in range(500)),
        "ACTION_UNKNOWN",
    ),
]

HOSTILE_ACTIONS = [
    (
        "name-trailing-newline",
        '/*---\nname: "a\\n"\ninputs: [t]\n---*/\nSELECT * FROM t\n',
        "SPEC_BAD_IDENTIFIER",
    ),
    (
        "name-homoglyph",
        "/*---\nname: \u0456ngest\ninputs: [t]\n---*/\nSELECT * FROM t\n",
        "SPEC_BAD_IDENTIFIER",
    ),
    (
        "name-sql",
        '/*---\nname: "a\'; DROP TABLE actions; --"\ninputs: [t]\n---*/\nSELECT * FROM t\n',
        "SPEC_BAD_IDENTIFIER",
    ),
    (
        "name-long",
        "/*---\nname: " + "a" * 5000 + "\ninputs: [t]\n---*/\nSELECT * FROM t\n",
        "SPEC_BAD_IDENTIFIER",
    ),
    (
        "input-sql",
        '/*---\nname: a\ninputs: ["t; DROP TABLE x"]\n---*/\nSELECT * FROM t\n',
        "SPEC_BAD_IDENTIFIER",
    ),
    (
        "param-name-sql",
        '/*---\nname: a\ninputs: [t]\nparams:\n  "p OR 1=1": {type: int}\n---*/\nSELECT * FROM t\n',
        "SPEC_BAD_IDENTIFIER",
    ),
    (
        "python-tag",
        "/*---\nname: !!python/object/apply:os.system ['touch PWNED']\ninputs: [t]\n---*/\nSELECT 1\n",
        "YAML_SYNTAX",
    ),
    (
        "header-alias-bomb",
        "/*---\n"
        + "".join(f"k{i}: &k{i} [" + ", ".join([f"*k{i - 1}" if i else "x"] * 9) + "]\n" for i in range(8))
        + "name: a\n---*/\nSELECT 1\n",
        "YAML_TOO_LARGE",
    ),
    (
        "huge-sql",
        "/*---\nname: a\ninputs: [t]\n---*/\nSELECT * FROM t -- " + "x" * (2 << 20) + "\n",
        "YAML_TOO_LARGE",
    ),
    ("nul-in-sql", b"/*---\nname: a\ninputs: [t]\n---*/\nSELECT '\x00' FROM t\n", "YAML_NOT_TEXT"),
]


def _flow_cases():
    for case_id, content, code, _path, _line in registry_flows.CASES:
        yield pytest.param(content, code.name, id=f"registry-{case_id}")
    for case_id, content, code in HOSTILE_FLOWS:
        yield pytest.param(content, code, id=f"hostile-{case_id}")


def _action_cases():
    for case_id, content, code, _path in registry_actions.CASES:
        yield pytest.param(content, code.name, id=f"registry-{case_id}")
    for case_id, content, code in HOSTILE_ACTIONS:
        yield pytest.param(content, code, id=f"hostile-{case_id}")


FLOW_CASES = list(_flow_cases())
ACTION_CASES = list(_action_cases())


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A project with the registry tests' actions and one other flow registered; returns (root, home)."""
    root = tmp_path_factory.mktemp("hostile")
    home = root / ".home"
    write_actions(root / "actions")
    (root / "flows").mkdir()
    (root / "other.yaml").write_text(OTHER_FLOW)
    here = Path.cwd()
    os.chdir(root)  # the project is the current folder: `flow register` registers its actions/ first
    try:
        assert cli(home, "action", "register", str(root / "actions"))[0] == 0
        assert cli(home, "flow", "register", str(root / "other.yaml"))[0] == 0
    finally:
        os.chdir(here)
    return root, home


def _registry_state(home: Path) -> tuple:
    code_a, actions, _ = cli(home, "action", "list", "--format", "json")
    code_f, flows, _ = cli(home, "flow", "list", "--format", "json")
    assert code_a == code_f == 0

    def strip(rows: list[dict]) -> list[tuple]:
        return sorted((r["name"], r["version"], r.get("versions"), r["content_hash"]) for r in rows)

    return strip(json.loads(actions)), strip(json.loads(flows))


def _write(folder: Path, name: str, content: str | bytes) -> Path:
    path = folder / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


def assert_refused(code: int, out: str, err: str, path: Path, error_code: str | None) -> None:
    """Exit 2, one located message per error, our error code, no traceback."""
    text = out + err
    assert code == 2, (code, text[:2000])
    assert "Traceback" not in text and "internal error" not in text, text[:2000]
    assert len(text) < 200_000, "an error message must not echo a huge input back"
    here = re.escape(path.name)
    located = re.search(here + r":\d+(:\d+)?: ", err) or re.search(here + r": .*\[TH20[45]\]", err)
    assert located, f"no file:line:col location in: {err[:2000]}"
    codes = set(re.findall(r"\[(TH\d{3})\]", err))
    assert codes, err[:2000]
    if error_code is not None:
        from runtime.core.errors import ErrorCode

        assert ErrorCode[error_code].value in codes, (error_code, err[:2000])


def test_the_tables_are_big_enough():
    assert len(FLOW_CASES) + len(ACTION_CASES) >= 60
    assert len(HOSTILE_FLOWS) + len(HOSTILE_ACTIONS) >= 40


def _each(cases, check) -> None:
    """Run ``check`` on every case and report every failing case together (one test, many cases: fast)."""
    failures = []
    for case in cases:
        content, error_code = case.values
        try:
            check(case.id, content, error_code)
        except AssertionError as exc:
            failures.append(f"{case.id}: {str(exc)[:600]}")
    assert not failures, f"{len(failures)} of {len(cases)} cases failed:\n" + "\n".join(failures)


@pytest.mark.reliability
def test_malformed_flows_through_cli(project, tmp_path, monkeypatch):
    """validate, register and trigger refuse each malformed flow; the registry is unchanged after each."""
    root, home = project
    monkeypatch.chdir(root)
    before = _registry_state(home)

    def check(case_id: str, content, error_code) -> None:
        path = _write(tmp_path, f"{case_id}.yaml", content)
        for command in ("validate", "register", "trigger"):
            assert_refused(*cli(home, "flow", command, str(path)), path, error_code)
        assert _registry_state(home) == before, "a refused flow changed the registry"

    _each(FLOW_CASES, check)
    assert not (root / "PWNED").exists() and not (tmp_path / "PWNED").exists()


@pytest.mark.reliability
def test_malformed_actions_through_cli(project, tmp_path, monkeypatch):
    """action register refuses each malformed action, alone and in a folder next to a good new one."""
    root, home = project
    monkeypatch.chdir(root)
    before = _registry_state(home)

    def check(case_id: str, content, error_code) -> None:
        folder = tmp_path / case_id
        folder.mkdir()
        # a good, new action next to the bad one: registration is all or nothing
        _write(folder, "fine.sql", "/*---\nname: fine_new_action\ninputs: [t]\n---*/\nSELECT * FROM t\n")
        path = _write(folder, "bad_action.sql", content)
        assert_refused(*cli(home, "action", "register", str(path)), path, error_code)
        assert_refused(*cli(home, "action", "register", str(folder)), path, error_code)
        assert _registry_state(home) == before, "a failed registration changed the registry"

    _each(ACTION_CASES, check)
    assert not (root / "PWNED").exists()


def _limit_memory() -> None:  # pragma: no cover - runs in the child
    resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))


@pytest.mark.reliability
@pytest.mark.parametrize("command", [["flow", "validate"], ["flow", "register"], ["action", "register"]])
def test_endless_file_is_refused_not_read(tmp_path, command):
    """``/dev/zero`` reports size 0 but never ends: the reader must stop at the size limit (real process)."""
    env = {**os.environ, "TIDEHOUSE_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [TIDEHOUSE, *command, "/dev/zero"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_limit_memory,
        check=False,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text[-2000:]
    assert "Traceback" not in text and "MemoryError" not in text, text[-2000:]
    assert "/dev/zero" in proc.stderr and re.search(r"\[TH2\d\d\]", proc.stderr), proc.stderr[-2000:]


@pytest.mark.reliability
def test_sql_in_a_name_through_a_real_process(tmp_path):
    """A real ``tidehouse`` process, as a user runs it: exit 2, one line, the registry untouched."""
    path = tmp_path / "evil.yaml"
    path.write_text('flow: "shop\'; DROP TABLE flow_versions; --"\n' + SRC + "layers:\n  " + ODS)
    env = {**os.environ, "TIDEHOUSE_HOME": str(tmp_path / "home")}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [TIDEHOUSE, *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    proc = run("flow", "register", str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert re.search(r"evil\.yaml:1:\d+: flow: .*\[TH215\]", proc.stderr), proc.stderr
    listing = run("flow", "list", "--format", "json")
    assert listing.returncode == 0 and json.loads(listing.stdout) == []
