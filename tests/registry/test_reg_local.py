"""A project's action files next to the registry (registry/local.py): which tables of a registered flow run
another version than their action file, since a run of the flow by name runs its pins."""

from __future__ import annotations

from registry.local import EditedAction, edited_actions
from registry.service import Registry
from tests.registry._reg_helpers import ACTIONS, BASE_FLOW, dedent, write_actions


def test_the_tables_whose_action_file_changed_since_the_pin(tmp_path):
    actions = write_actions(tmp_path / "actions")
    flow = tmp_path / "shop.yaml"
    flow.write_text(BASE_FLOW)
    registry = Registry.open(f"sqlite:///{tmp_path / 'registry.db'}")
    registry.register_actions([actions])
    version = registry.register_flow(flow)
    assert edited_actions(registry, version, actions) == []

    # line endings aside, a file is the version registering it would answer
    (actions / "clean.sql").write_text(dedent(ACTIONS["clean"]).replace("\n", "\r\n"))
    assert edited_actions(registry, version, actions) == []
    (actions / "clean.sql").write_text(dedent(ACTIONS["clean"]).replace(">=", ">"))
    assert edited_actions(registry, version, actions) == [
        EditedAction("dwd.clean", "clean@1", actions / "clean.sql")
    ]
    # registered again, the flow pins the file: nothing to tell
    registry.register_actions([actions])
    assert edited_actions(registry, registry.register_flow(flow), actions) == []

    # a version the flow file names is the author's pin; a file that does not parse names no action
    (actions / "clean.sql").write_text(dedent(ACTIONS["clean"]).replace(">=", "<"))
    flow.write_text(BASE_FLOW.replace("action: clean,", "action: clean@1,"))
    assert edited_actions(registry, registry.register_flow(flow), actions) == []
    (actions / "count_by_key.sql").write_text("/*---\nname: count_by_key\n")
    flow.write_text(BASE_FLOW)
    assert [e.table for e in edited_actions(registry, registry.register_flow(flow), actions)] == ["dwd.clean"]
    assert edited_actions(registry, version, tmp_path / "no_such_folder") == []
    registry.close()
