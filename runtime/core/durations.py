"""Durations as users write them: ``500ms``, ``5s``, ``1m``, ``2h``, ``1d`` (or a bare number of seconds)."""

from __future__ import annotations

import math
import re

from runtime.core.errors import ErrorCode, Location, TidehouseError

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def parse_duration(value: object) -> float:
    """Return seconds. Raises ``ValueError`` with a user-facing message on anything else."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like '500ms', '5s' or '1m', got {value!r}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):  # YAML's .nan and .inf are floats
            raise ValueError(f"a duration is a finite number of seconds, got {value!r}")
        if value < 0:
            raise ValueError(f"a duration cannot be negative, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a duration like '500ms', '5s' or '1m', got {value!r}")
    match = _PATTERN.match(value)
    if not match:
        raise ValueError(f"expected a duration like '500ms', '5s' or '1m', got {value!r}")
    number, unit = match.groups()
    return float(number) * _UNITS[unit or "s"]


def format_duration(seconds: float) -> str:
    """The shortest exact spelling of a duration in seconds (``0.5`` -> ``500ms``, ``60`` -> ``1m``)."""
    if seconds == 0:
        return "0s"
    for unit in ("d", "h", "m", "s"):
        size = _UNITS[unit]
        if seconds >= size and abs(seconds / size - round(seconds / size)) < 1e-9:
            return f"{round(seconds / size)}{unit}"
    return f"{round(seconds * 1000)}ms"


def run_seconds(value: float | str | None, option: str) -> float | None:
    """How long a run lasts (``--duration``): ``None`` (until stopped), or a duration above 0 — a number of
    seconds, or text as :func:`parse_duration` reads it (``90``, ``30s``, ``5m``). Anything else is an error
    located at ``option``: 0 read as "no limit", a negative number stopped at once, and NaN never stopped."""
    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except ValueError:
        seconds = math.nan
    if math.isfinite(seconds) and seconds > 0:
        return seconds
    raise TidehouseError(
        ErrorCode.CONFIG_INVALID,
        f"a run's duration is above 0, in seconds or with a unit ('90', '30s', '5m', '2h'), not {value!r}",
        location=Location(option),
        hint="leave it out to run until stopped",
    )
