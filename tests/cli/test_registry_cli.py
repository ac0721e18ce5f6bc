"""The authoring CLI: `action register|list|show`, `flow register|list|show|validate`, exit codes, JSON."""

from __future__ import annotations

import json

import pytest

from tests.registry._reg_helpers import ACTIONS, BASE_FLOW, OTHER_FLOW, dedent, write_actions


def setup_project(project_dir):
    write_actions(project_dir / "actions")
    (project_dir / "flows" / "shop.yaml").write_text(BASE_FLOW)


@pytest.mark.spark  # action register parses the SQL with Spark (the shared session)
def test_action_register_list_show(spark, run_cli, project_dir):
    setup_project(project_dir)
    code, out, err = run_cli("action", "register", "actions")
    assert code == 0, err
    assert out.splitlines() == ["clean@1", "count_by_key@1", "ingest@1", "join2@1", "typed@1"]
    code, out, _ = run_cli("action", "register", "actions/clean.sql")
    assert (code, out.strip()) == (0, "clean@1 (unchanged)")
    (project_dir / "actions" / "clean.sql").write_text(dedent(ACTIONS["clean"]).replace(">=", ">"))
    assert run_cli("action", "register", "actions/clean.sql")[1].strip() == "clean@2"

    code, out, _ = run_cli("action", "list")
    assert code == 0 and "clean" in out and "Pass records through." in out
    code, out, _ = run_cli("action", "list", "--format", "json")
    listed = {a["name"]: a for a in json.loads(out)}
    assert (listed["clean"]["version"], listed["clean"]["versions"]) == (2, 2)

    code, out, _ = run_cli("action", "show", "clean@1")
    assert code == 0 and "clean@1" in out and "price >= :min_price" in out and "versions: 1, 2" in out
    code, out, _ = run_cli("action", "show", "count_by_key", "--format", "json")
    shown = json.loads(out)
    assert shown["params"]["key"]["required"] is True and shown["sql"].startswith("SELECT IDENTIFIER")


def test_action_errors_exit_2_without_traceback(run_cli, project_dir):
    (project_dir / "actions" / "bad.sql").write_text("/*---\nname: Bad\n---*/\nSELECT 1\n")
    code, _, err = run_cli("action", "register", "actions")
    assert code == 2 and "bad.sql:2:7: name:" in err and "[TH215]" in err and "Traceback" not in err
    code, _, err = run_cli("action", "show", "nothing")
    assert code == 2 and "[TH221]" in err
    for what, ref in (("an action", "clean@0"), ("a flow", "shop@x")):
        code, _, err = run_cli(what.split()[1], "show", ref)
        assert code == 2 and err.startswith(
            f"error: '{ref}' is not {what} reference: write 'name' or 'name@N'"
        )
    code, _, err = run_cli("action", "register", "no/such/file.sql")
    assert code == 2 and "no such file" in err
    for command in (("action", "register"), ("test",)):
        code, _, err = run_cli(*command, "/dev/null")
        assert (code, err) == (2, "error: /dev/null: not a file or folder [TH213]\n"), command
    code, _, err = run_cli("--debug", "action", "show", "nothing")
    assert code == 2 and "Traceback" in err


