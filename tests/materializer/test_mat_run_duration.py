"""How long a run lasts (``--duration`` of ``flow trigger`` and ``tier schedule``): a duration above 0, in
seconds or with a unit (``30s``, ``5m``: how flows write durations), refused before anything starts otherwise.
``0`` ran without an end (read as no limit), a negative number stopped at once with exit 0, NaN never
stopped, ``--until-idle --duration 5`` ignored the duration, and ``--duration 25s`` was refused as not a
number."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("given", ["0", "0s", "-5", "nan", "inf", "5x", "1e3", ""])
def test_a_duration_that_is_not_above_0_is_refused(run_cli, test_flow, given):
    for command in (["flow", "trigger", str(test_flow)], ["tier", "schedule"]):
        code, out, err = run_cli(*command, "--duration", given)
        assert (code, out) == (2, ""), command
        assert err == (
            "error: --duration: a run's duration is above 0, in seconds or with a unit ('90', '30s', '5m', "
            f"'2h'), not {given!r} (leave it out to run until stopped) [TH100]\n"
        ), command


@pytest.mark.parametrize(("given", "seconds"), [("90", 90.0), ("1.5", 1.5), ("30s", 30.0), ("5m", 300.0)])
def test_a_duration_is_seconds_or_has_a_unit(given, seconds):
    from runtime.core.durations import run_seconds

    assert run_seconds(given, "--duration") == seconds
    assert run_seconds(seconds, "--duration") == seconds  # a library caller's number


def test_tier_schedule_runs_for_a_duration_with_a_unit(run_cli, project_dir):
    import time

    began = time.monotonic()
    code, _, err = run_cli("tier", "schedule", "--duration", "1500ms")
    assert code == 0, err
    assert 1.5 <= time.monotonic() - began < 30


def test_until_idle_and_a_duration_exclude_each_other(run_cli, test_flow):
    code, out, err = run_cli("flow", "trigger", str(test_flow), "--until-idle", "--duration", "5")
    assert (code, out) == (2, "")
    assert (
        err.startswith("error: --duration: --until-idle and --duration exclude each other") and "TH100" in err
    )


def test_a_library_caller_gets_the_same_refusal(project_dir, test_flow):
    from runtime.core.errors import ErrorCode, TidehouseError
    from runtime.project import Project

    project = Project.open()
    try:
        for kwargs in ({"duration": -1.0}, {"duration": 0.0}, {"until_idle": True, "duration": 3.0}):
            with pytest.raises(TidehouseError) as err:
                project.trigger(test_flow, **kwargs)
            assert err.value.code is ErrorCode.CONFIG_INVALID, kwargs
        assert project.registry.list_flows() == []  # refused before it registered anything
    finally:
        project.close()
