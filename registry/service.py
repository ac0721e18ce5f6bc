"""The registry: versioned actions and flows, validated on the way in.

```python
registry = Registry.open("sqlite:///.tidehouse/registry.db")   # any SQLAlchemy URL
registry.register_actions([Path("actions")])                     # -> [ActionVersion(name, version, ...)]
flow = registry.register_flow("flows/shop.yaml")                  # validated; actions pinned
registry.resolve(flow.pins["dws.user_activity"]).spec.sql
```

Actions: identical content (line endings aside) answers the existing version; changed content makes the
next one. Flows: a flow version is its YAML text *and* the action versions it was pinned to, so
registering an unchanged file after one of its actions changed makes a new flow version with new pins.

The registry's own checks need no JVM. The ones that need Spark (the SQL parses, every table analyses) come
in as ``checks=`` (a :class:`~registry.validation.SpecChecks`, e.g. ``materializer.checks.EngineChecks``):
they run after the registry's checks passed and before anything is stored.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from registry.specs import ActionSpec, FlowSpec, did_you_mean, parse_action_text, parse_flow_text
from registry.store import SqlStore, StoredVersion, VersionStore
from registry.validation import ActionCatalog, FlowCheck, SpecChecks, validate_flow_spec
from runtime.core.errors import ErrorCode, Location, TidehouseError, TidehouseErrors
from runtime.core.refs import Ref
from runtime.core.yamlsource import read_text


@dataclass(frozen=True)
class ActionVersion:
    """One registered version of an action."""

    name: str
    version: int
    spec: ActionSpec
    content_hash: str
    created_at: datetime
    text: str = ""
    path: str | None = None
    unchanged: bool = False  # registering it found this identical version already there
    version_count: int | None = None  # in listings: how many versions the action has

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True)
class FlowVersion:
    """One registered version of a flow: the original YAML and the action version of every table."""

    name: str
    version: int
    spec: FlowSpec
    pins: dict[str, str]  # "dws.user_activity" -> "count_by_key@2"
    source_text: str
    path: str | None
    created_at: datetime
    content_hash: str = ""
    unchanged: bool = False
    version_count: int | None = None

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


def _normalize(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").rstrip() + "\n"


def content_hash(text: str, pins: Mapping[str, str] | None = None) -> str:
    digest = hashlib.sha256(_normalize(text).encode("utf-8"))
    if pins is not None:
        digest.update(b"\0pins\0" + json.dumps(dict(sorted(pins.items()))).encode("utf-8"))
    return digest.hexdigest()


def action_files(paths: Iterable[str | Path]) -> list[Path]:
    """Files to register: each file as given, each folder's ``*.sql`` files (recursively, sorted)."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            out += sorted(p for p in path.rglob("*.sql") if p.is_file())
        elif path.is_file():
            out.append(path)
        else:
            what = "not a file or folder" if path.exists() else "no such file or folder"  # /dev/null, a fifo
            raise TidehouseError(ErrorCode.SPEC_BAD_VALUE, what, location=Location(str(path)))
    return out