@pytest.mark.spark  # flow validate / register analyse every table with Spark
def test_flow_validate_register_show(spark, run_cli, project_dir):
    setup_project(project_dir)
    # validate uses the project's actions/ even before they are registered
    code, out, err = run_cli("flow", "validate", "flows/shop.yaml")
    assert (code, out.strip()) == (0, "ok"), err
    run_cli("action", "register", "actions")
    code, out, err = run_cli("flow", "register", "flows/shop.yaml")
    assert code == 0, err
    assert out.splitlines()[0] == "shop@1" and "  dwd.clean: clean@1" in out
    assert run_cli("flow", "register", "flows/shop.yaml")[1].splitlines()[0] == "shop@1 (unchanged)"
    # an action file edited since: the flow pins the file as it is now, the one `flow validate` checked
    # (it pinned clean@1, the version registered before the edit, while `flow trigger PATH` ran clean@2)
    (project_dir / "actions" / "clean.sql").write_text(dedent(ACTIONS["clean"]).replace(">=", ">"))
    code, out, err = run_cli("flow", "register", "flows/shop.yaml")
    assert code == 0 and out.splitlines()[0] == "shop@2" and "  dwd.clean: clean@2" in out, out + err

    code, out, _ = run_cli("flow", "list")
    assert code == 0 and "shop" in out
    code, out, _ = run_cli("flow", "show", "shop")
    assert code == 0 and "count_by_key@1" in out and "pk(user_id)" in out
    code, out, _ = run_cli("flow", "show", "shop@1", "--format", "json")
    shown = json.loads(out)
    assert shown["pins"]["dws.counts"] == "count_by_key@1" and shown["source_text"] == BASE_FLOW
    code, out, _ = run_cli("flow", "validate", "shop", "--format", "json")
    assert code == 0 and json.loads(out)["ok"] is True
    code, _, err = run_cli("flow", "show", "shop@5")
    assert code == 2 and "[TH251]" in err


def test_flow_validate_reports_every_error_one_per_line(run_cli, project_dir):
    setup_project(project_dir)
    bad = BASE_FLOW.replace("action: clean,", "action: clen,").replace("{key: user_id}", "{kye: user_id}")
    (project_dir / "flows" / "bad.yaml").write_text(bad)
    code, out, err = run_cli("flow", "validate", "flows/bad.yaml")
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 3, err
    assert all(line.startswith("flows/bad.yaml:") and line.endswith("]") for line in lines)
    assert (
        "flows/bad.yaml:9:21: layers.dwd.clean.action: unknown action 'clen' (did you mean 'clean'?) [TH221]"
        in lines
    )
    code, out, _ = run_cli("flow", "validate", "flows/bad.yaml", "--format", "json")
    report = json.loads(out)
    assert code == 2 and report["ok"] is False
    assert {e["code"] for e in report["errors"]} == {"TH221", "TH233", "TH234"}
    assert all(e["line"] and e["path"] for e in report["errors"])


def test_flow_validate_unknown_name_and_register_errors(run_cli, project_dir):
    code, _, err = run_cli("flow", "validate", "nope")
    assert code == 2 and "[TH250]" in err
    (project_dir / "flows" / "empty.yaml").write_text("")
    code, _, err = run_cli("flow", "register", "flows/empty.yaml")
    assert code == 2 and "flows/empty.yaml:1: the document is empty [TH202]" in err
    code, _, err = run_cli("flow", "validate", "flows/missing.yaml")
    assert code == 2 and "no flow file flows/missing.yaml" in err and "[TH250]" in err  # as flow plan says


def test_flow_validate_takes_several_flows_and_fails_if_one_does(run_cli, project_dir):
    """`tidehouse flow validate flows/*.yaml` said "Got unexpected extra arguments"."""
    setup_project(project_dir)
    bad = BASE_FLOW.replace("action: clean,", "action: clen,")
    (project_dir / "flows" / "bad.yaml").write_text(bad)
    code, out, err = run_cli("flow", "validate", "--quick", "flows/bad.yaml", "flows/shop.yaml")
    assert code == 2, err
    assert out.splitlines() == ["flows/bad.yaml: 1 error", "flows/shop.yaml: ok"]
    assert err.startswith("flows/bad.yaml:9:21: layers.dwd.clean.action: unknown action 'clen'"), err
    code, out, _ = run_cli(
        "flow", "validate", "--quick", "flows/shop.yaml", "flows/bad.yaml", "--format", "json"
    )
    report = json.loads(out)
    assert code == 2 and report["ok"] is False
    assert [(f["target"], f["ok"]) for f in report["flows"]] == [
        ("flows/shop.yaml", True),
        ("flows/bad.yaml", False),
    ]
    assert report["flows"][1]["errors"][0]["code"] == "TH221"
    code, out, err = run_cli("flow", "validate", "--quick", "flows/shop.yaml", "flows/shop.yaml")
    assert (code, out) == (0, "flows/shop.yaml: ok\nflows/shop.yaml: ok\n"), err
    code, _, err = run_cli("flow", "validate")
    assert code == 2 and "Missing argument 'TARGET...'" in err
    # a folder: its flow files, each a line (before, "no flow file flows/" of a folder that exists)
    (project_dir / "flows" / "more").mkdir()
    (project_dir / "flows" / "more" / "again.yml").write_text(BASE_FLOW)
    code, out, err = run_cli("flow", "validate", "--quick", "flows")
    assert code == 2 and out.splitlines() == [
        "flows/bad.yaml: 1 error",
        "flows/more/again.yml: ok",
        "flows/shop.yaml: ok",
    ], err
    (project_dir / "empty").mkdir()
    code, _, err = run_cli("flow", "validate", "--quick", "empty")
    assert code == 2 and err == (
        "error: no flow file in the folder empty (flow files end in .yaml or .yml) [TH250]\n"
    )
    code, _, err = run_cli("flow", "plan", "flows/")
    assert code == 2 and err.startswith(
        "error: flows/ is a folder, not a flow file (name one of its flow files: flows/bad.yaml, "
        "flows/more/again.yml, flows/shop.yaml)"
    ), err


