"""The home directory and the project file.

Home: ``--home DIR``, else ``$TIDEHOUSE_HOME``, else ``home:`` in the project file, else ``.tidehouse/`` in
the project directory. It holds the registry database, the hot storage, the Iceberg catalog and warehouse,
and the streaming checkpoints. The project directory is the one holding ``tidehouse.yaml`` (searched upwards
from the current directory), else the current directory.

The project file is read with the strict loader of flows (:mod:`runtime.core.yamlsource`), so each of its
errors reads ``tidehouse.yaml:LINE:COL: setting.name: message [THxxx]``. An empty file (or comments only) sets
nothing. A value is never silently replaced: an empty string, a nested or null Spark conf or catalog property
is an error, not "the default".
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.core.errors import ErrorCode, Location, TidehouseError, TidehouseErrors
from runtime.core.settings import HOME, SETTINGS, SETTINGS_BY_NAME
from runtime.core.uris import local_path, scheme_of
from runtime.core.yamlsource import Document, load_yaml, read_text

PROJECT_FILE = "tidehouse.yaml"
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# values this process substituted from ${ENV} into the project file: redact() hides them in any output
_LOADED_SECRETS: set[str] = set()
_MIN_SECRET_LEN = 4  # shorter values (a port, "true") are not worth garbling every message for


MASK = "****"  # what every hidden secret reads as


def redact(value: Any) -> Any:
    """``value`` (a string, or mappings and lists of them) with every value this process read from ``${ENV}``
    in the project file replaced by ``****``, wherever it sits (inside a URI or a path too).

    The CLI passes every error message, traceback (``--debug``) and the ``tidehouse info`` report through it.
    """
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if not isinstance(value, str):
        return value
    for secret in sorted(_LOADED_SECRETS, key=len, reverse=True):
        if secret in value:
            value = value.replace(secret, MASK)
    return value


def find_project_dir(start: Path | None = None) -> Path:
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / PROJECT_FILE).is_file():
            return candidate
    return here


def _expand_env(value: Any, ypath: tuple, where: str, doc: Document, secret_names: set[str]) -> Any:
    """``${NAME}`` / ``${NAME:-default}`` in every string of ``value`` (at YAML path ``ypath``);
    ``secret_names`` collects ``where`` (the dotted setting, plus the key inside a mapping setting) of each
    expanded value."""
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
                location=doc.location(ypath),
                hint=f"export {name}=... or write ${{{name}:-default}}",
            )

        return _ENV_REF.sub(replace, value)
    if isinstance(value, dict):
        return {k: _expand_env(v, ypath + (k,), f"{where}.{k}", doc, secret_names) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, ypath + (i,), where, doc, secret_names) for i, v in enumerate(value)]
    return value


def _closest_setting(name: str) -> str | None:
    close = difflib.get_close_matches(name, [*SETTINGS_BY_NAME, "home"], n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else "see docs/configuration.md for the settings"


def _flatten(doc: Document) -> tuple[dict[str, tuple], list[TidehouseError]]:
    """Nested project-file keys -> ``{dotted setting name: YAML path}``, and the errors found on the way:
    unknown keys, a group given a scalar, one setting written twice (nested and dotted)."""
    out: dict[str, tuple] = {}
    errors: list[TidehouseError] = []

    def walk(node: Mapping[Any, Any], prefix: str, ypath: tuple) -> None:
        for key, value in node.items():
            name, kpath = f"{prefix}{key}", ypath + (key,)
            is_group = any(s.startswith(name + ".") for s in SETTINGS_BY_NAME)
            if name in SETTINGS_BY_NAME or name == "home":
                if name in out:
                    first = doc.location(out[name], key=True)
                    errors.append(
                        TidehouseError(
                            ErrorCode.CONFIG_INVALID,
                            f"setting '{name}' is also set at line {first.line}",
                            location=doc.location(kpath, key=True, shown=(name,)),
                            hint="remove one of them",
                        )
                    )
                    continue
                out[name] = kpath
            elif is_group and isinstance(value, dict):
                walk(value, name + ".", kpath)
            elif is_group:
                members = ", ".join(s for s in SETTINGS_BY_NAME if s.startswith(name + "."))
                errors.append(
                    TidehouseError(
                        ErrorCode.CONFIG_INVALID,
                        f"'{name}' is a group of settings: expected a mapping, got {value!r}",
                        location=doc.location(kpath, shown=(name,)),
                        hint=f"its settings: {members}",
                    )
                )
            else:
                errors.append(
                    TidehouseError(
                        ErrorCode.CONFIG_INVALID,
                        f"unknown setting '{name}'",
                        location=doc.location(kpath, key=True, shown=(name,)),
                        hint=_closest_setting(name),
                    )
                )

    walk(doc.data, "", ())
    return out, errors


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
        """The hot storage's root: a local path (relative settings resolve against the project directory), or
        an ``s3://`` URI as given (the object-store hot storage)."""
        root = self.get("storage.root")  # the parser refuses "" and unsupported schemes
        if root is not None and scheme_of(root) == "s3":
            return root
        return str(self.home / "hot") if root is None else str(local_path(root, base=self.project_dir))

    @property
    def checkpoint_root(self) -> str:
        """The streaming checkpoints' root as a local path (relative to the project directory)."""
        root = self.get("checkpoints.root")
        return (
            str(self.home / "checkpoints") if root is None else str(local_path(root, base=self.project_dir))
        )

    @property
    def registry_url(self) -> str:
        url = self.get("registry.url")
        return f"sqlite:///{self.home / 'registry.db'}" if url is None else url

    @property
    def run_dir(self) -> Path:
        """Locks, pid files, status snapshots of running flows (always local)."""
        return self.home / "run"

    @property
    def lake_catalog_properties(self) -> dict[str, Any]:
        props = dict(self.get("lake.catalog"))
        if not props:  # {} is the setting's default, written out or not (the scaffolded file shows it)
            lake = self.home / "lake"
            props = {
                "type": "sql",
                "uri": f"sqlite:///{lake / 'catalog.db'}",
                "warehouse": (lake / "warehouse").as_uri(),
            }
        return props

    def __repr__(self) -> str:  # never the raw values: a traceback, log line or test failure may print it
        return (
            f"Config(home={str(self.home)!r}, project_dir={str(self.project_dir)!r}, "
            f"values={self.masked()!r})"
        )

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