class _Versions(Mapping):
    """name -> {version: ActionSpec}, loaded from the store on first access of each name."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self._names = None
        self._loaded: dict[str, dict[int, ActionSpec]] = {}

    def _all_names(self) -> list[str]:
        if self._names is None:
            self._names = [v.name for v in self._registry.store.latest("action")]
        return self._names

    def __getitem__(self, name: str) -> dict[int, ActionSpec]:
        if name not in self._loaded:
            stored = self._registry.store.versions("action", name)
            if not stored:
                raise KeyError(name)
            self._loaded[name] = {s.version: self._registry._action_spec(s) for s in stored}
        return self._loaded[name]

    def __iter__(self):
        return iter(self._all_names())

    def __len__(self) -> int:
        return len(self._all_names())


class Registry:
    """Versioned actions and flows over a :class:`~registry.store.VersionStore`."""

    def __init__(self, store: VersionStore) -> None:
        self.store = store
        self._specs: dict[tuple[str, str, int], object] = {}  # versions are immutable: parse each once

    @classmethod
    def open(cls, url: str) -> Registry:
        """Open (and create if needed) the registry at a SQLAlchemy URL."""
        return cls(SqlStore.open(url))

    def close(self) -> None:
        self.store.close()

    # -- actions -----------------------------------------------------------------------------------
    def register_action(
        self, path_or_text: str | Path, *, path: str | None = None, checks: SpecChecks | None = None
    ) -> ActionVersion:
        """Register one action from a file, or from its text (anything containing ``/*---``)."""
        if isinstance(path_or_text, str) and "/*---" in path_or_text:
            text, where = path_or_text, path or "<string>"
        else:
            where = str(path_or_text)
            text = read_text(where)
        spec = parse_action_text(text, where)
        if checks is not None:
            TidehouseErrors.raise_if_any(checks.check_actions([spec]))
        return self._store_action(spec, text)

    def register_actions(
        self,
        paths: Sequence[str | Path],
        *,
        checks: SpecChecks | None = None,
    ) -> list[ActionVersion]:
        """Register action files and folders. Every file is parsed first, and given to ``checks`` unless it is
        its action's latest version already (checked when it was stored): any error registers nothing."""
        parsed: list[tuple[ActionSpec, str]] = []
        errors: list[TidehouseError] = []
        first_file: dict[str, str] = {}
        for file in action_files(paths):
            try:
                text = read_text(file)
                spec = parse_action_text(text, str(file))
            except TidehouseError as exc:
                errors += TidehouseErrors.listed(exc)
                continue
            if spec.name in first_file:
                errors.append(
                    TidehouseError(
                        ErrorCode.ACTION_DUPLICATE,
                        f"action '{spec.name}' is also defined in {first_file[spec.name]}",
                        location=Location(str(file), path="name"),
                        hint="give each action its own name",
                    )
                )
                continue
            first_file[spec.name] = str(file)
            parsed.append((spec, text))
        TidehouseErrors.raise_if_any(errors)
        if checks is not None:
            TidehouseErrors.raise_if_any(
                checks.check_actions([spec for spec, text in parsed if not self._is_latest(spec.name, text)])
            )
        return [self._store_action(spec, text) for spec, text in parsed]

    def _is_latest(self, name: str, text: str) -> bool:
        latest = self.store.get("action", name)
        return latest is not None and latest.content_hash == content_hash(text)

    def _store_action(self, spec: ActionSpec, text: str) -> ActionVersion:
        if spec.path is not None:  # keep where it came from, independent of the current directory
            spec = spec.model_copy(update={"path": str(Path(spec.path).resolve())})
        stored = self.store.put("action", spec.name, content_hash(text), text, spec.path)
        return self._action_version(stored, spec=spec if stored.created else None)

    def _parsed(self, kind: str, stored: StoredVersion, parse) -> Any:
        """The spec of a stored version, parsed once (versions are immutable)."""
        key = (kind, stored.name, stored.version)
        if key not in self._specs:
            self._specs[key] = parse(stored.text, stored.path or f"<{kind} {stored.name}@{stored.version}>")
        return self._specs[key]

    def _action_spec(self, stored: StoredVersion) -> ActionSpec:
        return self._parsed("action", stored, lambda text, where: parse_action_text(text, where, stored=True))

    def _action_version(self, stored: StoredVersion, spec: ActionSpec | None = None) -> ActionVersion:
        if spec is not None:
            self._specs.setdefault(("action", stored.name, stored.version), spec)
        return ActionVersion(
            name=stored.name,
            version=stored.version,
            spec=spec or self._action_spec(stored),
            content_hash=stored.content_hash,
            created_at=stored.created_at,
            text=stored.text,
            path=stored.path,
            unchanged=not stored.created,
            version_count=stored.version_count,
        )

    _UNKNOWN: ClassVar[dict[str, tuple[ErrorCode, ErrorCode]]] = {
        "action": (ErrorCode.ACTION_UNKNOWN, ErrorCode.ACTION_VERSION_UNKNOWN),
        "flow": (ErrorCode.FLOW_UNKNOWN, ErrorCode.FLOW_VERSION_UNKNOWN),
    }

    def _stored(self, kind: str, name: str, version: int | None) -> StoredVersion:
        """A stored action or flow version (the latest when ``version`` is None); unknown ones raise with a
        'did you mean' (names) or the registered versions (version numbers)."""
        stored = self.store.get(kind, name, version)
        if stored is not None:
            return stored
        unknown_name, unknown_version = self._UNKNOWN[kind]
        if version is not None and self.store.get(kind, name) is not None:
            versions = ", ".join(str(v.version) for v in self.store.versions(kind, name))
            raise TidehouseError(
                unknown_version,
                f"{kind} '{name}' has no version {version}",
                hint=f"registered versions: {versions}",
            )
        names = [v.name for v in self.store.latest(kind)]
        raise TidehouseError(
            unknown_name,
            f"unknown {kind} '{name}'",
            hint=did_you_mean(name, names) or f"see `tidehouse {kind} list`",
        )

    def get_action(self, name: str, version: int | None = None) -> ActionVersion:
        """An action version (the latest when ``version`` is None); unknown ones raise with a 'did you
        mean'."""
        return self._action_version(self._stored("action", name, version))

    def resolve(self, ref: str) -> ActionVersion:
        """``"name@3"`` or ``"name"`` (latest) -> the action version."""
        ref = Ref.parse(ref)
        return self.get_action(ref.name, ref.version)

    def list_actions(self) -> list[ActionVersion]:
        """The latest version of every action, with ``version_count``."""
        return [self._action_version(s) for s in self.store.latest("action")]

    def action_versions(self, name: str) -> list[ActionVersion]:
        self.get_action(name)  # raises when unknown
        return [self._action_version(s) for s in self.store.versions("action", name)]

    def catalog(self, local: Iterable[ActionSpec] = ()) -> ActionCatalog:
        """What flows are validated against: registered versions plus optional unregistered ``local``
        specs."""
        return ActionCatalog(_Versions(self), {spec.name: spec for spec in local})

    # -- flows -------------------------------------------------------------------------------------
    def _flow_spec(self, stored: StoredVersion) -> FlowSpec:
        return self._parsed("flow", stored, lambda text, where: parse_flow_text(text, where, stored=True))

    def _flow_version(self, stored: StoredVersion, spec: FlowSpec | None = None) -> FlowVersion:
        return FlowVersion(
            name=stored.name,
            version=stored.version,
            spec=spec or self._flow_spec(stored),
            pins=dict(stored.pins),
            source_text=stored.text,
            path=stored.path,
            created_at=stored.created_at,
            content_hash=stored.content_hash,
            unchanged=not stored.created,
            version_count=stored.version_count,
        )

    def other_flows(
        self, except_name: str | None = None, alongside: Mapping[str, FlowSpec] = {}
    ) -> dict[str, FlowSpec]:
        """The latest spec of every registered flow (but ``except_name``), to check tables across flows;
        ``alongside``: flows checked together with it (files), each in place of its registered versions."""
        flows = {s.name: self._flow_spec(s) for s in self.store.latest("flow")}
        flows.update(alongside)
        flows.pop(except_name, None)
        return flows

    def check_flow(
        self,
        spec: FlowSpec,
        *,
        local_actions: Iterable[ActionSpec] = (),
        pins: Mapping[str, str] | None = None,
        alongside: Mapping[str, FlowSpec] = {},
    ) -> FlowCheck:
        """All semantic problems of a parsed flow (not raised) and the action each table resolves to;
        ``alongside``: other flows checked with it, whose tables it may read (see :meth:`other_flows`)."""
        others = self.other_flows(spec.flow, alongside)
        return validate_flow_spec(spec, self.catalog(local_actions), others, pins)

    def _checked(self, spec: FlowSpec, checks: SpecChecks | None, **kwargs) -> FlowCheck:
        """The registry's checks of a flow, then (only when they pass) ``checks``; raises every problem."""
        check = self.check_flow(spec, **kwargs)
        TidehouseErrors.raise_if_any(check.errors)
        if checks is not None:
            TidehouseErrors.raise_if_any(checks.check_flow(spec, check.resolved))
        return check

    def validate_flow(
        self,
        path: str | Path,
        *,
        text: str | None = None,
        local_actions: Iterable[ActionSpec] = (),
        checks: SpecChecks | None = None,
        alongside: Mapping[str, FlowSpec] = {},
    ) -> FlowSpec:
        """Parse and validate a flow file (or ``text``); raises every problem found at once. ``alongside``:
        flows (by name) validated together with it, as if registered: it may read their tables."""
        where = str(path)
        spec = parse_flow_text(read_text(where) if text is None else text, where)
        self._checked(spec, checks, local_actions=local_actions, alongside=alongside)
        return spec

    def validate_registered_flow(
        self, name: str, version: int | None = None, *, checks: SpecChecks | None = None
    ) -> FlowVersion:
        """Re-check a registered flow against today's registry (its pins, the other flows)."""
        flow = self.get_flow(name, version)
        self._checked(flow.spec, checks, pins=flow.pins)
        return flow

    def register_flow(
        self, path: str | Path, *, text: str | None = None, checks: SpecChecks | None = None
    ) -> FlowVersion:
        """Validate (with ``checks`` too, when given) and register a flow, pinning each unpinned action to its
        latest version."""
        where = str(path)
        text = read_text(where) if text is None else text
        spec = parse_flow_text(text, where)
        check = self._checked(spec, checks)
        pins = {qualified: res.ref for qualified, res in check.resolved.items()}
        stored_path = None if where.startswith("<") else str(Path(where).resolve())
        stored = self.store.put("flow", spec.flow, content_hash(text, pins), text, stored_path, pins)
        return self._flow_version(stored, spec=spec if stored.created else None)

    def get_flow(self, name: str, version: int | None = None) -> FlowVersion:
        return self._flow_version(self._stored("flow", name, version))

    def resolve_flow(self, ref: str) -> FlowVersion:
        ref = Ref.parse(ref, "flow")
        return self.get_flow(ref.name, ref.version)

    def list_flows(self) -> list[FlowVersion]:
        """The latest version of every flow, with ``version_count``."""
        return [self._flow_version(s) for s in self.store.latest("flow")]

    def flow_versions(self, name: str) -> list[FlowVersion]:
        self.get_flow(name)
        return [self._flow_version(s) for s in self.store.versions("flow", name)]

    def producer_of(self, table: str) -> FlowVersion | None:
        """The registered flow that produces ``layer.table`` (latest versions), if any."""
        for flow in self.list_flows():
            if any(q == table for q, _ in flow.spec.tables()):
                return flow
        return None
