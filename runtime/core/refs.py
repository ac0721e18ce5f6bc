"""How users name registered things and flows: ``name``, ``name@N``, or a flow's YAML file.

Decided here once, for the CLI, the façade, the registry and the materializer alike: a flow given on the
command line is a PATH when it ends in ``.yaml``/``.yml`` or names an existing file, else ``NAME[@N]``; an
existing folder is refused with its flow files named (``flow validate`` takes a folder for its flow files).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from runtime.core.errors import ErrorCode, TidehouseError

REF_RE = re.compile(
    r"^([a-z_][a-z0-9_]*)(?:@([1-9][0-9]*))?\Z"
)  # \Z, not $ (which allows a trailing newline)
YAML_SUFFIXES = (".yaml", ".yml")


def flow_files(folder: Path) -> list[Path]:
    """The YAML files in a folder and its subfolders, in name order."""
    return sorted(p for p in folder.rglob("*") if p.suffix in YAML_SUFFIXES and p.is_file())


@dataclass(frozen=True)
class Ref:
    """A registered action or flow: its name and a version (None: the latest)."""

    name: str
    version: int | None = None

    @classmethod
    def parse(cls, text: str, what: str = "action") -> Ref:
        match = REF_RE.match(text or "") if isinstance(text, str) else None
        if not match:
            raise TidehouseError(
                ErrorCode.SPEC_BAD_IDENTIFIER,
                f"{text!r} is not {'an' if what[:1] in 'aeiou' else 'a'} {what} reference: write 'name' or "
                "'name@N' (N = a version number from 1)",
            )
        return cls(match.group(1), int(match.group(2)) if match.group(2) else None)

    def __str__(self) -> str:
        return self.name if self.version is None else f"{self.name}@{self.version}"


@dataclass(frozen=True)
class FlowRef:
    """A flow as the user names it: a YAML file (``path``) or a registered flow (``ref``)."""

    path: Path | None = None
    ref: Ref | None = None

    @classmethod
    def parse(cls, text: str | os.PathLike) -> FlowRef:
        raw = str(text)
        path = Path(raw)
        if path.is_dir():
            files = flow_files(path)
            raise TidehouseError(
                ErrorCode.FLOW_UNKNOWN,
                f"{raw} is a folder, not a flow file",
                hint=(
                    f"name one of its flow files: {', '.join(str(f) for f in files[:3])}"
                    f"{', ...' if len(files) > 3 else ''}"
                    if files
                    else "it holds no .yaml or .yml file: give a path to a flow YAML file"
                ),
            )
        if path.suffix in YAML_SUFFIXES or path.is_file() or os.sep in raw:
            if not path.is_file():
                raise TidehouseError(
                    ErrorCode.FLOW_UNKNOWN,
                    f"no flow file {raw}",
                    hint="give a path to a flow YAML file or the name of a registered flow",
                )
            return cls(path=path)
        if not REF_RE.match(raw):
            raise TidehouseError(
                ErrorCode.FLOW_UNKNOWN,
                f"{raw!r} is neither a flow file nor a flow name",
                hint="a flow file ends in .yaml; a registered flow is NAME or NAME@N",
            )
        return cls(ref=Ref.parse(raw, "flow"))

    @classmethod
    def targets(cls, texts: Iterable[str]) -> list[str]:
        """Command-line flows with each folder replaced by its flow files (``flow validate flows/``); a folder
        without any is an error."""
        out: list[str] = []
        for raw in texts:
            if not Path(raw).is_dir():
                out.append(raw)
                continue
            files = flow_files(Path(raw))
            if not files:
                raise TidehouseError(
                    ErrorCode.FLOW_UNKNOWN,
                    f"no flow file in the folder {raw}",
                    hint="flow files end in .yaml or .yml",
                )
            out += [str(f) for f in files]
        return out

    @property
    def is_path(self) -> bool:
        return self.path is not None

    def __str__(self) -> str:
        return str(self.path) if self.path is not None else str(self.ref)
