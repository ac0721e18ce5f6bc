"""``tidehouse info``: versions, home, and the catalog settings any engine can use."""

from __future__ import annotations

import platform

import click

from runtime.cli import cli, pass_state
from runtime.cli._render import echo_json


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for dist in ("tidehouse", "pyspark", "pyarrow", "pyiceberg", "duckdb"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    return out


@cli.command()
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
@pass_state
def info(state, fmt: str) -> None:
    """Versions, home, storage and catalog settings (secrets masked)."""
    config = state.project.config
    settings = config.masked()
    catalog = {k: ("****" if any(s in k.lower() for s in ("token", "secret", "password", "credential", "key"))
                   else v) for k, v in config.lake_catalog_properties.items()}
    report = {
        "versions": _versions(),
        "home": str(config.home),
        "project": str(config.project_dir),
        "storage_root": config.storage_root,
        "checkpoints": config.checkpoint_root,
        "registry": settings["registry.url"] or "sqlite (embedded, under home)",
        "lake_catalog": {"name": config.get("lake.catalog_name"), **catalog},
        "settings": settings,
    }
    report = _redacted(report)  # values from ${ENV} may sit inside a URI or path: hide them everywhere
    catalog = {k: v for k, v in report["lake_catalog"].items() if k != "name"}
    if fmt == "json":
        echo_json(report)
        return
    click.echo("versions:  " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()))
    click.echo(f"home:      {report['home']}")
    click.echo(f"project:   {report['project']}")
    click.echo(f"hot:       {report['storage_root']}")
    click.echo(f"registry:  {report['registry']}")
    click.echo("lake catalog (pyiceberg load_catalog properties; use them from any engine):")
    for key, value in report["lake_catalog"].items():
        click.echo(f"  {key}: {value}")
    click.echo("read a lake table from Python:")
    props = ", ".join(f"{k}={v!r}" for k, v in catalog.items())
    click.echo(f"  from pyiceberg.catalog import load_catalog; "
               f"load_catalog({config.get('lake.catalog_name')!r}, {props}).load_table('ads.top_users').scan().to_arrow()")


def _redacted(value):
    """Every string of the report with the project file's ``${ENV}`` values (secrets) replaced by ****."""
    from runtime.config import redact

    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return redact(value) if isinstance(value, str) else value
