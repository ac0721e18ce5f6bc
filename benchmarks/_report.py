"""Shared by the benchmark scripts: print a table and write it as one section of docs/benchmarks.md.

Each script owns one section, delimited by ``<!-- BEGIN name -->`` / ``<!-- END name -->`` markers, so
scripts can be re-run independently without clobbering each other's figures.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
_HEADER = """# Benchmarks

Figures measured on the machine named in each section, by the scripts in `benchmarks/`. Every figure is
shown next to a baseline measured in the same script run, as a ratio. Re-run a script to refresh its
section (the command is given in each section; every script runs as a module from the repository root,
`.venv/bin/python -m benchmarks.<name>`).

Percentiles (p50, p95, p99) all come from one helper, `benchmarks/stats.py`: linear interpolation between
the two closest ranks (numpy's default), so p50 is the usual median and a p99 of fewer than 100 samples lies
between the two largest.
"""


def argument_parser(module: str, description: str | None) -> argparse.ArgumentParser:
    """The command line of ``python -m <module>`` (every benchmark runs as a module from the repository
    root)."""
    return argparse.ArgumentParser(
        prog=f"python -m {module}",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def machine() -> str:
    from importlib.metadata import version

    cores = os.cpu_count()
    mem = ""
    try:
        with open("/proc/meminfo") as fh:
            kb = int(fh.readline().split()[1])
            mem = f", {kb / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    return (
        f"{platform.machine()}, {cores} cores{mem}, Python {platform.python_version()}, "
        f"pyspark {version('pyspark')}, pyarrow {version('pyarrow')}, pyiceberg {version('pyiceberg')}"
    )


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.0f}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_section(name: str, title: str, command: str, body: str, measured_at: float | None = None) -> None:
    """Print ``body`` and store it as section ``name`` of docs/benchmarks.md (``measured_at``: when the
    figures were measured, as a Unix time, if not now — e.g. re-rendered from saved results)."""
    when = (
        _dt.datetime.now(_dt.timezone.utc)
        if measured_at is None
        else _dt.datetime.fromtimestamp(measured_at, _dt.timezone.utc)
    )
    stamp = when.strftime("%Y-%m-%d %H:%M UTC")
    section = (
        f"<!-- BEGIN {name} -->\n## {title}\n\nMeasured {stamp} on {machine()}.  \n"
        f"Reproduce: `{command}`\n\n{body.strip()}\n<!-- END {name} -->"
    )
    print(body)
    text = DOC.read_text(encoding="utf-8") if DOC.exists() else _HEADER
    pattern = re.compile(rf"<!-- BEGIN {re.escape(name)} -->.*?<!-- END {re.escape(name)} -->", re.S)
    text = (
        pattern.sub(lambda _: section, text)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + section + "\n"
    )
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text, encoding="utf-8")
