"""A second trigger of a running flow is refused (fast: no Spark)."""

import pytest

from materializer.runner import RunLock
from runtime.errors import ErrorCode, TidehouseError


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
