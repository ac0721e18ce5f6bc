"""Helpers the reliability battery shares: a registry-test project on disk and the in-process CLI."""

from __future__ import annotations

from pathlib import Path

from tests._support import run_cli


def cli(home: Path, *args: str) -> tuple[int, str, str]:
    """Run the real CLI in-process against ``home``: (exit code, stdout, stderr)."""
    return run_cli("--home", str(home), *args)
