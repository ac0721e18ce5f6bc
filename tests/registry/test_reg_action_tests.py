"""Action test files (``<action>.test.yaml``): what they parse into, and a table of malformed ones — each must
fail with its error code at its line (marked ``#<``), without Spark."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from registry.specs.fixtures import read_csv, text_value, yaml_value
from registry.specs.testfiles import load_action_tests, parse_action_test
from runtime.core.errors import ErrorCode as E
from runtime.core.errors import TidehouseError
from runtime.core.sparktypes import parse_type
from tests.registry._reg_helpers import dedent, errors_of, marked_line

UTC = dt.timezone.utc

PICK = """
    /*---
    name: pick
    description: Rows with at least `min`, labelled.
    inputs: [rows]
    params:
      min: {type: int, default: 0, description: The lowest n kept.}
      label: {type: string, description: The label of every row.}
    output: "id string, n int, label string"
    ---*/
    SELECT id, n, :label AS label FROM rows WHERE n >= :min
"""

GOOD = dedent(
    """
    action: pick
    inputs:
      rows: {schema: "id string, n int", primary_key: [id]}
    cases:
      keeps:
        params: {label: x}
        given:
          rows:
            - {id: a, n: 1}
        expect:
          - {id: a, n: 1, label: x}
    """
)


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "pick.sql").write_text(dedent(PICK))
    return tmp_path


def write(folder, text: str, name: str = "pick.test.yaml"):
    path = folder / name
    path.write_text(dedent(text))
    return path


# -- what a file parses into -------------------------------------------------------------------------------


def test_a_case_holds_typed_rows_split_into_runs(folder):
    path = write(
        folder,
        """
        inputs:
          rows: {schema: "id string, n int, at timestamp, price decimal(6,2)", primary_key: [id]}
        primary_key: [id]
        cases:
          split:
            description: five rows, two runs
            params: {label: x, min: 2}
            given:
              rows:
                - {id: a, n: 1, at: "2024-05-01 12:00:00", price: "1.50"}
                - {id: b, n: 2, at: "2024-05-01T12:00:00+02:00", price: 3}
                - {id: a, n: 5}
                - {id: c}
                - {id: a, n: 7}
            expect: [{id: a, n: 7, label: x}]
        """,
    )
    (case,) = parse_action_test(path)  # the action is named after the file
    assert (case.name, case.action.name, case.runs, case.primary_key) == ("split", "pick", 2, ("id",))
    assert case.params == {"label": "x", "min": 2} and case.description == "five rows, two runs"
    (inp,) = case.inputs
    assert [len(p) for p in inp.parts] == [3, 2]  # the longer part first
    first = inp.parts[0][0]
    assert first == {
        "id": "a",
        "n": 1,
        "at": dt.datetime(2024, 5, 1, 12, tzinfo=UTC),
        "price": Decimal("1.50"),
    }
    assert inp.parts[0][1]["at"] == dt.datetime(2024, 5, 1, 10, tzinfo=UTC)  # +02:00 read as UTC
    assert inp.parts[0][2] == {"id": "a", "n": 5, "at": None, "price": None}  # a column left out is NULL
    # a primary-key input holds its last row per key: after run 1, and after both runs
    assert sorted((r["id"], r["n"]) for r in inp.rows(1)) == [("a", 5), ("b", 2)]
    assert sorted((r["id"], r["n"]) for r in inp.rows()) == [("a", 7), ("b", 2), ("c", None)]
    assert case.expect.columns == ("id", "n", "label")
    assert case.id == f"{path}::split" and case.location.line == 5


def test_rows_per_run_csv_files_and_defaults(folder):
    (folder / "rows.csv").write_text('id,n\na,1\n"b, quoted",\n\nc,3\n')
    (folder / "out.csv").write_text("id,n,label\na,1,x\n")
    path = write(
        folder,
        """
        action: pick
        tolerance: 0.01
        inputs:
          rows: {schema: "id string, n int"}
        cases:
          from_csv:
            params: {label: x}
            given: {rows: {csv: rows.csv}}
            expect: {csv: out.csv}
            runs: 3
          per_run:
            params: {label: y}
            tolerance: 0.5
            given:
              rows:
                runs:
                  - [{id: a, n: 1}]
                  - []
                  - {csv: rows.csv}
            expect: []
        """,
        name="anything.test.yaml",
    )
    csv_case, runs_case = parse_action_test(path)
    assert [list(p) for p in csv_case.inputs[0].parts] == [
        [{"id": "a", "n": 1}],
        [{"id": "b, quoted", "n": None}],
        [{"id": "c", "n": 3}],
    ]
    assert csv_case.expect.columns == ("id", "n", "label") and csv_case.tolerance == 0.01
    assert csv_case.expect.rows[0].cells["n"].location.line == 2
    assert runs_case.runs == 3 and [len(p) for p in runs_case.inputs[0].parts] == [1, 0, 3]
    assert runs_case.tolerance == 0.5 and runs_case.expect.columns == ()


def test_paths_folders_and_one_case(folder):
    path = write(folder, GOOD)
    write(folder, GOOD.replace("keeps:", "other:"), name="more.test.yaml")
    assert [c.name for c in load_action_tests([folder])] == ["other", "keeps"]  # sorted by file name
    assert [c.name for c in load_action_tests([f"{path}::keeps"])] == ["keeps"]
    with pytest.raises(TidehouseError) as exc:
        load_action_tests([f"{path}::keep"])
    assert exc.value.code is E.SPEC_BAD_VALUE and "did you mean 'keeps'" in exc.value.render()
    empty = folder / "empty"
    empty.mkdir()
    with pytest.raises(TidehouseError) as exc:
        load_action_tests([empty])
    assert exc.value.code is E.SPEC_BAD_VALUE and "no action tests" in exc.value.message


def test_every_problem_of_every_file_is_reported_together(folder):
    write(folder, GOOD.replace("label: x}", "label: 1}"))
    write(folder, GOOD.replace("{id: a, n: 1}\n", "{id: a, n: one}\n", 1), name="two.test.yaml")
    with pytest.raises(TidehouseError) as exc:
        load_action_tests([folder])
    assert sorted((e.code, e.location.file.rsplit("/", 1)[-1]) for e in errors_of(exc.value)) == [
        (E.SPEC_WRONG_TYPE, "two.test.yaml"),
        (E.PARAM_TYPE, "pick.test.yaml"),
    ]


def test_expected_rows_are_typed_by_the_output():
    from registry.specs.actiontest import Expected
    from registry.specs.fixtures import Cell, RawRow
    from runtime.core.errors import Location
    from runtime.core.sparktypes import parse_columns

    where = Location("t.test.yaml", 9, 5, "cases.c.expect[0].n")
    row = RawRow({"n": Cell("2", where), "nn": Cell(1, where)}, where, {})
    expected = Expected(("n", "nn"), (row,), where)
    rows, errors = expected.typed(parse_columns("n bigint, m string"))
    assert rows == [{"n": None}]
    assert [(e.code, e.location.line) for e in errors] == [(E.SPEC_UNKNOWN_KEY, 9), (E.SPEC_WRONG_TYPE, 9)]
    assert "did you mean 'n'" in errors[0].render() and "expected an integer" in errors[1].message


# -- values --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, type_, expected",
    [
        ("12.5", "decimal(10,2)", Decimal("12.50")),
        (3, "decimal(4,1)", Decimal("3.0")),
        (1.25, "decimal(10,2)", Decimal("1.25")),
        (1, "double", 1.0),
        ("2024-05-01", "date", dt.date(2024, 5, 1)),
        ("2024-05-01T12:00:00Z", "timestamp", dt.datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01 12:00:00", "timestamp_ntz", dt.datetime(2024, 5, 1, 12)),
        ([None, "a"], "array<string>", [None, "a"]),
        ({"1": 2.5, 3: None}, "map<int,double>", [(1, 2.5), (3, None)]),
        ({"a": 1}, "struct<a: int, b: string>", {"a": 1, "b": None}),
        ("x", "binary", b"x"),
    ],
)
def test_yaml_values(value, type_, expected):
    assert yaml_value(value, parse_type(type_)) == (expected, [])


@pytest.mark.parametrize(
    "value, type_, problem",
    [
        ("1", "int", "expected an integer"),
        (2**40, "int", "out of range"),
        ("12.345", "decimal(10,2)", "more than 2 digits"),
        (12345, "decimal(4,1)", "does not fit"),
        ("noon", "timestamp", "expected a timestamp"),
        ("2024-05-01 12:00:00+01:00", "timestamp_ntz", "no time zone"),
        ({"a": 1, "c": 2}, "struct<a: int, b: string>", "unknown field 'c'"),
        ([1, "x"], "array<int>", "expected an integer"),
        (True, "string", "expected a string"),
    ],
)
def test_yaml_values_that_do_not_fit(value, type_, problem):
    converted, problems = yaml_value(value, parse_type(type_))
    assert converted is None or problems
    assert problem in problems[0][1]


@pytest.mark.parametrize(
    "text, type_, expected",
    [
        ("", "string", None),
        ("7", "bigint", 7),
        ("-1.5e3", "double", -1500.0),
        ("True", "boolean", True),
        ("9.90", "decimal(5,2)", Decimal("9.90")),
        ('["a", null]', "array<string>", ["a", None]),
        ('{"k": 1}', "map<string,int>", [("k", 1)]),
        ("2024-05-01 12:00:00", "timestamp", dt.datetime(2024, 5, 1, 12, tzinfo=UTC)),
    ],
)
def test_csv_fields(text, type_, expected):
    assert text_value(text, parse_type(type_)) == (expected, [])


def test_csv_field_positions(tmp_path):
    path = tmp_path / "f.csv"
    path.write_text('id,note,n\n\na,"x, y",3\n')
    header, rows = read_csv(path, "f.csv")
    assert header == ("id", "note", "n") and rows[0].cells["note"].value == "x, y"
    cell = rows[0].cells["n"]
    assert (cell.value, cell.location.line, cell.location.col, cell.text) == ("3", 3, 10, True)


# -- malformed files -----------------------------------------------------------------------------------------

CASES = [
    ("duplicate-key", GOOD + "cases: {} #<\n", E.YAML_DUPLICATE_KEY, "cases"),
    ("unknown-top-key", GOOD.replace("cases:", "casez: {} #<\ncases:"), E.SPEC_UNKNOWN_KEY, "casez"),
    ("no-cases", "action: pick\ncases: {} #<\n", E.SPEC_BAD_VALUE, "cases"),
    (
        "no-expect",
        GOOD.replace("    expect:\n      - {id: a, n: 1, label: x}\n", ""),
        E.SPEC_MISSING_KEY,
        None,
    ),
    ("unknown-action", GOOD.replace("action: pick", "action: pik #<"), E.ACTION_UNKNOWN, "action"),
    (
        "bad-schema",
        GOOD.replace(
            'rows: {schema: "id string, n int", primary_key: [id]}', 'rows: {schema: "id strin g"} #<'
        ),
        E.SPEC_BAD_VALUE,
        "inputs.rows.schema",
    ),
    (
        "key-not-in-schema",
        GOOD.replace("primary_key: [id]}", "primary_key: [idd]} #<"),
        E.PRIMARY_KEY_INVALID,
        "inputs.rows.primary_key[0]",
    ),
    (
        "extra-input",
        GOOD.replace("inputs:\n", "inputs:\n  other: {schema: 'a int'} #<\n"),
        E.INPUT_EXTRA,
        "inputs.other",
    ),
    (
        "missing-given",
        GOOD.replace("    given:\n      rows:\n        - {id: a, n: 1}\n", "    given: {rowz: []} #<\n"),
        E.INPUT_MISSING,
        None,
    ),
    ("extra-given", GOOD.replace("    given:\n", "    given:\n      rowz: [] #<\n"), E.INPUT_EXTRA, None),
    ("unknown-param", GOOD.replace("{label: x}", "{label: x, mni: 1} #<"), E.PARAM_UNKNOWN, None),
    ("param-type", GOOD.replace("{label: x}", "{label: x, min: '1'} #<"), E.PARAM_TYPE, None),
    ("param-missing", GOOD.replace("params: {label: x}", "params: {min: 1} #<"), E.PARAM_MISSING, None),
    ("row-value-type", GOOD.replace("- {id: a, n: 1}", "- {id: a, n: 1.5} #<"), E.SPEC_WRONG_TYPE, None),
    ("row-unknown-column", GOOD.replace("- {id: a, n: 1}", "- {id: a, nn: 1} #<"), E.SPEC_UNKNOWN_KEY, None),
    ("null-key", GOOD.replace("- {id: a, n: 1}", "- {n: 1} #<"), E.SPEC_BAD_VALUE, None),
    ("ambiguous-no", GOOD.replace("- {id: a, n: 1}", "- {id: no, n: 1} #<"), E.SPEC_WRONG_TYPE, None),
    (
        "rows-not-a-list",
        GOOD.replace("    given:\n", "    given:\n      rows: 3 #<\n").replace(
            "      rows:\n        - {id: a, n: 1}\n", ""
        ),
        E.SPEC_WRONG_TYPE,
        None,
    ),
    ("row-not-a-mapping", GOOD.replace("- {id: a, n: 1}", "- [a, 1] #<"), E.SPEC_WRONG_TYPE, None),
    (
        "expect-not-rows",
        GOOD.replace("    expect:\n", "    expect: yes-please #<\n").replace(
            "      - {id: a, n: 1, label: x}\n", ""
        ),
        E.SPEC_WRONG_TYPE,
        None,
    ),
    (
        "missing-csv",
        GOOD.replace("    expect:\n", "    expect: {csv: nope.csv} #<\n").replace(
            "      - {id: a, n: 1, label: x}\n", ""
        ),
        E.SPEC_BAD_VALUE,
        None,
    ),
    ("runs-zero", GOOD.replace("    given:\n", "    runs: 0 #<\n    given:\n"), E.SPEC_BAD_VALUE, None),
    (
        "more-parts-than-runs",
        GOOD.replace("    given:\n", "    runs: 1 #<\n    given:\n").replace(
            "      rows:\n        - {id: a, n: 1}\n", "      rows: {runs: [[], []]}\n"
        ),
        E.SPEC_BAD_VALUE,
        None,
    ),
    (
        "key-not-in-contract",
        GOOD.replace("cases:", "primary_key: [nope] #<\ncases:"),
        E.PRIMARY_KEY_INVALID,
        None,
    ),
    ("tolerance-text", GOOD.replace("cases:", "tolerance: '0.1' #<\ncases:"), E.SPEC_WRONG_TYPE, "tolerance"),
]


@pytest.mark.parametrize("name, text, code, path", CASES, ids=[c[0] for c in CASES])
def test_malformed_test_files(folder, name, text, code, path):
    file = write(folder, text)
    with pytest.raises(TidehouseError) as exc:
        load_action_tests([file])
    errors = errors_of(exc.value)
    assert errors[0].code is code, [e.render() for e in errors]
    assert errors[0].location.file == str(file)
    line = marked_line(dedent(text))
    if line is not None:
        assert errors[0].location.line == line, errors[0].render()
    if path is not None:
        assert errors[0].location.path == path


def test_a_bad_csv_value_is_located_in_the_csv_file(folder):
    (folder / "rows.csv").write_text("id,n\na,1\nb,two\n")
    write(folder, GOOD.replace("      rows:\n        - {id: a, n: 1}\n", "      rows: {csv: rows.csv}\n"))
    with pytest.raises(TidehouseError) as exc:
        load_action_tests([folder])
    error = errors_of(exc.value)[0]
    assert (error.code, error.location.file, error.location.line, error.location.col) == (
        E.SPEC_WRONG_TYPE,
        str(folder / "rows.csv"),
        3,
        3,
    )
    assert "column n" in error.message and "'two'" in error.message
