"""Action files: the header format, the SQL body position, and a table of malformed actions."""

from __future__ import annotations

import pytest

from registry.specs import parse_action, parse_action_text
from registry.specs.loading import parameter_markers
from runtime.core.errors import ErrorCode as E
from runtime.core.errors import TidehouseError
from tests.registry._reg_helpers import ACTIONS, dedent, errors_of, marked_line


def test_parses_header_and_sql_position():
    text = "-- licence line\n\n" + dedent(ACTIONS["clean"]) + ";\n\n"
    spec = parse_action_text(text, "clean.sql")
    assert spec.name == "clean" and spec.inputs == ("events",)
    assert spec.params["min_price"].type == "double" and not spec.params["min_price"].required
    assert spec.params["valid_types"].default == ["click", "view"]
    assert spec.sql.startswith("SELECT * FROM events") and not spec.sql.endswith(";")
    assert text.splitlines()[spec.sql_line - 1].startswith("SELECT * FROM events")
    assert spec.output is None and spec.output_columns is None


def test_output_contract_forms_and_required_params():
    spec = parse_action_text(dedent(ACTIONS["count_by_key"]))
    assert spec.output_columns == ("user_id", "cnt")
    assert str(spec.output_types["cnt"]) == "bigint"
    assert spec.params["key"].required and spec.param_values({"key": "x"}) == {"key": "x"}
    listed = parse_action_text("/*---\nname: a\noutput: [a, b]\n---*/\nSELECT 1 AS a, 2 AS b\n")
    assert listed.output_columns == ("a", "b")


def test_sql_on_the_closing_line_and_defaults_of_null():
    spec = parse_action_text("/*---\nname: a\nparams: {p: {type: int, default: null}}\n---*/ SELECT :p\n")
    assert spec.sql == "SELECT :p" and spec.sql_line == 4
    assert not spec.params["p"].required and spec.param_values({}) == {"p": None}


def test_parameter_markers_skip_strings_comments_and_casts():
    sql = "SELECT a::int, ':no', \":no\" -- :no\n/* :no */ FROM t WHERE x = :yes AND y = IDENTIFIER(:col)"
    assert [(n, line) for n, line, _ in parameter_markers(sql)] == [("yes", 2), ("col", 2)]


def test_reads_files_with_location(tmp_path):
    path = tmp_path / "count.sql"
    path.write_text(dedent(ACTIONS["count_by_key"]))
    assert parse_action(path).path == str(path)


