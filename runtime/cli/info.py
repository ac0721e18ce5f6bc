"""``tidehouse info``: versions, home, and the catalog settings any engine can use."""

from __future__ import annotations

import click

from runtime.cli import cli, pass_state
from runtime.cli._render import TEXT_OR_JSON, echo_json


@cli.command()
@TEXT_OR_JSON
@pass_state
def info(state, fmt: str) -> None:
    """Versions, home, storage and catalog settings (secrets masked)."""
    report = state.project.info()
    catalog = {k: v for k, v in report["lake_catalog"].items() if k != "name"}
    if fmt == "json":
        echo_json(report)
        return
    click.echo("versions:  " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()))
    click.echo(f"home:      {report['home']}")
    click.echo(f"project:   {report['project']}")
    click.echo(f"hot:       {report['storage_root']}")
    click.echo(f"logs:      {report['logs']} (spark.log: Spark's log; jvm.log: the driver JVM's own output)")
    click.echo(f"registry:  {report['registry']}")
    click.echo("lake catalog (pyiceberg load_catalog properties; use them from any engine):")
    for key, value in report["lake_catalog"].items():
        click.echo(f"  {key}: {value}")
    click.echo("read a lake table from Python:")
    props = ", ".join(f"{k}={v!r}" for k, v in catalog.items())
    click.echo(
        f"  from pyiceberg.catalog import load_catalog; "
        f"load_catalog({report['lake_catalog']['name']!r}, {props})"
        ".load_table('ads.top_users').scan().to_arrow()"
    )
