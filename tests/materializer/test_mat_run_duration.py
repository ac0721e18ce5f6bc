"""How long a run lasts (``--duration`` of ``flow trigger`` and ``tier schedule``): a finite number of seconds
above 0, refused before anything starts otherwise. ``0`` ran without an end (read as no limit), a negative
number stopped at once with exit 0, NaN never stopped, and ``--until-idle --duration 5`` ignored the
duration."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("seconds", ["0", "-5", "nan", "inf"])
def test_a_duration_that_is_not_a_positive_number_of_seconds_is_refused(run_cli, test_flow, seconds):
    shown = repr(float(seconds))
    for command in (["flow", "trigger", str(test_flow)], ["tier", "schedule"]):
        code, out, err = run_cli(*command, "--duration", seconds)
        assert (code, out) == (2, ""), command
        assert err == (
            f"error: --duration: a run's duration is a number of seconds above 0, not {shown} "
            "(leave it out to run until stopped) [TH100]\n"
        ), command


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
