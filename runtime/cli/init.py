"""``tidehouse init [DIR]`` (scaffold a project) and ``tidehouse demo`` (run the shipped e-commerce flow)."""

from __future__ import annotations

import click

from runtime.cli import cli


@cli.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option("--force", is_flag=True, help="Rewrite the shipped files of an existing project.")
@click.option("--no-data", is_flag=True, help="Do not generate sample data under data/.")
@click.option("--seed", type=int, default=7, show_default=True, help="Seed of the sample data.")
@click.option("--events", type=int, default=5000, show_default=True, help="How many sample shop events.")
def init(directory: str, force: bool, no_data: bool, seed: int, events: int) -> None:
    """Scaffold a project: tidehouse.yaml, actions/, flows/, sample data/ and a README."""
    from runtime.scaffold.project import init_project

    report = init_project(directory, force=force, seed=seed, events=events, with_data=not no_data)
    click.echo(f"initialised {report.root}: {len(report.written)} files"
               + (f", {report.data_files} sample data files under data/" if report.data_files else ""))
    click.echo("next:")
    where = "" if report.root.samefile(".") else f"cd {directory} && "
    click.echo(f"  {where}tidehouse action register actions/")
    click.echo("  tidehouse flow trigger flows/ecommerce_activity.yaml --until-idle")
    click.echo("  tidehouse flow status ecommerce_activity")
