"""Selectors on a running shipped flow: ``flow plan --select``, ``tier run --select``, and a changed table
refused (TH405, pointing at ``flow diff``) then rebuilt by ``flow trigger --full-refresh layer:ads`` — exactly
the ADS tables get a new incarnation, every other table keeps its data."""

from __future__ import annotations

import json
import shutil

import pytest

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.scaffold.generate import EventsConfig, write_events
from tests._support import REPO
from tests.materializer._flowkit import canon

pytestmark = [pytest.mark.spark, pytest.mark.slow]
FLOW = "ecommerce_activity"
TABLES = ["ods.events", "dwd.events", "dws.user_activity", "ads.conversion", "ads.top_users"]


def test_selectors_on_the_running_shipped_flow(spark, project_dir, run_cli):
    from runtime.project import Project

    shutil.rmtree(project_dir / "actions")
    shutil.copytree(REPO / "actions", project_dir / "actions")
    path = project_dir / "flows" / f"{FLOW}.yaml"
    shutil.copy(REPO / "flows" / f"{FLOW}.yaml", path)
    write_events(project_dir / "data" / "events", EventsConfig(events=300), files=2)

    project = Project.open()
    try:
        project.trigger(path, until_idle=True, spark=spark)
        born = {t: project.store.incarnation(t) for t in TABLES}
        top = canon(project.query("SELECT * FROM ads.top_users"))
        conversion = canon(project.query("SELECT * FROM ads.conversion"))
    finally:
        project.close()

    code, out, err = run_cli("flow", "plan", FLOW, "--select", "tag:funnel", "--format", "json")
    assert code == 0, err
    assert [t["name"] for t in json.loads(out)["tables"]] == ["dws.user_activity", "ads.conversion"]
    code, out, err = run_cli("flow", "plan", FLOW, "-s", "+ads.top_users", "--exclude", "layer:ods")
    assert code == 0, err
    assert "dwd.events:" in out and "ads.top_users:" in out and "ods.events:" not in out
    assert "ads.conversion:" not in out

    code, out, err = run_cli("tier", "run", "--flow", FLOW, "--select", "layer:ods", "--format", "json")
    assert code == 0, err
    assert sorted(json.loads(out)["tables"]) == ["ods.events", "ods.events__quarantine"]
    code, _, err = run_cli("tier", "run", "--select", "layer:ods")
    assert code == 2 and "TH253" in err and "--flow" in err
    code, _, err = run_cli("tier", "run", "--flow", FLOW, "--select", "layer:dwx")
    assert code == 2 and "TH253" in err and "did you mean" in err

    path.write_text(path.read_text().replace("n: 10}", "n: 5}"))  # ads.top_users: its n parameter
    project = Project.open()
    try:
        diff = project.diff_flow(path, spark=spark)
        assert diff.rebuild == ["ads.top_users"] and diff.full_refresh == ("ads.top_users",)
        seen: list[dict] = []
        with pytest.raises(TidehouseError) as refused:  # what the diff said needs a rebuild is refused
            project.trigger(path, until_idle=True, spark=spark, on_status=seen.append)
        assert seen == []  # no progress of a run refused before its queries (the CLI printed its figures)
        assert refused.value.code is ErrorCode.PLAN_CHANGED
        assert refused.value.message.endswith(
            "the definition of ads.top_users changed since its data was built"
        )
        assert "--full-refresh ads.top_users" in refused.value.hint and "flow diff" in refused.value.hint
        # the refused file is not registered: the flow's latest version is still the one that built its data,
        # and the `flow diff` the hint points at still shows the change
        assert project.registry.get_flow(FLOW).version == 1
        assert project.diff_flow(path, spark=spark).rebuild == ["ads.top_users"]
    finally:
        project.close()

    # registered without a run, the new version is not what built the data: diff still compares with that
    code, out, err = run_cli("flow", "register", str(path))
    assert code == 0 and "@2" in out, (out, err)
    code, out, err = run_cli("flow", "diff", str(path))
    assert code == 0, err
    assert out.splitlines()[0].endswith(
        "against version 1, which built its data (version 2, registered since, did not run)"
    )
    assert "ads.top_users: REBUILD: params changed" in out
    # and status names the version that ran, and the newer one
    code, out, err = run_cli("flow", "status", FLOW)
    assert code == 0 and out.startswith(f"flow {FLOW} (version 1; version 2, registered since, has not run)")
    status = json.loads(run_cli("flow", "status", FLOW, "--format", "json")[1])
    assert (status["version"], status["latest_version"]) == (1, 2)
    code, out, err = run_cli("flow", "diff", str(path), "--format", "json")
    report = json.loads(out)
    assert (report["registered_version"], report["latest_version"], report["rebuild"]) == (
        1,
        2,
        ["ads.top_users"],
    )

    code, _, err = run_cli("flow", "trigger", str(path), "--until-idle", "--full-refresh", "layer:nope")
    assert code == 2 and "TH253" in err  # refused before anything runs
    code, out, err = run_cli("flow", "trigger", str(path), "--until-idle", "--full-refresh", "layer:ads")
    assert code == 0, err
    code, out, err = run_cli("flow", "diff", str(path))  # version 2 built the data now
    assert code == 0 and out.splitlines() == [f"flow {FLOW}: {path} against version 2", "  no difference"]
    status = json.loads(run_cli("flow", "status", FLOW, "--format", "json")[1])
    assert status["version"] == 2 and "latest_version" not in status

    project = Project.open()
    try:
        rebuilt = {t for t in TABLES if project.store.incarnation(t) != born[t]}
        assert rebuilt == {"ads.conversion", "ads.top_users"}
        assert canon(project.query("SELECT * FROM ads.conversion")) == conversion
        assert canon(project.query("SELECT * FROM ads.top_users")) == canon(
            project.query("SELECT * FROM ads.top_users WHERE rank <= 5")
        )
        after = canon(project.query("SELECT * FROM ads.top_users"))
        assert sum(after.values()) == 5 and after <= top  # the first five of the ten
        lake = project.lake.load("ads.top_users").scan().to_arrow()
        assert canon(lake) == after
        stale = _row(project, "ads.conversion")["hot_delay_s"]  # rebuilt from the first run's rows
    finally:
        project.close()

    # a file again: every user is known, so the funnel's batch reads new input and writes nothing; the table
    # is as fresh as that batch, not as its last commit (the rebuild's, from the first run's rows)
    events = sorted((project_dir / "data" / "events").iterdir())
    shutil.copy(events[0], events[0].with_name("again-" + events[0].name))
    code, out, err = run_cli("flow", "trigger", str(path), "--until-idle")
    assert code == 0 and "ads.conversion: 0 rows written in 1 batch" in out, (out, err)
    project = Project.open()
    try:
        row = _row(project, "ads.conversion")
        assert row["last_batch_rows_written"] == 0 and row["last_commit_at"] < row["last_batch_time"]
        assert row["hot_delay_s"] == round(row["last_batch_time"] - row["last_batch_origin"], 3) < stale
    finally:
        project.close()


def _row(project, table: str) -> dict:
    return next(r for r in project.status(FLOW)["tables"] if r["table"] == table)
