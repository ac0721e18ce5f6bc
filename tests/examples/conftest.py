"""The README's tour, run once per test session and shared by two modules.

``test_flows.py`` checks the tour's outputs and every shipped flow against the batch oracle;
``test_action_tests.py`` checks the report of the tour's ``tidehouse test`` — the shipped actions' own
tests, which ``tidehouse init`` copies into the project (that module checks the copy is exact). Running
them once instead of twice saves the longest command of the tour (each case in Spark batch and as a
stream, about 90 s).
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

import pytest

from tests._support import run_cli
from tests.examples._tour import ACTION_TESTS, Tour, tour_commands


@pytest.fixture(scope="session")
def tour(spark, tmp_path_factory) -> Tour:
    """Run the tour in a temp dir, then trigger ``shop_trends`` and ``order_attribution`` the same way.

    Every command must exit 0 except ``tidehouse test``, which runs with ``--format json`` (the text report is
    tested in tests/cli) and whose exit code and failing cases test_action_tests.py reports."""
    base = tmp_path_factory.mktemp("tour")
    old_cwd, old_home = os.getcwd(), os.environ.pop("TIDEHOUSE_HOME", None)
    os.chdir(base)
    try:
        result = Tour(base)  # its project_dir becomes the project after the tour's `cd`
        for command in tour_commands():
            if command.startswith("cd "):
                os.chdir(command[3:].strip())
                continue
            args = shlex.split(command.replace("\\$", "$"))[1:]  # in bash, backslash-dollar is a plain dollar
            if args[:1] == ["init"]:
                args += ["--events", "1500"]  # a smaller sample than the default keeps the test short
            if command == ACTION_TESTS:
                args += ["--format", "json"]
            began = time.monotonic()
            code, out, err = run_cli(*args)
            result.seconds[command] = time.monotonic() - began
            result.outputs[command], result.codes[command], result.errors[command] = out, code, err
            if command != ACTION_TESTS:
                assert code == 0, f"`{command}` exited {code}:\n{out}\n{err}"
        assert ACTION_TESTS in result.outputs, "the README's tour no longer runs `tidehouse test`"
        result.project_dir = Path.cwd()
        for flow in ("shop_trends", "order_attribution"):
            code, out, err = run_cli("flow", "trigger", f"flows/{flow}.yaml", "--until-idle")
            assert code == 0, f"{flow}: {out}\n{err}"
    finally:
        os.chdir(old_cwd)
        if old_home is not None:
            os.environ["TIDEHOUSE_HOME"] = old_home
    return result
