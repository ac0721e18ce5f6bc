"""``tidehouse init``: a project that loads, validates and holds everything the README promises (fast)."""

from __future__ import annotations

import re

import pytest
import yaml

from runtime.core.settings import SETTINGS
from runtime.scaffold.project import project_file_text
from tests.examples._library import ACTIONS, REPO


def test_init_scaffolds_a_valid_project(run_cli, tmp_path, monkeypatch):
    code, out, err = run_cli("init", str(tmp_path / "shop"), "--events", "300")
    assert code == 0, err
    root = tmp_path / "shop"
    assert "initialised" in out and "tidehouse action register actions/" in out
    for pattern in ("*.sql", "*.test.yaml"):  # the actions and their tests (tidehouse test)
        assert sorted(p.name for p in (root / "actions").glob(pattern)) == sorted(
            p.name for p in ACTIONS.glob(pattern)
        )
    assert sorted(p.name for p in (root / "flows").glob("*.yaml")) == sorted(
        p.name for p in (REPO / "flows").glob("*.yaml")
    )
    for folder in ("events", "orders", "touches"):
        assert list((root / "data" / folder).glob("part-*.json")), folder
    readme = (root / "README.md").read_text()
    assert readme.startswith("# shop")
    assert all(f"`{p.name}`" in readme for p in (root / "flows").glob("*.yaml")), readme  # every flow named
    assert ".tidehouse/" in (root / ".gitignore").read_text()

    from registry.service import Registry
    from runtime.core.config import load_config

    monkeypatch.delenv("TIDEHOUSE_HOME")
    config = load_config(project_dir=root)
    assert config.project_dir == root.resolve() and config.home == (root / ".tidehouse").resolve()
    registry = Registry.open(f"sqlite:///{tmp_path / 'reg.db'}")
    try:
        registry.register_actions([root / "actions"])
        for flow in sorted((root / "flows").glob("*.yaml"), key=lambda p: p.stem == "shop_trends"):
            registry.register_flow(
                flow
            )  # shop_trends reads ecommerce_activity's dwd.events: register in order
    finally:
        registry.close()
    # every scaffolded flow checked at once, before any is registered: shop_trends reads ecommerce_activity's
    # dwd.events (it was "unknown table 'dwd.events'": only registered flows counted)
    monkeypatch.chdir(root)
    code, out, err = run_cli("flow", "validate", "--quick", "flows/")
    assert code == 0, err
    assert out.splitlines() == [f"flows/{p.name}: ok" for p in sorted((root / "flows").glob("*.yaml"))]


def test_init_refuses_an_existing_project_unless_forced(run_cli, tmp_path):
    target = tmp_path / "p"
    assert run_cli("init", str(target), "--no-data")[0] == 0
    assert not (target / "data").exists()
    (target / "flows" / "mine.yaml").write_text("flow: mine\n")
    code, _, err = run_cli("init", str(target), "--no-data")
    assert code == 2 and "TH100" in err and "tidehouse.yaml" in err and "--force" in err
    assert run_cli("init", str(target), "--no-data", "--force")[0] == 0
    assert (target / "flows" / "mine.yaml").read_text() == "flow: mine\n", "user files are kept"


@pytest.mark.parametrize("events", ["0", "-5"])
def test_init_refuses_sample_data_of_no_events_before_writing_anything(run_cli, tmp_path, events):
    """It was an internal error (TH900, a ValueError from the generator) after the project files were
    written: a project without its data, refused by the next init."""
    target = tmp_path / "p"
    code, out, err = run_cli("init", str(target), "--events", events)
    assert (code, out) == (2, "") and err == (
        f"error: --events: the sample data needs at least 1 event, not {events} "
        "(give --events 1 or more, or --no-data for none) [TH100]\n"
    )
    assert not target.exists()
    assert run_cli("init", str(target), "--events", events, "--no-data")[0] == 0


def test_init_in_the_current_directory(run_cli, project_dir):
    code, out, _ = run_cli("init", "--no-data")
    assert code == 0 and (project_dir / "tidehouse.yaml").is_file()
    assert "cd " not in out


def test_project_file_shows_every_setting_at_its_default(tmp_path):
    text = project_file_text()
    for setting in SETTINGS:
        assert setting.description in text, setting.name
        # each key is shown under its description: at its default, else as an example to uncomment
        head, _, leaf = setting.name.partition(".")
        block = text.split(f"\n# {head}:\n", 1)[1].split("\n\n", 1)[0]
        after = block.split(setting.description, 1)[1].split("\n#   # ", 1)[0]
        assert re.search(rf"^#   {leaf}: \S", after, re.M), f"{setting.name}: no key line under its text"
    # uncomment the default lines (not the "e.g." examples): the config must equal the embedded defaults
    nested: dict = {}
    group = None
    for line in text.splitlines():
        if re.match(r"^# [a-z]+:$", line):
            group = line[2:-1]
        elif re.match(r"^#   [a-z_]+: ", line) and "# e.g." not in line:
            nested.setdefault(group, {}).update(yaml.safe_load(line[4:]))
    assert set(nested) == {"spark", "storage", "lake", "tiering", "materializer", "metrics", "logging"}
    (tmp_path / "tidehouse.yaml").write_text(yaml.safe_dump(nested))
    from runtime.core.config import load_config

    config = load_config(home=tmp_path / "h", project_dir=tmp_path)
    assert config.values, "the uncommented settings were read"
    for name, value in config.values.items():
        assert value == next(s.default for s in SETTINGS if s.name == name), name


def test_init_refuses_a_folder_its_enclosing_project_reads(run_cli, project_dir):
    """`tidehouse init actions/x` in a project scaffolded a project into the project's actions/: its next
    `action register actions/` found every action twice (TH224). A project in a folder of its own is fine."""
    assert run_cli("init", "--no-data")[0] == 0
    for folder in ("actions/x", "flows", "data/events/more", ".tidehouse"):
        code, _, err = run_cli("init", folder, "--no-data")
        top = folder.split("/")[0]
        assert code == 2 and err.startswith(
            f"error: {project_dir / folder}: in the {top}/ folder of the project"
        ), err
        assert not (project_dir / folder / "tidehouse.yaml").exists()
    assert run_cli("init", "sub", "--no-data")[0] == 0
    assert run_cli("init", "sub/actions/x", "--no-data")[0] == 2  # the nearest project decides
