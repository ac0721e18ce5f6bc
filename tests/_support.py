"""What every test package shares, imported as ``from tests._support import ...``: the repository root, the
reduced/full repetition count, a double as the oracles compare it, and the real CLI run in-process."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def scale(ci: int, full: int) -> int:
    """How many repetitions a randomized or fault-injection test runs: ``full`` with TIDEHOUSE_SCALE=full."""
    return full if os.environ.get("TIDEHOUSE_SCALE") == "full" else ci


def comparable(value: float) -> float:
    """``value`` rounded to 6 decimals for a multiset comparison, after rounding to 9 first: the same result
    computed in another order differs in its last bits, and an exact value on a 6-decimal rounding boundary
    (an average of -1.1015625) would round to -1.101562 one way and -1.101563 the other."""
    return round(round(value, 9), 6)


def uses_the_shared_session(item) -> bool:
    """Whether a collected test uses the session fixture ``spark`` (directly or through another fixture), not
    a parameter of that name."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return "spark" in getattr(item, "fixturenames", ()) and "spark" not in params


class CliEntry:
    """Adapts :func:`runtime.cli.main` (which returns an exit code) to CliRunner's command protocol."""

    name = "tidehouse"  # CliRunner.invoke reads the command's name for the program name

    def main(self, args=None, prog_name=None, **_):
        from runtime.cli import main

        raise SystemExit(main(list(args or [])))


def run_cli(*args: str) -> tuple[int, str, str]:
    """Run the real CLI in-process: ``run_cli("flow", "validate", "x.yaml")`` -> (exit code, stdout,
    stderr)."""
    from click.testing import CliRunner

    result = CliRunner().invoke(CliEntry(), list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr
