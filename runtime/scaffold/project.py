"""``tidehouse init``: write a ready-to-run project.

A project is a folder holding ``tidehouse.yaml`` (every setting shown, commented out at its embedded
default), ``actions/`` (a copy of the standard action library), ``flows/`` (the shipped example flows),
``data/`` (generated sample input the flows read) and a short ``README.md``. The library and flows come
from the Tidehouse checkout this package runs from (``actions/`` and ``flows/`` next to ``runtime/``).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.core.config import PROJECT_FILE
from runtime.core.durations import format_duration
from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.settings import DURATION_PARSES, SETTINGS

SHIPPED = Path(__file__).resolve().parents[2]  # the checkout: actions/, flows/ live here
HEADER = """\
# Tidehouse project file. Every key is optional: each one below is commented out at its embedded default
# (Spark local[*], a SQLite registry, a SQLite Iceberg catalog and hot storage under the home directory).
# Uncomment and change what you need; values may use ${ENV_VAR} or ${ENV_VAR:-default} for secrets.
# Reference: docs/configuration.md (generated from runtime/core/settings.py).
"""
EXAMPLES: dict[str, str] = {  # what a real deployment looks like, shown under the default (a setting
    # without a default needs one: its key is shown nowhere else)
    "spark.master": "spark://spark-master:7077",
    "spark.remote": "sc://spark-connect:15002",
    "spark.conf": "{spark.executor.memory: 4g, spark.executor.cores: '2'}",
    "registry.url": "postgresql+psycopg://tidehouse:${TIDEHOUSE_DB_PASSWORD}@db:5432/tidehouse",
    "storage.root": (
        "/mnt/shared/tidehouse/hot    # a local or shared (NFS) folder; the embedded store needs flock"
    ),
    "storage.metastore": "postgresql+psycopg://tidehouse:${TIDEHOUSE_DB_PASSWORD}@db:5432/tidehouse_hot",
    "checkpoints.root": "/mnt/shared/tidehouse/checkpoints",
    "metrics.port": "9464",
    "lake.catalog": "{type: rest, uri: 'https://polaris:8181/api/catalog', warehouse: lake, "
    "credential: '${POLARIS_CREDENTIAL}'}",
}
README = """\
# {name}