_SECRET_KEYS = re.compile(r"(password|secret|token|credential|key)", re.IGNORECASE)


def mask_catalog(properties: Mapping[str, Any]) -> dict[str, Any]:
    """Catalog properties with the value of every secret-looking key (``token``, ``credential``,
    ``s3.secret-access-key``...) and every password inside a URI masked: what ``tidehouse info`` shows."""
    return _mask(dict(properties))


def _mask(value: Any, force: bool = False) -> Any:
    """Secrets by their shape: the value of a secret-looking key, a password inside a URL (everything with
    ``force``). :func:`redact` hides them by their value; the two are all the masking there is."""
    if isinstance(value, dict):
        return {k: (MASK if (force or _SECRET_KEYS.search(k)) and v else _mask(v)) for k, v in value.items()}
    if isinstance(value, str):
        if force:
            return MASK
        return re.sub(r"(://[^:/@]+:)[^@]+@", rf"\1{MASK}@", value)  # password inside a URL
    return value


def load_config(
    home: str | os.PathLike | None = None, project_dir: str | os.PathLike | None = None
) -> Config:
    """Read ``tidehouse.yaml`` (if any) and resolve the home directory."""
    pdir = Path(project_dir).resolve() if project_dir else find_project_dir()
    path = pdir / PROJECT_FILE
    values, from_env = read_project_file(path) if os.path.lexists(path) else ({}, set())
    chosen = home or os.environ.get("TIDEHOUSE_HOME") or values.pop("home", None) or ".tidehouse"
    values.pop("home", None)
    home_path = Path(chosen)
    if not home_path.is_absolute():
        home_path = (pdir / home_path) if not home else home_path.resolve()
    return Config(home=home_path.resolve(), project_dir=pdir, values=values, from_env=frozenset(from_env))


