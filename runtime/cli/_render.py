"""Rendering helpers of the commands: JSON here; aligned tables and CSV from :mod:`runtime.core.text`."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import click
import pyarrow as pa

from runtime.core.text import counted, plain, seconds, table_csv, table_text  # noqa: F401 - the renderers

# the --format option of the commands that print text or JSON
TEXT_OR_JSON = click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
# table selectors (registry/selectors.py: dbt's syntax)
SELECT = click.option(
    "--select",
    "-s",
    "select",
    multiple=True,
    metavar="SELECTOR",
    help="Only these tables: TABLE, TABLE+ (and downstream), +TABLE (and upstream), layer:L, tag:T; a space "
    "is a union, a comma an intersection. Repeatable.",
)
EXCLUDE = click.option(
    "--exclude", "exclude", multiple=True, metavar="SELECTOR", help="Leave out these tables (same syntax)."
)


def echo_json(value: Any) -> None:
    """Strict JSON (RFC 8259), as Spark's ``to_json`` writes what JSON has no literal for: a NaN or infinite
    float as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` (Python's ``NaN`` is not JSON: jq and
    most parsers refuse it), binary as base64; decimals, dates, times and intervals as their text."""
    click.echo(json.dumps(_strict(plain(value)), indent=2, sort_keys=False, default=str, allow_nan=False))


def _strict(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {key: _strict(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(item) for item in value]
    return value


def arrow_rows(table: pa.Table) -> list[tuple]:
    """``table``'s rows as tuples of Python values, by column position (two columns may share a name), a map
    as a dict as Spark's ``to_json`` writes it (Arrow gives a list of pairs), also inside lists and
    structs; a map whose keys cannot be a dict's (lists, structs) stays its pairs."""
    columns = []
    for column in table.columns:
        values = column.to_pylist()
        columns.append([_maps(v, column.type) for v in values] if _has_map(column.type) else values)
    return list(zip(*columns))


def _has_map(kind: pa.DataType) -> bool:
    return pa.types.is_map(kind) or any(_has_map(kind.field(i).type) for i in range(kind.num_fields))


def _maps(value: Any, kind: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_map(kind):
        pairs = [(k, _maps(v, kind.item_type)) for k, v in value]
        return dict(pairs) if all(isinstance(k, str | int | float | bool) for k, _ in pairs) else pairs
    if pa.types.is_struct(kind):
        return {f.name: _maps(value[f.name], f.type) for f in kind}
    if kind.num_fields == 1 and isinstance(value, list):  # a list of any kind
        return [_maps(v, kind.field(0).type) for v in value]
    return value


def csv_cell(value: Any) -> Any:
    """A CSV cell as ``--format json`` writes the value: binary as base64, a list, map or struct as its
    JSON text (csv would write Python's ``b'..'``, ``['a', 'b']`` and ``{'k': 1}``), a NaN as ``NaN``."""
    value = _strict(plain(value))  # an interval as its text, not a list of its three fields
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str, allow_nan=False)
    return value


def version_dict(version: Any, **fields: Any) -> dict[str, Any]:
    """A registered action or flow version as JSON-friendly data: what both have, with ``fields`` in
    between."""
    out = {
        "name": version.name,
        "version": version.version,
        "ref": version.ref,
        "description": version.spec.description,
        **fields,
    }
    if version.version_count is not None:
        out["versions"] = version.version_count
    return out


def echo_listing(
    items: Sequence[Any],
    fmt: str,
    *,
    as_dict: Callable[[Any], Any],
    empty: str,
    headers: list[str],
    row: Callable[[Any], list],
) -> None:
    """What a ``list`` command prints: every item as JSON, a hint when there is none, or an aligned table."""
    if fmt == "json":
        echo_json([as_dict(item) for item in items])
    elif not items:
        click.echo(empty)
    else:
        click.echo(table_text(headers, [row(item) for item in items]))


def echo_heading(ref: str, versions: Sequence[Any], description: str) -> None:
    """The first lines of a ``show`` command: the version shown, all versions, the description."""
    click.echo(f"{ref}  (versions: {', '.join(str(v.version) for v in versions)})")
    if description:
        click.echo(f"  {description}")
