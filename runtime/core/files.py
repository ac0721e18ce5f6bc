"""Small file-system steps every layer's durable writes share, and how a path is shown (no third-party
import: Spark's source runner processes load this)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make a folder's new entries (a created or renamed file) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def shown_path(path: Path) -> Path:
    """``path`` as the user would write it, from where they are (an error names its files so)."""
    with contextlib.suppress(ValueError):
        return path.relative_to(Path.cwd())
    return path


__all__ = ["fsync_dir", "shown_path"]
