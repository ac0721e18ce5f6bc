"""The library façade: one object per project that the CLI (and tests, and notebooks) drive.

``Project`` opens each part lazily from the configuration — the registry store, the hot table store, the
lake catalog, the SparkSession — so a command only pays for what it uses (``action list`` never starts
Spark). It returns results and raises :class:`~runtime.errors.TidehouseError`; it never exits.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.config import Config, load_config

if TYPE_CHECKING:  # pragma: no cover
    from runtime.storage.api import TableStore


class Project:
    def __init__(self, config: Config) -> None:
        self.config = config

    @classmethod
    def open(cls, home: str | os.PathLike | None = None, project_dir: str | os.PathLike | None = None) -> "Project":
        return cls(load_config(home=home, project_dir=project_dir))

    @property
    def home(self) -> Path:
        return self.config.home

    @property
    def actions_dir(self) -> Path:
        return self.config.project_dir / "actions"

    @property
    def flows_dir(self) -> Path:
        return self.config.project_dir / "flows"

    # -- parts, opened on first use ----------------------------------------------------------------
    @cached_property
    def registry(self):
        """The versioned flow & action registry (:class:`registry.service.Registry`)."""
        from registry.service import Registry

        self.home.mkdir(parents=True, exist_ok=True)
        return Registry.open(self.config.registry_url)

    @cached_property
    def store(self) -> "TableStore":
        """The hot table store."""
        from runtime.storage import open_store

        return open_store(
            self.config.storage_root,
            fsync=self.config.get("storage.fsync"),
            segment_bytes=self.config.get("storage.segment_bytes"),
        )

    @cached_property
    def lake(self):
        """The Iceberg lake (:class:`runtime.lake.catalog.Lake`)."""
        from runtime.lake.catalog import Lake

        return Lake.open(self.config)

    def spark(self):
        """The process's SparkSession, configured from the project file."""
        from runtime.spark.session import get_spark

        return get_spark(self.config.get("spark.master"), self.config.get("spark.conf"))

    def close(self) -> None:
        for part in ("store", "lake", "registry"):
            obj = self.__dict__.pop(part, None)
            if obj is not None and hasattr(obj, "close"):
                obj.close()
