"""The home directory and the project file.

Home: ``--home DIR``, else ``$TIDEHOUSE_HOME``, else ``.tidehouse/`` in the project directory. It holds the
registry database, the hot storage, the Iceberg catalog and warehouse, and the streaming checkpoints.
The project directory is the one holding ``tidehouse.yaml`` (searched upwards from the current directory),
else the current directory.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from runtime.errors import ErrorCode, Location, TidehouseError
from runtime.settings import SETTINGS, SETTINGS_BY_NAME

PROJECT_FILE = "tidehouse.yaml"
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# values this process substituted from ${ENV} into the project file: redact() hides them in any output
_LOADED_SECRETS: set[str] = set()
_MIN_SECRET_LEN = 4  # shorter values (a port, "true") are not worth garbling every message for


def redact(text: str) -> str:
    """``text`` with every value this process read from ``${ENV}`` in the project file replaced by ``****``.

    The CLI passes every error message, traceback (``--debug``) and ``tidehouse info`` line through it.
    """
    for secret in sorted(_LOADED_SECRETS, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, "****")
    return text


def find_project_dir(start: Path | None = None) -> Path:
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / PROJECT_FILE).is_file():
            return candidate
    return here


def _expand_env(value: Any, where: str, secret_names: set[str]) -> Any:
    if isinstance(value, str):
        def replace(match: re.Match) -> str:
            name, default = match.group(1), match.group(2)
            secret_names.add(where)
            if name in os.environ:
                if len(os.environ[name]) >= _MIN_SECRET_LEN:
                    _LOADED_SECRETS.add(os.environ[name])
                return os.environ[name]
            if default is not None:
                return default
            raise TidehouseError(
                ErrorCode.CONFIG_MISSING_ENV,
                f"environment variable {name} is not set",
                location=Location(PROJECT_FILE, path=where),
                hint=f"export {name}=... or write ${{{name}:-default}}",
            )

        return _ENV_REF.sub(replace, value)
    if isinstance(value, dict):
        return {k: _expand_env(v, f"{where}.{k}", secret_names) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, where, secret_names) for v in value]
    return value


def _flatten(raw: Mapping[str, Any], file: str) -> dict[str, Any]:
    """Nested project-file keys -> dotted setting names; unknown keys are errors."""
    out: dict[str, Any] = {}

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for key, value in node.items():
            name = f"{prefix}{key}"
            if name in SETTINGS_BY_NAME:
                out[name] = value
            elif isinstance(value, dict) and any(s.startswith(name + ".") for s in SETTINGS_BY_NAME):
                walk(value, name + ".")
            elif name == "home":
                out[name] = value
            else:
                raise TidehouseError(
                    ErrorCode.CONFIG_INVALID,
                    f"unknown setting '{name}'",
                    location=Location(file, path=name),
                    hint="see docs/configuration.md for the settings",
                )

    walk(raw, "")
    return out


@dataclass(frozen=True)
class Config:
    """Resolved configuration: where things live and every setting's value."""

    home: Path
    project_dir: Path
    values: Mapping[str, Any] = field(default_factory=dict)
    from_env: frozenset[str] = frozenset()  # settings whose value came from ${ENV}

    def get(self, name: str) -> Any:
        setting = SETTINGS_BY_NAME[name]
        return self.values.get(name, setting.default)

    # -- locations --------------------------------------------------------------------------------
    @property
    def storage_root(self) -> str:
        return self.get("storage.root") or str(self.home / "hot")

    @property
    def checkpoint_root(self) -> str:
        return self.get("checkpoints.root") or str(self.home / "checkpoints")

    @property
    def registry_url(self) -> str:
        return self.get("registry.url") or f"sqlite:///{self.home / 'registry.db'}"

    @property
    def run_dir(self) -> Path:
        """Locks, pid files, status snapshots of running flows (always local)."""
        return self.home / "run"

    @property
    def lake_catalog_properties(self) -> dict[str, Any]:
        props = dict(self.get("lake.catalog"))
        if not props:
            lake = self.home / "lake"
            props = {
                "type": "sql",
                "uri": f"sqlite:///{lake / 'catalog.db'}",
                "warehouse": (lake / "warehouse").as_uri(),
            }
        return props

    def __repr__(self) -> str:  # never the raw values: a traceback, log line or test failure may print it
        return f"Config(home={str(self.home)!r}, project_dir={str(self.project_dir)!r}, values={self.masked()!r})"

    def masked(self) -> dict[str, Any]:
        """Every setting with secrets masked, for ``tidehouse info``."""
        shown: dict[str, Any] = {}
        for setting in SETTINGS:
            value = self.get(setting.name)
            if setting.name in self.from_env or any(n.startswith(setting.name + ".") for n in self.from_env):
                value = _mask(value, force=True)
            elif setting.secret:
                value = _mask(value)
            shown[setting.name] = value
        return shown


_SECRET_KEYS = re.compile(r"(password|secret|token|credential|key)", re.I)


def _mask(value: Any, force: bool = False) -> Any:
    if isinstance(value, dict):
        return {k: ("****" if (force or _SECRET_KEYS.search(k)) and v else _mask(v)) for k, v in value.items()}
    if isinstance(value, str):
        if force:
            return "****"
        return re.sub(r"(://[^:/@]+:)[^@]+@", r"\1****@", value)  # password inside a URL
    return value


def load_config(home: str | os.PathLike | None = None, project_dir: str | os.PathLike | None = None) -> Config:
    """Read ``tidehouse.yaml`` (if any) and resolve the home directory."""
    pdir = Path(project_dir).resolve() if project_dir else find_project_dir()
    values: dict[str, Any] = {}
    from_env: set[str] = set()
    path = pdir / PROJECT_FILE
    if path.is_file():
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise TidehouseError(
                ErrorCode.CONFIG_INVALID,
                f"not valid YAML: {getattr(exc, 'problem', exc)}",
                location=Location(str(path), mark.line + 1 if mark else None, mark.column + 1 if mark else None),
            ) from exc
        if not isinstance(raw, dict):
            raise TidehouseError(ErrorCode.CONFIG_INVALID, "the project file must be a mapping",
                                 location=Location(str(path)))
        flat = _flatten(raw, str(path))
        for name, value in flat.items():
            env_hits: set[str] = set()
            value = _expand_env(value, name, env_hits)
            from_env |= env_hits
            if name == "home":
                values[name] = value
                continue
            try:
                values[name] = SETTINGS_BY_NAME[name].parse(value)
            except (ValueError, TypeError) as exc:
                raise TidehouseError(ErrorCode.CONFIG_INVALID, str(exc),
                                     location=Location(str(path), path=name)) from exc
    chosen = home or os.environ.get("TIDEHOUSE_HOME") or values.pop("home", None) or ".tidehouse"
    values.pop("home", None)
    home_path = Path(chosen)
    if not home_path.is_absolute():
        home_path = (pdir / home_path) if not home else home_path.resolve()
    return Config(home=home_path.resolve(), project_dir=pdir, values=values, from_env=frozenset(from_env))
