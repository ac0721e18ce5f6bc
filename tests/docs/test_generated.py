"""The generated reference pages of docs/ are up to date (regenerate with ``python docs/gen.py``)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _gen():
    spec = importlib.util.spec_from_file_location("docs_gen", DOCS / "gen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen():
    return _gen()


def test_reference_pages_are_not_stale(gen):
    stale = gen.stale_pages()
    assert not stale, f"stale: {sorted(stale)} - run: python docs/gen.py"


@pytest.mark.parametrize(
    "page", ["flows.md", "actions.md", "cli.md", "configuration.md", "error-codes.md", "operations.md"]
)
def test_generated_blocks_hold_content(gen, page):
    text = (DOCS / page).read_text(encoding="utf-8")
    blocks = re.findall(r"<!-- BEGIN GENERATED: [\w-]+ -->\n(.*?)<!-- END GENERATED", text, re.S)
    assert blocks and all(len(b.strip()) > 200 for b in blocks), page


def test_every_field_setting_code_command_and_action_is_documented(gen):
    from click import Group

    from registry.specs import FlowSpec, TableSpec
    from runtime.cli import cli
    from runtime.core.errors import ErrorCode
    from runtime.core.settings import SETTINGS

    flows = (DOCS / "flows.md").read_text()
    for model in (FlowSpec, TableSpec):
        for name, field in model.model_fields.items():
            if not field.exclude:
                assert f"| `{field.alias or name}` |" in flows, name
    config = (DOCS / "configuration.md").read_text()
    assert all(f"`{s.name}`" in config for s in SETTINGS)
    codes = (DOCS / "error-codes.md").read_text()
    assert all(f"`{c.value}`" in codes for c in ErrorCode)
    cli_md = (DOCS / "cli.md").read_text()

    def walk(group, path):
        for name, cmd in group.commands.items():
            assert f"### `{' '.join(path + [name])}`" in cli_md
            if isinstance(cmd, Group):
                walk(cmd, path + [name])

    walk(cli, ["tidehouse"])
    actions = (DOCS / "actions.md").read_text()
    for sql in (DOCS.parent / "actions").glob("*.sql"):
        assert f"### {sql.stem}\n" in actions


def test_a_change_in_the_code_makes_the_page_stale(gen, monkeypatch):
    from runtime.core import settings

    extra = settings.Setting("demo.only_in_this_test", 1, "A setting that exists only in this test.")
    monkeypatch.setattr(settings, "SETTINGS", settings.SETTINGS + (extra,))
    assert "configuration.md" in gen.stale_pages()
    assert "demo.only_in_this_test" in gen.stale_pages()["configuration.md"]


def test_check_mode_exit_code(gen, capsys):
    assert gen.main(["--check"]) == 0
