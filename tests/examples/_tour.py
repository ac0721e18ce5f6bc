"""The README tour's commands and what the session fixture ``tour`` (tests/examples/conftest.py) keeps of its
run: the project and, per command, its exit code, output and seconds."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.examples._library import REPO

ACTION_TESTS = "tidehouse test"  # the tour's command whose report test_action_tests.py reads


def tour_commands() -> list[str]:
    """The ``tidehouse ...`` lines of the README's tour, in order (``&& cd DIR`` kept as a step)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    tour = text[text.index("## Five-minute tour") :]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", tour, re.S):
        for line in block.splitlines():
            for part in line.split("&&"):
                part = part.strip()
                if part.startswith(("tidehouse ", "cd ")):
                    commands.append(part)
    return commands


@dataclass
class Tour:
    """The tour's project and, per command, its exit code, stdout, stderr and seconds."""

    project_dir: Path
    outputs: dict[str, str] = field(default_factory=dict)
    codes: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def inside(self) -> Iterator[Path]:
        """In the project directory with its own home (no $TIDEHOUSE_HOME), as the tour's commands ran."""
        old_cwd, old_home = os.getcwd(), os.environ.pop("TIDEHOUSE_HOME", None)
        os.chdir(self.project_dir)
        try:
            yield self.project_dir
        finally:
            os.chdir(old_cwd)
            if old_home is not None:
                os.environ["TIDEHOUSE_HOME"] = old_home

    def open(self):
        """The tour's project (its home is ``.tidehouse/`` in the project, whatever $TIDEHOUSE_HOME says)."""
        from runtime.project import Project

        return Project.open(project_dir=self.project_dir, home=self.project_dir / ".tidehouse")
