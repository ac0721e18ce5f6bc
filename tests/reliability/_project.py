"""Helpers the reliability battery shares: a registry-test project on disk and the in-process CLI."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from click.testing import CliRunner

from runtime.cli import main

REGISTRY_TESTS = Path(__file__).resolve().parents[1] / "registry"
if str(REGISTRY_TESTS) not in sys.path:  # tests/registry is not a package: its helpers import by basename
    sys.path.insert(0, str(REGISTRY_TESTS))


class _Entry:
    """Adapts :func:`runtime.cli.main` (returns an exit code) to CliRunner's command protocol."""

    name = "tidehouse"

    def main(self, args=None, prog_name=None, **_):
        raise SystemExit(main(list(args or [])))


def cli(home: Path, *args: str) -> tuple[int, str, str]:
    """Run the real CLI in-process against ``home``: (exit code, stdout, stderr)."""
    result = CliRunner().invoke(_Entry(), ["--home", str(home), *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def materializer_testflow():
    """The materializer tests' 4-layer flow, actions, input generator, oracle SQL and ``canon`` multiset
    (``tests/materializer/conftest.py`` is not a package: loaded by path)."""
    path = Path(__file__).resolve().parents[1] / "materializer" / "conftest.py"
    spec = importlib.util.spec_from_file_location("tidehouse_materializer_testflow", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
