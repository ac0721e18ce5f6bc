"""``tidehouse flow diff``: the shipped e-commerce flow against edited copies (plans only: no stream runs).

A rebuild is a fingerprint change, so it follows the graph downstream; settings outside the fingerprint
(tiering, trigger, tags) never rebuild; new and dropped tables are added and removed; an action's new
version shows its SQL as a unified diff.
"""

from __future__ import annotations

import json
import shutil

import pytest

from runtime.core.errors import ErrorCode, TidehouseError
from tests._support import REPO

pytestmark = pytest.mark.spark
FLOW = "ecommerce_activity"
DOWNSTREAM = ["dws.user_activity", "ads.conversion", "ads.top_users"]


@pytest.fixture
def shop(project_dir):
    """The shipped actions and the e-commerce flow in a project; ``flows/edit.yaml`` is the copy to edit."""
    shutil.rmtree(project_dir / "actions")
    shutil.copytree(REPO / "actions", project_dir / "actions")
    shutil.copy(REPO / "flows" / f"{FLOW}.yaml", project_dir / "flows")
    return project_dir / "flows" / f"{FLOW}.yaml"


def _edit(path, *replacements) -> str:
    text = path.read_text(encoding="utf-8")
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new, 1)
    edited = path.with_name("edit.yaml")
    edited.write_text(text, encoding="utf-8")
    return str(edited)


def test_flow_diff_of_the_shipped_flow_with_edited_copies(spark, shop, run_cli):
    from runtime.project import Project

    project = Project.open()
    try:
        unregistered = project.diff_flow(shop, spark=spark)
        assert unregistered.version is None and unregistered.rebuild == [] and unregistered.removed == []
        assert unregistered.added == [t.name for t in project.plan(shop, spark=spark).tables]

        project.register_flow(shop, quick=True)
        same = project.diff_flow(shop, spark=spark)
        assert same.version == 1 and not same.differs and "no difference" in same.to_text()

        edited = _edit(
            shop,
            ("params: {min_price: 0.0}", "params: {min_price: 1.0}"),  # dwd.events: a parameter binding
            (
                "primary_key: [rank]\n      tiering: {interval: 10s}",
                "primary_key: [rank]\n      tiering: {interval: 20s}",
            ),
            (
                "    conversion:\n",
                "    spend:\n      action: sum_by_key\n      inputs: {rows: dwd.events}\n"
                "      params: {key: user_id, value: price}\n      primary_key: [user_id]\n    dropped:\n",
            ),
        )
        diff = project.diff_flow(edited, spark=spark)
        tables = {t.table: t for t in diff.tables}
        assert diff.added == ["ads.spend", "ads.dropped"]  # plan order
        assert diff.removed == ["ads.conversion"]
        assert diff.rebuild == ["dwd.events", "dws.user_activity", "ads.top_users"]  # conversion is gone
        assert diff.full_refresh == ("dwd.events",)  # the rest is downstream of it
        assert diff.command == f"tidehouse flow trigger {edited} --full-refresh dwd.events"
        dwd = tables["dwd.events"]
        assert dwd.reasons == ("params changed",)
        assert [(c.field, c.rebuild, c.detail) for c in dwd.changes] == [
            ("params", True, (":min_price 0.0 (double) -> 1.0 (double)",))
        ]
        assert tables["dws.user_activity"].reasons == ("reads dwd.events, which is rebuilt",)
        assert tables["dws.user_activity"].changes == ()
        top = tables["ads.top_users"]
        assert top.rebuild and top.reasons == ("reads dws.user_activity, which is rebuilt",)
        assert [(c.field, c.old, c.new, c.rebuild) for c in top.changes] == [
            ("tiering_interval", 10.0, 20.0, False)
        ]
        assert tables["ods.events"].status == "unchanged"

        only_settings = _edit(
            shop,
            (
                "primary_key: [rank]\n      tiering: {interval: 10s}",
                "primary_key: [rank]\n      tiering: {interval: 20s}",
            ),
            ("tags: [funnel]  ", "tags: [funnel, serving]  "),
            ("trigger: 1s ", "trigger: 2s "),
        )
        diff = project.diff_flow(only_settings, spark=spark)
        assert diff.differs and diff.rebuild == [] and diff.full_refresh == () and diff.command is None
        changed = {t.table: {c.field for c in t.changes} for t in diff.tables if t.status == "changed"}
        assert changed == {
            "ods.events": {"trigger"},
            "dwd.events": {"trigger"},
            "dws.user_activity": {"trigger", "tags"},
            "ads.conversion": {"trigger"},
            "ads.top_users": {"trigger", "tiering_interval"},
        }
        assert all(not c.rebuild for t in diff.tables for c in t.changes)
        assert "no table needs a rebuild" in diff.to_text()

        # an action's new version: its SQL as a unified diff; the version alone rebuilds nothing
        action = shop.parent.parent / "actions" / "clean_clicks.sql"
        action.write_text(
            action.read_text().replace("AND price >= :min_price", "AND price >= :min_price AND price < 1e9")
        )
        code, out, err = run_cli("flow", "diff", str(shop), "--format", "json")
        assert code == 0, err
        report = json.loads(out)
        assert report["registered_version"] == 1 and report["full_refresh"] == ["dwd.events"]
        assert report["rebuild"] == ["dwd.events", *DOWNSTREAM]
        dwd = next(t for t in report["tables"] if t["table"] == "dwd.events")
        fields = {c["field"]: c for c in dwd["changes"]}
        assert fields["action"]["rebuild"] is False and fields["action"]["new"] == "clean_clicks@2"
        assert fields["sql"]["rebuild"] is True
        assert "+  AND price >= :min_price AND price < 1e9" in fields["sql"]["detail"]
        assert "-  AND price >= :min_price" in fields["sql"]["detail"]
        code, out, _ = run_cli("flow", "diff", str(shop))
        assert code == 0 and "REBUILD: sql changed" in out and "--full-refresh dwd.events" in out
    finally:
        project.close()


def test_flow_diff_of_a_bad_file_exits_2(shop, run_cli):
    bad = _edit(shop, ("action: clean_clicks", "action: clean_clik"))
    code, _, err = run_cli("flow", "diff", bad)
    assert code == 2 and "TH221" in err and "did you mean 'clean_clicks'" in err
    code, _, err = run_cli("flow", "diff", "flows/missing.yaml")
    assert code == 2


def test_flow_diff_needs_a_file(shop):
    from runtime.project import Project

    project = Project.open()
    try:
        with pytest.raises(TidehouseError) as err:
            project.diff_flow(FLOW)
        assert err.value.code is ErrorCode.SPEC_BAD_VALUE
    finally:
        project.close()