HEADER = "/*---\nname: a\ninputs: [t]\n"
CASES = [
    ("no-header", "SELECT 1 #<\n", E.ACTION_HEADER, None),
    ("header-not-closed", "/*--- #<\nname: a\nSELECT 1\n", E.ACTION_HEADER, None),
    ("empty-file", "\n\n", E.YAML_EMPTY, None),
    ("empty-header", "/*---\n---*/\nSELECT 1\n", E.ACTION_HEADER, None),
    ("no-sql", HEADER + "---*/\n\n", E.ACTION_HEADER, None),
    ("header-yaml-syntax", "/*---\nname: [a\n---*/\nSELECT 1\n", E.YAML_SYNTAX, None),
    ("header-duplicate-key", HEADER + "name: b #<\n---*/\nSELECT 1\n", E.YAML_DUPLICATE_KEY, "name"),
    ("missing-name", "/*---\ninputs: [t] #<\n---*/\nSELECT 1\n", E.SPEC_MISSING_KEY, "name"),
    ("bad-name", "/*---\nname: Clean-Clicks #<\n---*/\nSELECT 1\n", E.SPEC_BAD_IDENTIFIER, "name"),
    ("unknown-key", HEADER + "paramz: {} #<\n---*/\nSELECT 1\n", E.SPEC_UNKNOWN_KEY, "paramz"),
    ("reserved-sql-key", HEADER + "sql: SELECT 2 #<\n---*/\nSELECT 1\n", E.SPEC_UNKNOWN_KEY, "sql"),
    ("inputs-not-list", "/*---\nname: a\ninputs: t #<\n---*/\nSELECT 1\n", E.SPEC_WRONG_TYPE, "inputs"),
    (
        "duplicate-input",
        "/*---\nname: a\ninputs: [t, t] #<\n---*/\nSELECT 1\n",
        E.SPEC_BAD_VALUE,
        "inputs[1]",
    ),
    (
        "bad-param-type",
        HEADER + "params:\n  p: {type: strng} #<\n---*/\nSELECT :p\n",
        E.SPEC_BAD_VALUE,
        "params.p.type",
    ),
    (
        "param-type-missing",
        HEADER + "params:\n  p: {default: 1} #<\n---*/\nSELECT :p\n",
        E.SPEC_MISSING_KEY,
        "params.p.type",
    ),
    (
        "default-wrong-type",
        HEADER + "params:\n  p: {type: int, default: ten} #<\n---*/\nSELECT :p\n",
        E.PARAM_TYPE,
        "params.p.default",
    ),
    (
        "default-array-element",
        HEADER + "params:\n  p:\n    type: array<int>\n    default: [1, x] #<\n---*/\nSELECT :p\n",
        E.PARAM_TYPE,
        "params.p.default[1]",
    ),
    (
        "undeclared-marker",
        HEADER + "---*/\nSELECT *\nFROM t WHERE x = :limit #<\n",
        E.PARAM_UNKNOWN,
        "params",
    ),
    (  # a flow's value for it would change nothing: registered silently before
        "unused-param",
        HEADER + "params:\n  limit: {type: int, default: 10} #<\n  key: {type: string}\n---*/\n"
        "SELECT IDENTIFIER(:key) FROM t\n",
        E.PARAM_UNUSED,
        "params.limit",
    ),
    (  # a flow would have to bind it, and its table would run after that table for nothing
        "unused-input",
        "/*---\nname: a\ninputs:\n  - events\n  - users #<\n---*/\n"
        "SELECT * FROM events -- users\nWHERE kind <> 'users'\n",
        E.INPUT_UNUSED,
        "inputs[1]",
    ),
    (
        "output-bad-ddl",
        HEADER + "output: 'a string, b bigjnt' #<\n---*/\nSELECT 1\n",
        E.SPEC_BAD_VALUE,
        "output",
    ),
    ("output-system-column", HEADER + "output: [__offset] #<\n---*/\nSELECT 1\n", E.SPEC_BAD_VALUE, "output"),
    ("yaml11-boolean", HEADER + "description: off #<\n---*/\nSELECT 1\n", E.SPEC_WRONG_TYPE, "description"),
    ("binary", b"/*---\nname: a\x00\n---*/\nSELECT 1\n", E.YAML_NOT_TEXT, None),
]


EXPLICIT_LINES = {"empty-header": 1, "header-yaml-syntax": 2, "binary": 2}


@pytest.mark.parametrize("case_id,content,code,yaml_path", CASES, ids=[c[0] for c in CASES])
def test_malformed_action(tmp_path, case_id, content, code, yaml_path):
    path = tmp_path / f"{case_id}.sql"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(TidehouseError) as info:
        parse_action(path)
    errors = errors_of(info.value)
    found = [(e.code, e.location.path, e.location.line) for e in errors]
    matching = [e for e in errors if e.code is code and e.location.path == yaml_path]
    assert matching, f"expected {code.name} at {yaml_path!r}, got {found}"
    line = marked_line(content) if isinstance(content, str) else None
    line = EXPLICIT_LINES.get(case_id, line)
    if line is not None:
        assert matching[0].location.line == line, found
    assert matching[0].location.file == str(path)


def test_a_version_registered_before_the_unused_parameter_check_still_reads(tmp_path):
    """The check is on what is registered now: a stored version keeps its meaning (and its flows run)."""
    from registry.service import Registry, content_hash

    text = HEADER + "params:\n  limit: {type: int, default: 10}\n---*/\nSELECT * FROM t\n"
    with pytest.raises(TidehouseError) as info:
        parse_action_text(text, "a.sql")
    assert info.value.code is E.PARAM_UNUSED
    registry = Registry.open(f"sqlite:///{tmp_path / 'registry.db'}")
    registry.store.put("action", "a", content_hash(text), text, None)  # as an older Tidehouse stored it
    assert registry.get_action("a").spec.params["limit"].default == 10
    registry.close()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM events JOIN `users` USING (user_id)",  # a quoted name
        "SELECT * FROM EVENTS e, Users u WHERE e.user_id = u.user_id",  # names are case-insensitive
        "SELECT * FROM IDENTIFIER(:source)",  # a name from a parameter: any input may be read
    ],
)
def test_inputs_the_sql_names_are_used(sql):
    params = "params:\n  source: {type: string, default: events}\n" if ":source" in sql else ""
    spec = parse_action_text(f"/*---\nname: a\ninputs: [events, users]\n{params}---*/\n{sql}\n", "a.sql")
    assert spec.inputs == ("events", "users")
