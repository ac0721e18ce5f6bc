"""Spark's parser and analyzer check specs before anything is registered or run (``--quick`` skips them).

``action register`` refuses an action whose SQL Spark does not parse (or parses as a command) at the line
and column Spark points to; ``flow validate`` and ``flow register`` refuse a flow whose tables do not
analyse (e.g. a primary key the SQL does not output) at the field in the flow file. The registry's own
checks run first: a malformed spec never starts Spark.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from materializer.checks import EngineChecks
from registry.specs import parse_action, parse_action_text
from tests.registry._reg_helpers import ACTIONS, BASE_FLOW, OTHER_FLOW, dedent, write_actions

REPO = Path(__file__).resolve().parents[2]
HEADER = "/*---\nname: broken\ninputs: [events]\n---*/\n"
SYNTAX_ERROR = (
    HEADER + "SELECT user_id, price\nFROM events\nWHERE price > > 1\n"
)  # Spark: at the 2nd '>' (7:15)

pytestmark = pytest.mark.spark


def _registered(run_cli, kind: str) -> list[str]:
    code, out, err = run_cli(kind, "list", "--format", "json")
    assert code == 0, err
    return [f"{row['name']}@{row['version']}" for row in json.loads(out)]


def _refused(code: int, err: str, prefix: str, error_code: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [line.removeprefix("error: ") for line in err.splitlines()]  # one error alone reads "error: ..."
    assert any(line.startswith(prefix) and line.endswith(f"[{error_code}]") for line in lines), err


# -- actions ----------------------------------------------------------------------------------------------


def test_action_whose_sql_does_not_parse_is_refused_where_spark_points(spark, run_cli, project_dir):
    write_actions(project_dir / "actions")
    (project_dir / "actions" / "broken.sql").write_text(SYNTAX_ERROR)
    code, _, err = run_cli("action", "register", "actions")
    _refused(code, err, "actions/broken.sql:7:15: action broken: the SQL does not parse: ", "TH223")
    assert _registered(run_cli, "action") == [], "a refused folder registered nothing"
    code, _, err = run_cli("action", "register", "actions/broken.sql", "--format", "json")
    _refused(code, err, "actions/broken.sql:7:15: ", "TH223")
    # --quick is the explicit opt-out: the header is checked, the SQL is not
    code, out, err = run_cli("action", "register", "--quick", "actions/broken.sql")
    assert (code, out.strip()) == (0, "broken@1"), err


@pytest.mark.parametrize(
    "sql,line,col",
    [
        ("CREATE TABLE pwned_by_register AS SELECT * FROM events", 5, 1),  # a command: not a subquery
        ("SELECT * FROM events; DROP TABLE pwned_by_register", 5, 23),  # a second statement
        (
            "SELECT * FROM events\nWHERE price > ?",
            6,
            15,
        ),  # a positional marker: no declared parameter binds it
    ],
)
def test_action_sql_that_is_not_one_query_is_refused_and_never_run(
    spark, run_cli, project_dir, sql, line, col
):
    (project_dir / "actions" / "broken.sql").write_text(HEADER + sql + "\n")
    code, _, err = run_cli("action", "register", "actions/broken.sql")
    _refused(code, err, f"actions/broken.sql:{line}:{col}: action broken: ", "TH223")
    assert not spark.catalog.tableExists("pwned_by_register"), "the check ran the SQL"
    assert _registered(run_cli, "action") == []


def test_action_register_refuses_a_folder_without_actions(run_cli, project_dir):
    (project_dir / "notes").mkdir()
    (project_dir / "notes" / "readme.txt").write_text("not an action")
    code, out, err = run_cli("action", "register", "notes")  # refused before Spark would start
    _refused(code, err, "notes: the folder holds no action files (*.sql)", "TH213")
    assert out == ""


def test_every_shipped_and_test_action_parses(spark):
    checks = EngineChecks(project=None, spark=spark)
    shipped = [parse_action(path) for path in sorted((REPO / "actions").glob("*.sql"))]
    local = [parse_action_text(dedent(text), f"{name}.sql") for name, text in ACTIONS.items()]
    assert len(shipped) >= 10
    assert checks.check_actions(shipped + local) == []


# -- flows ------------------------------------------------------------------------------------------------

# a dws table over `clean` (no output contract: only Spark knows its columns) with one bad column
FIELDS = {
    "primary_key": (
        "{action: clean, inputs: {events: dwd.clean}, primary_key: [user_id, nope]}",
        "primary_key[1]",
        "nope",
    ),
    "bucket_key": (
        "{action: clean, inputs: {events: dwd.clean}, buckets: 2, bucket_key: [nope]}",
        "bucket_key[0]",
        "nope",
    ),
    "aggregations": (
        (
            "{action: clean, inputs: {events: dwd.clean}, primary_key: [user_id], "
            "merge_engine: aggregate, aggregations: {nope: sum}}"
        ),
        "aggregations.nope",
        "sum",
    ),
}


def _flow_with(project_dir: Path, table: str) -> tuple[str, int]:
    """flows/shop.yaml with ``dws.t: <table>``; returns its text and the line of ``t``."""
    text = BASE_FLOW + f"    t: {table}\n"
    (project_dir / "flows" / "shop.yaml").write_text(text)
    return text, len(text.splitlines())


@pytest.mark.parametrize("field", list(FIELDS))
def test_key_column_the_sql_does_not_output_is_refused_at_its_field(spark, run_cli, project_dir, field):
    write_actions(project_dir / "actions")
    table, path, token = FIELDS[field]
    text, line = _flow_with(project_dir, table)
    col = text.splitlines()[line - 1].index(token) + 1
    where = (
        f"flows/shop.yaml:{line}:{col}: layers.dws.t.{path}: table dws.t: {field} column 'nope' "
        "is not an output"
    )
    code, out, err = run_cli("flow", "validate", "flows/shop.yaml")
    _refused(code, err, where, "TH243")
    assert out == ""
    code, out, _ = run_cli("flow", "validate", "flows/shop.yaml", "--format", "json")
    (error,) = json.loads(out)["errors"]
    assert (code, error["code"], error["line"], error["col"], error["path"]) == (
        2,
        "TH243",
        line,
        col,
        f"layers.dws.t.{path}",
    )
    # register: refused the same way, nothing registered
    run_cli("action", "register", "actions")
    code, _, err = run_cli("flow", "register", "flows/shop.yaml")
    _refused(code, err, where, "TH243")
    assert _registered(run_cli, "flow") == []
    # --quick skips the analysis; validating the registered flow by name runs it
    assert run_cli("flow", "validate", "--quick", "flows/shop.yaml")[0] == 0
    assert run_cli("flow", "register", "--quick", "flows/shop.yaml")[0] == 0
    code, _, err = run_cli("flow", "validate", "shop")
    _refused(code, err, f"{project_dir / 'flows' / 'shop.yaml'}:{line}:{col}: layers.dws.t.{path}: ", "TH243")


def test_an_expectation_that_does_not_analyse_is_refused_at_its_condition(spark, run_cli, project_dir):
    """At the condition, in the table's own ``expect`` or in the flow's ``defaults`` (the error named the
    table's line, and for a default rule the first table's)."""
    write_actions(project_dir / "actions")
    own = "{action: clean, inputs: {events: dwd.clean}, expect: [{name: a, condition: 'price > 0'}, " + (
        "{name: b, condition: 'prize > 0'}]}"
    )
    text, line = _flow_with(project_dir, own)
    col = text.splitlines()[line - 1].index("'prize") + 1
    code, _, err = run_cli("flow", "validate", "flows/shop.yaml")
    _refused(
        code, err, f"flows/shop.yaml:{line}:{col}: layers.dws.t.expect[1].condition: table dws.t: ", "TH213"
    )
    assert "expectation 'b' is not a valid condition over the output columns: [UNRESOLVED_COLUMN" in err
    defaults = (
        "defaults:\n  expect:\n    - {name: c, condition: 'true'}\n    - {name: d, condition: 'nope'}\n"
    )
    text = text.replace("layers:\n", defaults + "layers:\n").replace("'prize", "'price")
    (project_dir / "flows" / "shop.yaml").write_text(text)
    line = text.splitlines().index("    - {name: d, condition: 'nope'}") + 1
    col = text.splitlines()[line - 1].index("'nope") + 1
    code, _, err = run_cli("flow", "validate", "flows/shop.yaml")
    _refused(
        code, err, f"flows/shop.yaml:{line}:{col}: defaults.expect[1].condition: table ods.clicks: ", "TH213"
    )


def test_valid_flow_passes_the_engine_checks(spark, run_cli, project_dir):
    write_actions(project_dir / "actions")
    _flow_with(project_dir, FIELDS["primary_key"][0].replace(", nope", ""))
    code, out, err = run_cli("flow", "validate", "flows/shop.yaml")
    assert (code, out.strip()) == (0, "ok"), err
    run_cli("action", "register", "actions")
    code, out, err = run_cli("flow", "register", "flows/shop.yaml")
    assert code == 0 and out.startswith("shop@1"), err
    assert run_cli("flow", "validate", "shop")[0] == 0


def test_flow_validate_reports_an_unparsable_local_action_at_its_file(spark, run_cli, project_dir):
    write_actions(project_dir / "actions")
    (project_dir / "actions" / "broken.sql").write_text(SYNTAX_ERROR)
    _flow_with(project_dir, "{action: broken, inputs: {events: dwd.clean}}")
    code, _, err = run_cli("flow", "validate", "flows/shop.yaml")
    _refused(
        code,
        err,
        f"{project_dir / 'actions' / 'broken.sql'}:7:15: action broken: the SQL does not parse: ",
        "TH223",
    )  # the project's actions/ folder is found by its absolute path


def test_a_flow_reading_a_flow_that_has_not_run_is_analysed_against_its_producer(spark, run_cli, project_dir):
    write_actions(project_dir / "actions")
    (project_dir / "flows" / "other.yaml").write_text(OTHER_FLOW)
    assert run_cli("action", "register", "actions")[0] == 0
    assert run_cli("flow", "register", "flows/other.yaml")[0] == 0  # registered, never run: no hot table
    text = (
        BASE_FLOW
        + "  ads:\n    shared_view: {action: clean, inputs: {events: dwd.shared}, primary_key: [%s]}\n"
    )
    (project_dir / "flows" / "shop.yaml").write_text(text % "user_id")
    code, out, err = run_cli("flow", "validate", "flows/shop.yaml")
    assert (code, out.strip()) == (0, "ok"), err
    (project_dir / "flows" / "shop.yaml").write_text(text % "order_id")  # not a column of dwd.shared
    code, _, err = run_cli("flow", "validate", "flows/shop.yaml")
    _refused(code, err, "flows/shop.yaml:13:", "TH243")
    assert (
        "layers.ads.shared_view.primary_key[0]: table ads.shared_view: primary_key column 'order_id'" in err
    )


def test_flows_validated_together_are_analysed_against_each_others_plans(spark, run_cli, project_dir):
    """A flow file reading a table of another flow file validated with it (`flow validate flows/`, neither
    registered nor run) is analysed against that file's plan, with the project's unregistered actions."""
    write_actions(project_dir / "actions")
    (project_dir / "flows" / "other.yaml").write_text(OTHER_FLOW)
    text = (
        BASE_FLOW
        + "  ads:\n    shared_view: {action: clean, inputs: {events: dwd.shared}, primary_key: [%s]}\n"
    )
    (project_dir / "flows" / "shop.yaml").write_text(text % "user_id")
    code, out, err = run_cli("flow", "validate", "flows/")
    assert (code, out.splitlines()) == (0, ["flows/other.yaml: ok", "flows/shop.yaml: ok"]), err
    (project_dir / "flows" / "shop.yaml").write_text(text % "order_id")  # not a column of dwd.shared
    code, out, err = run_cli("flow", "validate", "flows/other.yaml", "flows/shop.yaml")
    assert out.splitlines() == ["flows/other.yaml: ok", "flows/shop.yaml: 1 error"], err
    _refused(code, err, "flows/shop.yaml:13:", "TH243")
    assert run_cli("flow", "list", "--format", "json")[1].strip() == "[]"  # nothing was registered


def test_flows_reading_each_others_tables_before_either_ran_are_refused(spark, run_cli, project_dir):
    """Two flow files that read each other's tables (the tables acyclic, the flows not), neither run: a
    flow starts only once the tables it reads from other flows exist, so neither can start; each file is
    refused at its read of the other's table, naming both reads."""
    write_actions(project_dir / "actions")
    other = OTHER_FLOW + "  dws:\n    back: {action: clean, inputs: {events: dwd.clean}}\n"
    (project_dir / "flows" / "other.yaml").write_text(other)
    shop = BASE_FLOW + "  ads:\n    shared_view: {action: clean, inputs: {events: dwd.shared}}\n"
    (project_dir / "flows" / "shop.yaml").write_text(shop)
    code, out, err = run_cli("flow", "validate", "flows/")
    assert out.splitlines() == ["flows/other.yaml: 1 error", "flows/shop.yaml: 1 error"], err
    message = "flows read each other's tables and none of them has run: "
    _refused(code, err, "flows/other.yaml:11:", "TH241")
    reads = "other reads dwd.clean from shop, shop reads dwd.shared from other"
    assert f"other.yaml:11:44: layers.dws.back.inputs.events: {message}{reads}" in err
    _refused(code, err, "flows/shop.yaml:13:", "TH241")
    reads = "shop reads dwd.shared from other, other reads dwd.clean from shop"
    assert f"shop.yaml:13:51: layers.ads.shared_view.inputs.events: {message}{reads}" in err
    (project_dir / "flows" / "other.yaml").write_text(OTHER_FLOW)  # the reads go one way: both validate
    code, out, err = run_cli("flow", "validate", "flows/")
    assert (code, out.splitlines()) == (0, ["flows/other.yaml: ok", "flows/shop.yaml: ok"]), err


