"""A Spark Connect server that stops answering is one located error, wherever the client meets it."""

from __future__ import annotations

import pytest

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.spark import session

GRPC = (
    "<_MultiThreadedRendezvous of RPC that terminated with:\n\tstatus = StatusCode.UNAVAILABLE\n"
    '\tdetails = "failed to connect to all addresses; Connection refused"\n>'
)


@pytest.fixture
def client(monkeypatch):
    monkeypatch.setattr(session, "_CONNECT_URLS", {"sc://spark:15002"})


def test_an_unavailable_server_is_spark_start_naming_it(client):
    error = session.lost_server_error(RuntimeError(GRPC))
    assert error is not None and error.code is ErrorCode.SPARK_START
    assert error.message == (
        "lost the Spark Connect server sc://spark:15002: "
        "failed to connect to all addresses; Connection refused"
    )
    assert "resumes every query from its checkpoint" in error.hint


def test_the_cause_of_a_query_that_could_not_start_is_read_too(client):
    try:
        try:
            raise RuntimeError(GRPC)
        except RuntimeError as exc:
            raise TidehouseError(
                ErrorCode.QUERY_FAILED, "could not start: <_MultiThreadedRendezvous"
            ) from exc
    except TidehouseError as exc:
        error = session.lost_server_error(exc)
    assert error is not None and error.code is ErrorCode.SPARK_START


def test_other_errors_and_classic_sessions_are_left_alone(client, monkeypatch):
    assert session.lost_server_error(ValueError("division by zero")) is None
    monkeypatch.setattr(session, "_CONNECT_URLS", set())  # no Connect client in this process
    assert session.lost_server_error(RuntimeError(GRPC)) is None