READER = BASE_FLOW + "  ads:\n    shared_view: {action: clean, inputs: {events: dwd.shared}}\n"


def test_flow_files_validated_together_may_read_each_others_tables(run_cli, project_dir):
    """`tidehouse flow validate flows/` of the scaffold failed on shop_trends.yaml: it reads
    ecommerce_activity's dwd.events, and only registered flows counted; files validated with it now count."""
    setup_project(project_dir)
    (project_dir / "flows" / "shop.yaml").write_text(READER)
    (project_dir / "flows" / "other.yaml").write_text(OTHER_FLOW)
    code, _, err = run_cli("flow", "validate", "--quick", "flows/shop.yaml")
    assert code == 2 and "flows/shop.yaml:13:51: layers.ads.shared_view.inputs.events: unknown table " in err
    # (not "did you mean 'ads.shared_view'?", itself: a typo is read as a table it may read)
    assert "(neither this flow nor a registered one or one validated with it produces it) [TH232]" in err
    for targets in (
        ["flows/shop.yaml", "flows/other.yaml"],
        ["flows/other.yaml", "flows/shop.yaml"],
        ["flows"],
    ):
        code, out, err = run_cli("flow", "validate", "--quick", *targets)
        assert code == 0 and sorted(out.splitlines()) == ["flows/other.yaml: ok", "flows/shop.yaml: ok"], err
    # a file validated with it is a flow like a registered one: the same table from both is refused
    (project_dir / "flows" / "other.yaml").write_text(
        OTHER_FLOW + "  dws:\n    counts: {action: clean, inputs: {events: dwd.shared}}\n"
    )
    code, out, err = run_cli("flow", "validate", "--quick", "flows")
    assert code == 2 and out.splitlines() == ["flows/other.yaml: 1 error", "flows/shop.yaml: 1 error"], err
    assert "table 'dws.counts' is also produced by flow 'shop' (flows/shop.yaml:" in err, err
    # one that does not parse is reported on its own line; the flow reading it, as before
    (project_dir / "flows" / "other.yaml").write_text("flow: other\nlayers: [\n")
    code, out, err = run_cli("flow", "validate", "--quick", "flows")
    assert code == 2 and out.splitlines() == ["flows/other.yaml: 1 error", "flows/shop.yaml: 1 error"], err
    assert "unknown table 'dwd.shared'" in err, err