A [Tidehouse](https://github.com/) project: YAML flows over SQL actions, streaming through the medallion
layers ODS -> DWD -> DWS -> ADS, with every table tiered into Apache Iceberg.

```bash
tidehouse test                                                       # the actions' tests
tidehouse action register actions/                                   # the SQL action library
tidehouse flow trigger flows/ecommerce_activity.yaml --until-idle    # run a flow until its input is done
tidehouse flow status ecommerce_activity                             # rows, hot delay, lake delay per table
tidehouse query "SELECT * FROM ads.top_users ORDER BY rank"          # hot tail + lake, as one table
tidehouse info                                                       # catalog settings for other engines
```

* `flows/` - flows (`ecommerce_activity.yaml`, `order_attribution.yaml`, and `shop_trends.yaml`, which reads
  ecommerce_activity's `dwd.events`: trigger that one first); source paths are relative to this folder.
  `tidehouse flow validate flows/` checks them all.
* `actions/` - the SQL actions the flows use (edit one, register it again: it becomes the next version).
* `data/` - generated sample input; make more with `python -m runtime.scaffold.generate --help`.
* `.tidehouse/` - the home: registry, hot storage, Iceberg warehouse, checkpoints (safe to delete to
  start over).
"""


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        return "{}" if not value else json.dumps(value)
    return json.dumps(value) if any(c in str(value) for c in ":#{}[]*&!|>'\"%@`") else str(value)


def project_file_text() -> str:
    """The commented ``tidehouse.yaml``: one block per settings group, each setting at its default."""
    lines = [
        HEADER,
        "# home: .tidehouse            # where everything is stored (or --home / $TIDEHOUSE_HOME)",
    ]
    group = None
    for setting in SETTINGS:
        head, _, leaf = setting.name.partition(".")
        if head != group:
            lines += ["", f"# {head}:"]
            group = head
        lines.append(f"#   # {setting.description}")
        if setting.default is not None:
            value = setting.default
            if setting.parse in DURATION_PARSES:
                value = format_duration(value)
            lines.append(f"#   {leaf}: {_yaml_scalar(value)}")
        if setting.name in EXAMPLES:
            lines.append(f"#   {leaf}: {EXAMPLES[setting.name]}    # e.g.")
    return "\n".join(lines) + "\n"


@dataclass
class InitReport:
    root: Path
    written: list[Path] = field(default_factory=list)
    data_files: int = 0


def init_project(
    root: str | Path, *, force: bool = False, seed: int = 7, events: int = 5000, with_data: bool = True
) -> InitReport:
    """Scaffold a project in ``root`` (created if missing). Refuses a folder that already has a project file
    unless ``force`` (then shipped files are rewritten; files the user added are left alone)."""
    root = Path(root).resolve()
    if with_data and events < 1:  # checked before anything is written: not a project without its data
        raise TidehouseError(
            ErrorCode.CONFIG_INVALID,
            f"the sample data needs at least 1 event, not {events}",
            location=Location("--events"),
            hint="give --events 1 or more, or --no-data for none",
        )
    if root.exists() and not root.is_dir():
        raise TidehouseError(
            ErrorCode.CONFIG_INVALID,
            f"{root} exists and is not a directory",
            hint="give a new or existing folder",
        )
    project_file = root / PROJECT_FILE
    if project_file.exists() and not force:
        raise TidehouseError(
            ErrorCode.CONFIG_INVALID,
            "a Tidehouse project already exists here",
            location=Location(str(project_file)),
            hint="use another folder, or --force to rewrite the shipped files",
        )
    _refuse_inside_a_project(root)
    library, flows = SHIPPED / "actions", SHIPPED / "flows"
    if not library.is_dir() or not flows.is_dir():
        raise TidehouseError(
            ErrorCode.INTERNAL,
            f"the shipped actions/ and flows/ were not found under {SHIPPED}",
            hint="install Tidehouse from its repository (pip install -e .)",
        )
    report = InitReport(root)
    root.mkdir(parents=True, exist_ok=True)
    report.written.append(_write(project_file, project_file_text()))
    # the actions with their tests (<action>.test.yaml and any CSV fixtures: `tidehouse test` runs them)
    for src_dir, patterns in ((library, ("*.sql", "*.test.yaml", "*.csv")), (flows, ("*.yaml",))):
        target = root / src_dir.name
        target.mkdir(exist_ok=True)
        for src in sorted(p for pattern in patterns for p in src_dir.glob(pattern)):
            shutil.copyfile(src, target / src.name)
            report.written.append(target / src.name)
    readme = root / "README.md"
    if not readme.exists() or force:
        report.written.append(_write(readme, README.format(name=root.name)))
    ignore = root / ".gitignore"
    if not ignore.exists():
        report.written.append(_write(ignore, ".tidehouse/\n"))
    if with_data:
        from runtime.scaffold.generate import write_sample_data

        report.data_files = len(write_sample_data(root / "data", seed=seed, events=events))
    return report


def _refuse_inside_a_project(root: Path) -> None:
    """A project scaffolded in a folder another project reads as a whole (its actions/, flows/, data/ or
    home) puts its files there too: the other project's `action register actions/` then finds every action
    twice, and its sources a folder of subfolders."""
    for parent in root.parents:
        if (parent / PROJECT_FILE).is_file():
            folder = root.relative_to(parent).parts[0]
            if folder in ("actions", "flows", "data", ".tidehouse"):
                raise TidehouseError(
                    ErrorCode.CONFIG_INVALID,
                    f"in the {folder}/ folder of the project {parent}, which would read this project's files "
                    "as its own",
                    location=Location(str(root)),
                    hint="scaffold the project in a folder of its own",
                )
            return


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path
