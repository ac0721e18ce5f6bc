"""The top-level packages have generic names: make sure this project's own are the ones imported."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["runtime", "registry", "materializer"])
def test_own_package_is_imported(name):
    module = importlib.import_module(name)
    assert Path(module.__file__).resolve().parent == REPO / name


def test_console_script_points_at_this_project():
    from importlib.metadata import entry_points

    (entry,) = [e for e in entry_points(group="console_scripts") if e.name == "tidehouse"]
    assert entry.value == "runtime.cli:run"
    assert Path(entry.load().__code__.co_filename).resolve().is_relative_to(REPO / "runtime")
