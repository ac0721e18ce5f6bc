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


def test_tests_import_their_helpers_one_way():
    """Helpers are modules of the ``tests`` package imported by absolute name (``from tests.lake._lakekit
    import ...``): never from a conftest, never relatively, never by editing ``sys.path``."""
    import ast

    tests = REPO / "tests"
    problems = []
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom):
                name = node.module or ""
                if (
                    node.level
                    or name.split(".")[-1] == "conftest"
                    or (name.startswith("_") and name != "__future__")
                ):
                    problems.append(f"{where}: from {'.' * node.level}{name} import ...")
            elif (
                isinstance(node, ast.Attribute)
                and node.attr in ("insert", "append")
                and ast.unparse(node.value) == "sys.path"
            ):
                problems.append(f"{where}: edits sys.path")
    for folder in [tests, *(p for p in tests.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        if any(folder.glob("*.py")) and not (folder / "__init__.py").is_file():
            problems.append(f"{folder.relative_to(REPO)}: not a package (no __init__.py)")
    assert problems == []


def test_modules_stay_small():
    """Small modules (docs/STYLE: a median of 100-300 lines): no module of the product packages is over 600
    lines, and their median is at most 300. A module that grows past it is a place to split along a seam."""
    import statistics

    sizes = {
        path.relative_to(REPO).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for package in ("registry", "materializer", "runtime")
        for path in sorted((REPO / package).rglob("*.py"))
    }
    too_long = sorted(f"{name} ({lines} lines)" for name, lines in sizes.items() if lines > 600)
    assert not too_long, f"modules over 600 lines: {', '.join(too_long)}"
    median = statistics.median(sizes.values())
    largest = sorted(sizes, key=sizes.get, reverse=True)[:5]
    assert median <= 300, f"the median module has {median} lines (> 300); the largest: {', '.join(largest)}"