def test_a_trigger_by_name_notes_each_action_file_edited_since_its_pin(run_cli, project_dir, monkeypatch):
    """`flow trigger NAME` runs the pinned versions: an action file edited since was left out silently."""
    from runtime.core.errors import ErrorCode, TidehouseError
    from runtime.project import Project

    def trigger(self, *_args, **_kwargs):  # the note comes before the run: no Spark here
        raise TidehouseError(ErrorCode.CONFIG_INVALID, "stopped by the test")

    monkeypatch.setattr(Project, "trigger", trigger)
    setup_project(project_dir)
    assert run_cli("flow", "register", "flows/shop.yaml", "--quick")[0] == 0
    code, _, err = run_cli("flow", "trigger", "shop")
    assert code == 2 and "note:" not in err and "stopped by the test" in err, err
    (project_dir / "actions" / "clean.sql").write_text(dedent(ACTIONS["clean"]).replace(">=", ">"))
    code, _, err = run_cli("flow", "trigger", "shop")
    assert code == 2 and err.splitlines()[0] == (
        "note: actions/clean.sql is not clean@1, the version this flow pins for dwd.clean: the run uses "
        "clean@1 (`flow register` or `flow trigger` of the flow file pins the file)"
    ), err
    code, _, err = run_cli("flow", "trigger", "flows/shop.yaml")  # a file registers its actions first
    assert code == 2 and "note:" not in err, err


def test_a_trigger_by_name_notes_an_edited_flow_file(run_cli, project_dir, monkeypatch):
    """`flow trigger NAME` runs the registered text: an edit of the flow file (one a refused trigger of the
    file left unregistered, say) was left out silently; NAME@N is the author's choice, a file registers."""
    from runtime.core.errors import ErrorCode, TidehouseError
    from runtime.project import Project

    def trigger(self, *_args, **_kwargs):  # the note comes before the run: no Spark here
        raise TidehouseError(ErrorCode.CONFIG_INVALID, "stopped by the test")

    monkeypatch.setattr(Project, "trigger", trigger)
    setup_project(project_dir)
    flow = (project_dir / "flows" / "shop.yaml").resolve()
    assert run_cli("flow", "register", "flows/shop.yaml", "--quick")[0] == 0
    flow.write_text(flow.read_text().replace("\n", "\r\n"))  # line endings are no edit
    assert "note:" not in run_cli("flow", "trigger", "shop")[2]
    flow.write_text(flow.read_text().replace("params: {key: user_id}", "params: {key: event_type}"))
    code, _, err = run_cli("flow", "trigger", "shop")
    assert code == 2 and err.splitlines()[0] == (
        f"note: {flow} has changed since shop was registered from it: the run uses the registered version "
        f"(`flow trigger {flow}` registers the file and runs it)"
    ), err
    for ref in ("shop@1", "flows/shop.yaml"):
        code, _, err = run_cli("flow", "trigger", ref)
        assert code == 2 and "note:" not in err, (ref, err)


@pytest.mark.spark
def test_plan_and_trigger_of_a_file_store_nothing_spark_refuses(spark, run_cli, project_dir):
    """`flow plan PATH` and `flow trigger PATH` registered the project's actions without Spark's parser, and
    the trigger the flow too, before planning refused them: an action version whose SQL does not parse and a
    flow version pinning it stayed in the registry (`flow trigger shop` ran them). Now Spark parses each
    action before it is stored, and a flow is stored once every table analyses."""
    setup_project(project_dir)
    (project_dir / "data" / "clicks").mkdir(parents=True)
    clean = project_dir / "actions" / "clean.sql"
    clean.write_text(dedent(ACTIONS["clean"]).replace(":min_price AND", ":min_price AND AND"))
    trigger = ("flow", "trigger", "flows/shop.yaml", "--until-idle")
    for command in (("flow", "plan", "flows/shop.yaml"), trigger):
        code, _, err = run_cli(*command)
        assert code == 2 and "clean.sql:8:56: action clean: the SQL does not parse" in err, (command, err)
        assert run_cli("action", "list")[1].startswith("no actions registered"), command
        assert run_cli("flow", "list")[1].startswith("no flows registered"), command
    # every action parses, but a table does not analyse: the actions are stored, the flow is not
    clean.write_text(dedent(ACTIONS["clean"]).replace("WHERE price", "WHERE no_such_column"))
    code, _, err = run_cli(*trigger)
    assert code == 2 and "no_such_column" in err, err
    assert "clean" in run_cli("action", "list")[1]
    assert run_cli("flow", "list")[1].startswith("no flows registered")
