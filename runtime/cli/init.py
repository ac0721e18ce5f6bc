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
    """Scaffold a project: tidehouse.yaml, actions/, flows/, sample data/ and a README.

    DIRECTORY may hold other files, not a project (see --force), and may not be in the actions/, flows/,
    data/ or .tidehouse/ folder of an enclosing project, which would read the new project's files as its
    own."""
    from runtime.scaffold.project import init_project

    report = init_project(directory, force=force, seed=seed, events=events, with_data=not no_data)
    click.echo(
        f"initialised {report.root}: {len(report.written)} files"
        + (f", {report.data_files} sample data files under data/" if report.data_files else "")
    )
    click.echo("next:")
    where = "" if report.root.samefile(".") else f"cd {directory} && "
    click.echo(f"  {where}tidehouse action register actions/")
    click.echo("  tidehouse flow trigger flows/ecommerce_activity.yaml --until-idle")
    click.echo("  tidehouse flow status ecommerce_activity")


@cli.command()
@click.option(
    "--seconds",
    type=click.IntRange(5, 170),
    default=60,
    show_default=True,
    help="How long events stream in before the final drain.",
)
@click.option(
    "--rate",
    type=click.IntRange(1, 20000),
    default=200,
    show_default=True,
    help="Events per second written by the generator.",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    default="tidehouse-demo",
    show_default=True,
    help="Demo project folder (wiped and rebuilt on each run when it is a previous demo's).",
)
@click.option("--seed", type=int, default=7, show_default=True, help="Seed of the generated events.")
def demo(seconds: int, rate: int, directory: str, seed: int) -> None:
    """Run the shipped e-commerce flow on live generated events, with a view per layer.

    Builds a throw-away project (its own home), streams events in for --seconds while every layer runs and
    tiers into Iceberg, drains, then prints row counts per table, the top users, the conversion funnel and
    where the Iceberg tables are. Needs no server.
    """
    from runtime.scaffold.demo import run_demo

    run_demo(directory, seconds=seconds, rate=rate, seed=seed, echo=click.echo)
