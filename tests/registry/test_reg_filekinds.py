"""A file given to the wrong command is named for what it is (registry/specs/filekinds.py): it was read as
what the command reads ("invalid YAML: mapping values are not allowed here" for an action's SQL)."""

from __future__ import annotations

import pytest

from registry.specs import parse_action, parse_flow
from registry.specs.filekinds import kind_of
from runtime.core.errors import TidehouseError
from tests.registry._reg_helpers import ACTIONS, BASE_FLOW, dedent

TEST_FILE = "inputs:\n  rows: {schema: 'k string'}\ncases:\n  one: {given: {rows: []}, expect: []}\n"


@pytest.mark.parametrize(
    "name,kind",
    [
        ("tidehouse.yaml", "project"),
        ("x/top_n.test.yaml", "test"),
        ("a.SQL", "action"),
        ("flows/shop.yml", "flow"),
        ("shop.yaml", "flow"),
        ("notes.txt", None),
        ("<string>", None),
    ],
)
def test_kind_of(name, kind):
    assert kind_of(name) == kind


def test_a_file_of_another_kind_is_named_as_such(tmp_path):
    files = {
        "top_n.sql": dedent(ACTIONS["clean"]),
        "top_n.test.yaml": TEST_FILE,
        "shop.yaml": BASE_FLOW,
        "tidehouse.yaml": "# settings\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    refused = {
        (parse_flow, "top_n.sql"): "an action file, not a flow file (register it with `tidehouse action",
        (parse_flow, "top_n.test.yaml"): "an action test file, not a flow file (run it with `tidehouse",
        (parse_flow, "tidehouse.yaml"): "the project's settings file, not a flow file",
        (parse_action, "top_n.test.yaml"): "an action test file, not an action file",
        (parse_action, "shop.yaml"): "a flow file, not an action file (check it with `tidehouse flow",
    }
    for (parse, name), said in refused.items():
        with pytest.raises(TidehouseError) as err:
            parse(tmp_path / name)
        assert str(err.value).startswith(f"{tmp_path / name}: {said}"), str(err.value)
        assert err.value.code.value == "TH213"
    assert parse_flow(tmp_path / "shop.yaml").flow == "shop"  # each kind still reads its own files
    assert parse_action(tmp_path / "top_n.sql").name == "clean"


def test_a_file_that_parses_is_never_refused_for_its_name(tmp_path):
    """The name only words the error of a file that does not parse as what the command reads."""
    (tmp_path / "odd.test.yaml").write_text(BASE_FLOW)
    (tmp_path / "odd.yaml").write_text(dedent(ACTIONS["clean"]))
    assert parse_flow(tmp_path / "odd.test.yaml").flow == "shop"
    assert parse_action(tmp_path / "odd.yaml").name == "clean"
    (tmp_path / "broken.yaml").write_text("flow: shop\nlayers: [\n")  # a flow of its own kind: its error
    with pytest.raises(TidehouseError) as err:
        parse_flow(tmp_path / "broken.yaml")
    assert "invalid YAML" in str(err.value) or "TH200" in str(err.value), str(err.value)