def read_project_file(path: Path) -> tuple[dict[str, Any], set[str]]:
    """The settings a project file sets (parsed values by dotted name) and those that came from ``${ENV}``.

    The file is read with the strict loader of flows (:mod:`runtime.core.yamlsource`): duplicate keys, YAML
    1.1 booleans (``yes``/``no``/``on``/``off``), unknown settings and bad values are errors located at their
    line and column and named by their dotted setting. An empty file (or one of comments only) sets nothing.
    """
    file = str(path)
    if not path.is_file():
        raise TidehouseError(
            ErrorCode.CONFIG_INVALID,
            "the project file is not a regular file",
            location=Location(file),
            hint=f"{PROJECT_FILE} must be a YAML file",
        )
    try:
        text = read_text(path)
    except TidehouseError as exc:
        if exc.code is not ErrorCode.SPEC_BAD_VALUE:  # too large, not text: the loader's own codes
            raise
        raise TidehouseError(ErrorCode.CONFIG_INVALID, exc.message, location=exc.location) from exc
    doc = load_yaml(text, file, allow_empty=True)
    if doc.data is None:
        return {}, set()
    if not isinstance(doc.data, dict):
        raise TidehouseError(
            ErrorCode.CONFIG_INVALID,
            "the project file must be a mapping of settings",
            location=doc.location(()),
            hint="e.g. 'storage: {fsync: false}'",
        )
    errors = [
        TidehouseError(
            ErrorCode.CONFIG_INVALID,
            f"'{word}' is ambiguous (a YAML 1.1 boolean)",
            location=doc.location(ypath),
            hint=f"write {'true' if word.lower() in ('yes', 'on') else 'false'} for a boolean, "
            f"or quote it ('{word}') for a string",
        )
        for ypath, word in doc.ambiguous.items()
    ]
    names, flatten_errors = _flatten(doc)
    errors += flatten_errors
    values: dict[str, Any] = {}
    from_env: set[str] = set()
    for name, ypath in names.items():
        if any(word_path[: len(ypath)] == ypath for word_path in doc.ambiguous):
            continue  # reported above: the value is neither the boolean nor the string for sure
        setting = HOME if name == "home" else SETTINGS_BY_NAME[name]
        raw = doc.value_at(ypath)
        env_hits: set[str] = set()
        try:
            values[name] = setting.parse(_expand_env(raw, ypath, name, doc, env_hits))
        except TidehouseError as exc:  # a missing environment variable
            errors.append(exc)
            continue
        except (ValueError, TypeError) as exc:
            at = tuple(getattr(exc, "at", ()))
            # a key inside a mapping setting, or a setting left empty (`root:`), is shown at its key
            errors.append(
                TidehouseError(
                    ErrorCode.CONFIG_INVALID,
                    str(exc),
                    location=doc.location(ypath + at, key=bool(at) or raw is None, shown=(name, *at)),
                )
            )
            continue
        from_env |= env_hits
    errors += _conflicts(values, names, doc)
    errors.sort(key=lambda e: (e.location.line or 0, e.location.col or 0) if e.location else (0, 0))
    TidehouseErrors.raise_if_any(errors)
    return values, from_env


def setting_key_location(config: Config, name: str, key: str) -> Location:
    """Where the key ``key`` of the mapping setting ``name`` (``spark.conf``) is in the project file, for an
    error found after the file was read (the file alone when it cannot be placed)."""
    path = config.project_dir / PROJECT_FILE
    try:
        doc = load_yaml(read_text(path), str(path), allow_empty=True)
        return doc.location(_flatten(doc)[0][name] + (key,), key=True, shown=(name, key))
    except Exception:  # noqa: BLE001 - a location is a nicety: it never fails the error it places
        return Location(str(path), path=f"{name}.{key}")


def _conflicts(values: dict[str, Any], names: dict[str, tuple], doc: Document) -> list[TidehouseError]:
    """Settings that are fine alone but cannot apply together (shown at the later one's line)."""
    out = []
    if "spark.remote" in values and "spark.master" in values:
        out.append(
            TidehouseError(
                ErrorCode.CONFIG_INVALID,
                "spark.master and spark.remote are both set: Spark runs either on a master or behind a "
                "Spark Connect server",
                location=doc.location(names["spark.remote"], key=True, shown=("spark.remote",)),
                hint="remove one of them (with spark.remote, the server's own master applies)",
            )
        )
    # the hot store's own checks (runtime.storage.open_store) when it opens, here at the lines they concern
    on_s3 = scheme_of(str(values.get("storage.root", ""))) == "s3"
    if on_s3 and not values.get("storage.metastore"):
        out.append(
            TidehouseError(
                ErrorCode.CONFIG_INVALID,
                "an object-store root (s3://) needs storage.metastore (commits, offsets, fencing)",
                location=doc.location(names["storage.root"], shown=("storage.root",)),
                hint="set storage.metastore to a SQLAlchemy URL every host can reach, e.g. "
                "postgresql+psycopg://user:${PGPASSWORD}@host/db",
            )
        )
    for name in ("storage.metastore", "storage.s3"):
        if values.get(name) and not on_s3:
            out.append(
                TidehouseError(
                    ErrorCode.CONFIG_INVALID,
                    "the hot storage root is local: only an object-store root (s3://) uses this setting",
                    location=doc.location(names[name], key=True, shown=(name,)),
                    hint=f"remove {name}, or point storage.root at s3://bucket/prefix",
                )
            )
    if "spark.remote" in values and values.get("materializer.data_path") == "driver":
        out.append(
            TidehouseError(
                ErrorCode.CONFIG_INVALID,
                "materializer.data_path is 'driver', but with spark.remote the driver is the Spark Connect "
                "server: every batch's rows would move into its Python process",
                location=doc.location(names["materializer.data_path"], shown=("materializer.data_path",)),
                hint="use data_path: executors (or auto) with spark.remote, or a spark.master for the "
                "one-machine driver path",
            )
        )
    return out
