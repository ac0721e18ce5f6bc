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


NO_SESSION = (
    "[NO_ACTIVE_SESSION] No active Spark session found. Please create a new Spark session before running"
)


def test_a_call_after_the_sessions_were_closed_for_a_lost_server_is_that_server_lost(client, monkeypatch):
    """server_lost() closes the sessions; a tiering cycle still running then meets NO_ACTIVE_SESSION."""
    assert session.lost_server_error(RuntimeError(NO_SESSION)) is None  # not after a lost server: a bug
    monkeypatch.setattr(session, "_LOST", True)
    error = session.lost_server_error(RuntimeError(NO_SESSION))
    assert error is not None and error.code is ErrorCode.SPARK_START
    assert error.message.startswith("lost the Spark Connect server sc://spark:15002: it stopped answering")


def test_a_call_in_flight_whose_channel_closed_for_a_lost_server_is_that_server_lost(client, monkeypatch):
    """A tiering cycle's collect in flight when server_lost() closed its session: gRPC's closed channel (a
    full-scale kill -9 of the server logged it with a traceback before)."""
    closed = ValueError("Cannot invoke RPC: Channel closed!")
    assert session.lost_server_error(closed) is None  # not after a lost server: a bug
    monkeypatch.setattr(session, "_LOST", True)
    error = session.lost_server_error(closed)
    assert error is not None and error.code is ErrorCode.SPARK_START
    assert error.message.startswith("lost the Spark Connect server sc://spark:15002: it stopped answering")


def test_a_tiering_cycle_that_meets_the_lost_server_fails_with_that_one_error(client, monkeypatch):
    """Not a traceback in the run's output (the scheduler logs a TidehouseError as its message)."""
    from types import SimpleNamespace

    from runtime.spark.tiering import SparkLakeFiles

    class Closed:
        def createDataFrame(self, *args, **kwargs):
            raise RuntimeError(NO_SESSION)

    monkeypatch.setattr(session, "_LOST", True)
    files = SparkLakeFiles(Closed(), place=None, min_rows=1)
    table = SimpleNamespace(
        metadata=SimpleNamespace(model_dump_json=lambda: "{}"), io=SimpleNamespace(properties={})
    )
    with pytest.raises(TidehouseError) as caught:
        files(SimpleNamespace(name="ods.clicks"), table, [0], [10])
    assert caught.value.code is ErrorCode.SPARK_START
    monkeypatch.setattr(session, "_LOST", False)
    with pytest.raises(RuntimeError, match="NO_ACTIVE_SESSION"):  # any other failure is left as it is
        files(SimpleNamespace(name="ods.clicks"), table, [0], [10])


def test_only_py4js_own_refusals_wait_for_the_driver_jvm_to_be_seen_ended():
    """A call to a JVM that is dying waits for it to be seen ended; a refused connection of a catalog's does
    not make the error path wait (and is nobody's lost server)."""
    from py4j.protocol import Py4JError, Py4JNetworkError

    def catalog_call():
        raise ConnectionRefusedError(111, "Connection refused")

    try:
        catalog_call()
    except ConnectionRefusedError as exc:
        assert not session._gateway_refused(exc)
        assert session.lost_server_error(exc) is None  # this process's JVM runs or is none: no wait either
    assert session._gateway_refused(Py4JNetworkError("Answer from Java side is empty"))
    assert session._gateway_refused(Py4JError("An error occurred while calling o538.sparkSession"))
