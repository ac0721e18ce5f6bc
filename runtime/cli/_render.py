"""Rendering helpers of the commands: JSON here; aligned tables and CSV from :mod:`runtime.core.text`."""

from __future__ import annotations

import json
from typing import Any

import click

from runtime.core.text import table_csv, table_text  # noqa: F401 - the commands' one import of renderers


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=False, default=str))
