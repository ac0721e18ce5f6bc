"""What a file is by its name, for the error of a file given to the wrong command.

``tidehouse flow validate actions/top_n.sql`` read the SQL as YAML ("invalid YAML: mapping values are not
allowed here"), ``action register flows/shop.yaml`` said an action starts with a header. A file that does not
parse as what the command reads, and whose name says it is another kind of Tidehouse file, is named as that
kind with the command that reads it. A file that parses is never refused for its name.
"""

from __future__ import annotations

from pathlib import PurePath

from registry.specs.actiontest import TEST_SUFFIX
from runtime.core.errors import ErrorCode, Location, TidehouseError

# kind -> (what it is, the command that reads it)
_KINDS = {
    "project": ("the project's settings file", "flows are the .yaml files under flows/"),
    "test": ("an action test file", "run it with `tidehouse test`"),
    "action": ("an action file", "register it with `tidehouse action register`"),
    "flow": (
        "a flow file",
        "check it with `tidehouse flow validate`, register it with `tidehouse flow register`",
    ),
}


def kind_of(path: str) -> str | None:
    """``project`` (tidehouse.yaml), ``test`` (*.test.yaml), ``action`` (*.sql), ``flow`` (another *.yaml or
    *.yml), or None for any other name."""
    name = PurePath(path).name.lower()
    if name == "tidehouse.yaml":
        return "project"
    if name.endswith(TEST_SUFFIX):
        return "test"
    if name.endswith(".sql"):
        return "action"
    return "flow" if name.endswith((".yaml", ".yml")) else None


def other_kind(path: str, expected: str) -> TidehouseError | None:
    """The error for a file ``expected`` to be a flow or an action that did not parse as one, when its name
    says it is another kind of file; None when it does not."""
    kind = kind_of(path)
    if kind is None or kind == expected:
        return None
    what, hint = _KINDS[kind]
    return TidehouseError(
        ErrorCode.SPEC_BAD_VALUE, f"{what}, not {_KINDS[expected][0]}", location=Location(path), hint=hint
    )
