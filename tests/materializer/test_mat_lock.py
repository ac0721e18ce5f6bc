"""A second trigger of a running flow is refused (fast: no Spark)."""

import pytest

from materializer.lock import RunLock
from runtime.core.errors import ErrorCode, TidehouseError


def test_second_run_of_a_flow_is_refused(tmp_path):
    first = RunLock(tmp_path, "orders")
    first.acquire()
    try:
        with pytest.raises(TidehouseError) as err:
            RunLock(tmp_path, "orders").acquire()
        assert err.value.code == ErrorCode.FLOW_RUNNING
        assert "already running" in err.value.message
        RunLock(tmp_path, "other").acquire()  # other flows are independent
    finally:
        first.release()
    again = RunLock(tmp_path, "orders")
    again.acquire()
    again.release()


def test_trigger_refuses_before_planning_or_registering(tmp_path, monkeypatch):
    """A second `flow trigger` must not start Spark nor register a new flow version under the running one."""
    from runtime.project import Project

    flow = tmp_path / "orders.yaml"
    flow.write_text(
        "flow: orders\n"
        "sources:\n  raw: {format: json, path: data/orders, schema: 'id string'}\n"
        "layers:\n  ods:\n    orders: {action: ingest, inputs: {raw: raw}}\n"
    )
    project = Project.open(home=tmp_path / "home", project_dir=tmp_path)
    monkeypatch.setattr(Project, "plan", lambda *a, **k: pytest.fail("planned while locked"))
    held = RunLock(project.config.run_dir, "orders")
    held.acquire()
    try:
        for ref in (flow, "orders", "orders@2"):
            with pytest.raises(TidehouseError) as err:
                project.trigger(ref)
            assert err.value.code == ErrorCode.FLOW_RUNNING
    finally:
        held.release()


def test_status_sees_a_running_flow_by_its_lock(tmp_path):
    lock = RunLock(tmp_path, "orders")
    assert not lock.taken_elsewhere()
    lock.acquire()
    try:
        assert RunLock(tmp_path, "orders").taken_elsewhere() and lock.taken_elsewhere()
        assert not RunLock(tmp_path, "other").taken_elsewhere()
    finally:
        lock.release()
    assert not RunLock(tmp_path, "orders").taken_elsewhere()
