"""A long-running trigger checks its queries every half second: one found stopped without an error (the run
stops its queries only at its end) fails the run, as a failed one does (the drain's case, with Spark:
test_mat_stopped_query.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from materializer.runner import FlowRunner
from runtime.core.errors import ErrorCode, TidehouseError


def _runner(**queries):
    return SimpleNamespace(queries=queries, _pull=lambda: None, _restart_if_transient=lambda name, exc: False)


def _query(active: bool):
    return SimpleNamespace(isActive=active, exception=lambda: None)


def test_a_query_stopped_without_an_error_fails_the_running_flow():
    FlowRunner._check_failed(_runner(**{"ods.a": _query(True), "dwd.b": _query(True)}))  # all running
    with pytest.raises(TidehouseError) as failed:
        FlowRunner._check_failed(_runner(**{"ods.a": _query(True), "dwd.b": _query(False)}))
    assert failed.value.code == ErrorCode.QUERY_FAILED
    assert "the query of table dwd.b stopped without an error" in failed.value.message