def test_malformed_specs_are_refused_without_the_engine(run_cli, project_dir, monkeypatch):
    """The registry's checks come first: their errors are reported and the Spark checks never run."""

    def engine_called(*_args, **_kwargs):
        raise AssertionError("the engine checks ran on a spec the registry refuses")

    monkeypatch.setattr(EngineChecks, "check_actions", engine_called)
    monkeypatch.setattr(EngineChecks, "check_flow", engine_called)
    write_actions(project_dir / "actions")
    (project_dir / "actions" / "bad.sql").write_text("/*---\nname: Bad\n---*/\nSELECT 1\n")
    code, _, err = run_cli("action", "register", "actions")
    _refused(code, err, "actions/bad.sql:2:7: name: ", "TH215")
    (project_dir / "actions" / "bad.sql").unlink()
    (project_dir / "flows" / "shop.yaml").write_text(BASE_FLOW.replace("action: clean,", "action: clen,"))
    for command in ("validate", "register"):
        code, _, err = run_cli("flow", command, "flows/shop.yaml")
        _refused(code, err, "flows/shop.yaml:9:21: layers.dwd.clean.action: unknown action 'clen'", "TH221")


def test_flow_plan_never_runs_an_action_registered_without_checks(spark, run_cli, project_dir):
    """``--quick`` registers a command as an action; planning a flow that uses it refuses it and runs nothing
    (``spark.sql`` would execute a command at once)."""
    (project_dir / "actions" / "broken.sql").write_text(
        HEADER + "CREATE TABLE pwned_by_plan AS SELECT * FROM events\n"
    )
    code, _, err = run_cli("action", "register", "--quick", "actions/broken.sql")
    assert code == 0, err
    flow = project_dir / "flows" / "f.yaml"
    flow.write_text(
        "flow: f\nsources:\n  raw: {format: rate}\nlayers:\n  ods:\n"
        "    t: {action: broken@1, inputs: {events: raw}}\n"
    )
    code, _, err = run_cli("flow", "plan", str(flow))
    assert code == 2 and err.rstrip().endswith("[TH223]"), err
    assert "actions/broken.sql:5:1: action broken: the SQL is not a query" in err  # the stored absolute path
    assert not spark.catalog.tableExists("pwned_by_plan"), "planning ran the action's SQL"
