"""Every ``tidehouse`` command line written in README.md and docs/ names commands and options that exist."""

from __future__ import annotations

import shlex
from pathlib import Path

import click
import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def code_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of every fenced block."""
    blocks, current, lang = [], None, ""
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current, lang = [], line[3:].strip()
            else:
                blocks.append((lang, current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def command_lines(page: Path) -> list[str]:
    lines = []
    for lang, block in code_blocks(page.read_text(encoding="utf-8")):
        if lang not in ("", "bash", "sh", "console"):
            continue
        for line in block:
            for part in line.split("&&"):
                part = part.split("   #")[0].strip()
                words = part.split()
                if words and words[0].endswith("tidehouse") and "[OPTIONS]" not in part:
                    lines.append(" ".join(["tidehouse", *part.split(None, 1)[1:]]))
    return lines


def resolve(words: list[str]) -> tuple[click.Command, list[str], list[str]]:
    """(command, its path, remaining words), following groups from the root."""
    from runtime.cli import cli

    cmd, path, rest = cli, ["tidehouse"], list(words)
    while isinstance(cmd, click.Group):
        while rest and rest[0].startswith("--"):  # global options before the command
            opt = rest.pop(0)
            if opt in ("--home",):
                rest.pop(0)
        if not rest or rest[0] not in cmd.commands:
            break
        path.append(rest[0])
        cmd = cmd.commands[rest.pop(0)]
    return cmd, path, rest


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_documented_commands_exist(page):
    for line in command_lines(page):
        words = shlex.split(line.replace("\\$", "$"))[1:]
        if not words or words[0] in ("-h", "--help"):
            continue
        cmd, path, rest = resolve(words)
        assert not isinstance(cmd, click.Group) or not rest, f"{page.name}: `{line}`: no such command"
        known = {opt for p in cmd.params for opt in getattr(p, "opts", [])}
        for word in rest:
            if word.startswith("--"):
                assert word.split("=")[0] in known, f"{page.name}: `{line}`: {' '.join(path)} has no {word}"


def test_the_tour_is_found():
    assert len(command_lines(REPO / "README.md")) >= 8
