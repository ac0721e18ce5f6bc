"""README.md's two commands: still the documented ones, and the first one works on a fresh clone.

The slow test clones the repository into a temporary folder and runs README's first command there. To save
the several minutes a fresh ``pip install`` of pyspark takes, it reuses this test run's virtualenv: the
clone's ``.venv`` is a link to it, the ``python3 -m venv … && pip install -e '.[dev]' &&`` prefix is skipped,
and ``PYTHONPATH`` points at the clone so the clone's code (not this checkout's editable install) runs.
``.venv/bin/tidehouse demo`` itself runs exactly as written. Set ``TIDEHOUSE_README_FULL_INSTALL=1`` to run
the whole line verbatim, install included.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
INSTALL_PREFIX = "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && "


def readme_commands() -> list[str]:
    """The commands of README's first code block (comments stripped)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    return [line.split("   #")[0].strip() for line in block.splitlines() if line.strip()]


def test_readme_opens_with_the_two_commands():
    assert readme_commands() == [
        INSTALL_PREFIX + ".venv/bin/tidehouse demo",
        ".venv/bin/python -m pytest",
    ]


def test_first_command_names_real_things():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    from runtime.cli import cli

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "dev" in pyproject["project"]["optional-dependencies"]
    assert pyproject["project"]["scripts"]["tidehouse"] == "runtime.cli:run"
    assert "demo" in cli.commands


def _demo_tables(output: str) -> dict[str, tuple[int, int]]:
    """table -> (hot rows, lake rows) from the demo's final table."""
    rows = {}
    for line in output.splitlines():
        match = re.match(r"^(ods|dwd|dws|ads)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$", line)
        if match:
            rows[match.group(2)] = (int(match.group(3)), int(match.group(4)))
    return rows


def _demo_rates(output: str) -> dict[str, list[float]]:
    """layer -> every rows/s figure of the demo's plain per-layer lines."""
    rates: dict[str, list[float]] = {}
    for layer, rate in re.findall(r"\b(ods|dwd|dws|ads): \d+ rows, ([0-9.]+) rows/s", output):
        rates.setdefault(layer, []).append(float(rate))
    return rates


@pytest.mark.slow
def test_first_command_on_a_fresh_clone(tmp_path):
    clone = tmp_path / "tidehouse"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    command = readme_commands()[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIDEHOUSE_", "PYSPARK_"))}
    if os.environ.get("TIDEHOUSE_README_FULL_INSTALL") != "1":
        (clone / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
        command = command.removeprefix(INSTALL_PREFIX)
        env["PYTHONPATH"] = str(clone)
    started = time.time()
    proc = subprocess.run(
        ["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    seconds = time.time() - started
    print(proc.stdout[-4000:])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert seconds < 180, f"the demo took {seconds:.0f}s (limit: 3 minutes)"
    assert f"demo project: {clone / 'tidehouse-demo'}" in proc.stdout
    assert (clone / "tidehouse-demo" / ".tidehouse" / "lake").is_dir()  # the demo project's own home
    assert not (clone / ".tidehouse").exists()  # nothing in the caller's home
    # nor Spark's catalog folder where the command ran (spark.sql.warehouse.dir is under the demo's home)
    assert not (clone / "spark-warehouse").exists()
    assert (clone / "tidehouse-demo" / ".tidehouse" / "spark-warehouse").is_dir()
    tables = _demo_tables(proc.stdout)
    for layer in ("ods", "dwd", "dws", "ads"):
        in_layer = {t: c for t, c in tables.items() if t.startswith(layer + ".")}
        assert in_layer, f"no {layer} table in the demo output"
        assert all(hot > 0 and lake > 0 for hot, lake in in_layer.values()), (layer, in_layer)
    assert "top users (ads.top_users)" in proc.stdout and "conversion funnel" in proc.stdout
    assert "load_catalog(" in proc.stdout
    rates = _demo_rates(proc.stdout)
    for layer in ("ods", "dwd", "dws", "ads"):  # every figure on screen moves while rows flow
        assert max(rates.get(layer, [0.0])) > 0, (layer, rates)
    shutil.rmtree(clone / "tidehouse-demo", ignore_errors=True)
