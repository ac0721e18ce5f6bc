"""A project's action files as they are on disk, next to what the registry holds.

``local_actions`` parses a folder's actions without registering them (``flow validate PATH`` checks a flow
against them). ``edited_actions`` names the tables of a registered flow whose action file in that folder is
no longer the version the flow pins: a run of the flow by name runs the pinned version, not the file;
``edited_flow`` says the same of the flow's own file. ``flow_files_alongside`` parses the flow files validated
together with one (``flow validate flows/``), whose tables it may read before any of them is registered.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from registry.service import FlowVersion, Registry, action_files, content_hash
from registry.specs import ActionSpec, FlowSpec, parse_action, parse_action_text, parse_flow
from runtime.core.errors import ErrorCode, Location, TidehouseError, TidehouseErrors
from runtime.core.refs import Ref
from runtime.core.yamlsource import read_text


def local_actions(folder: Path, *, explicit: bool) -> list[ActionSpec]:
    """The actions of a folder, parsed but not registered, so a flow can be checked before it is triggered;
    every file's problems raise together. A missing folder holds none, unless ``explicit`` (the user named
    it)."""
    if not folder.is_dir():
        if explicit:
            raise TidehouseError(
                ErrorCode.SPEC_BAD_VALUE, f"no such folder: {folder}", location=Location(str(folder))
            )
        return []
    specs, errors = [], []
    for file in action_files([folder]):
        try:
            specs.append(parse_action(file))
        except TidehouseError as exc:
            errors += TidehouseErrors.listed(exc)
    TidehouseErrors.raise_if_any(errors)
    return specs


@dataclass(frozen=True)
class EditedAction:
    """A table whose action file is not the version its flow pins."""

    table: str
    pinned: str  # the version the flow runs, "top_n@1"
    file: Path  # the action's file, as the folder was given


def edited_actions(registry: Registry, version: FlowVersion, folder: Path) -> list[EditedAction]:
    """The tables of ``version`` whose action ``folder`` holds with other content than the pinned version
    (line endings aside, as registering compares). A table that names its version in the flow file
    (``top_n@1``) is left out: that pin is the author's. A file that does not parse names no action."""
    files: dict[str, tuple[Path, str]] = {}
    for file in action_files([folder]) if folder.is_dir() else []:
        with contextlib.suppress(TidehouseError, OSError):
            text = read_text(file)
            files.setdefault(parse_action_text(text, str(file)).name, (file, text))
    out = []
    for table, spec in version.spec.tables():
        named, pinned = Ref.parse(spec.action), version.pins.get(table)
        if named.version is not None or pinned is None or named.name not in files:
            continue
        file, text = files[named.name]
        ref = Ref.parse(pinned)
        if content_hash(text) != registry.get_action(ref.name, ref.version).content_hash:
            out.append(EditedAction(table, pinned, file))
    return out


def edited_flow(version: FlowVersion) -> Path | None:
    """The file ``version`` was registered from, when it now holds another flow text (line endings aside, as
    registering compares); None when it is the same, gone or unreadable."""
    if not version.path:
        return None
    try:
        text = read_text(version.path)
    except (TidehouseError, OSError):
        return None
    return None if content_hash(text) == content_hash(version.source_text) else Path(version.path)


def flow_files_alongside(path: Path, others: Iterable[str | os.PathLike]) -> dict[str, FlowSpec]:
    """The flows (by name) of the files ``others`` but ``path``; a file that does not parse is left out (its
    own validation reports it), so a flow reading its tables reports them as unknown."""
    out: dict[str, FlowSpec] = {}
    for other in others:
        if Path(other).resolve() == Path(path).resolve():
            continue
        with contextlib.suppress(TidehouseError):
            spec = parse_flow(other)
            out.setdefault(spec.flow, spec)
    return out
