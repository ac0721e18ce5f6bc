"""How the runner's hot streams wait for rows (materializer.hotstream) and the awake files that keep drains
and stops prompt (materializer.drain.Awake). No Spark: a session that records the reader's options."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from materializer.drain import Awake
from materializer.hotstream import IDLE_WAIT_S, Waiting, hot_stream


class _Reader:
    def __init__(self) -> None:
        self.options: dict[str, str] = {}

    def format(self, name: str):
        self.options["format"] = name
        return self

    def option(self, key: str, value: str):
        self.options[key] = value
        return self

    def load(self):
        return self.options


def _stream(waiting: Waiting | None, **kwargs) -> dict[str, str]:
    session = SimpleNamespace(readStream=_Reader())
    config = SimpleNamespace(home=Path("/h"), project_dir=Path("/p"))
    return hot_stream(session, config, "ods.events", waiting=waiting, **kwargs)


def test_a_stream_that_waits_polls_as_often_as_its_trigger_and_names_its_awake_file():
    options = _stream(Waiting(0.1, Path("/h/run/awake/f/dwd.events")), max_rows=500)
    assert options == {
        "format": "tidehouse",
        "home": "/h",
        "project": "/p",
        "table": "ods.events",
        "maxRowsPerTrigger": "500",
        "idleWaitMs": str(round(IDLE_WAIT_S * 1000)),
        "pollMs": "100",
        "awakeFile": "/h/run/awake/f/dwd.events",
    }
    assert _stream(Waiting(0.0, Path("/a")))["pollMs"] == "10"  # a trigger of 0: polls every 10 ms
    for waiting in (None, Waiting(IDLE_WAIT_S, Path("/a")), Waiting(5.0, Path("/a"))):
        assert "idleWaitMs" not in _stream(waiting)  # none asked, or a trigger as long as the wait


def test_awake_files_exist_during_a_drain_and_are_removed_after_it_even_when_it_fails(tmp_path):
    awake = Awake(tmp_path / "awake" / "flow")
    with awake.during(["dwd.a", "dws.b"]):
        assert awake.path("dwd.a").exists() and awake.path("dws.b").exists()
    assert not any(awake.folder.iterdir())
    with pytest.raises(RuntimeError), awake.during(["dwd.a"]):
        raise RuntimeError("drain failed")
    assert not awake.path("dwd.a").exists()
    awake.set({"dwd.a": object()})  # the runner passes its queries (a dict): their names
    assert awake.path("dwd.a").exists()
    awake.clear(["dwd.a", "never.set"])
    assert not awake.path("dwd.a").exists()
