"""``tidehouse query SQL``: union read (lake + hot tail) of every table the SQL names, with DuckDB."""

from __future__ import annotations

import click

from runtime.cli import cli, pass_state
from runtime.cli._render import counted, csv_cell, echo_json, table_csv, table_text


@cli.command("query")
@click.argument("sql")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table")
@pass_state
def query_cmd(state, sql: str, fmt: str) -> None:
    """Run SQL (DuckDB dialect) over union reads: `layer.t` = lake + hot tail, `layer.t$lake` = lake only,
    `layer.t$changelog` = the hot changelog with its system columns. Of several statements
    (`SET ...; SELECT ...`), the last one's rows are printed; an earlier one may not return rows.

    The tables are read into a throw-away in-memory database, so the last statement must return rows or
    export them (`COPY (SELECT ...) TO 'f.parquet'`), unless the query ATTACHes a database file first:
    what a statement creates, changes or drops there does not outlast the query."""
    result = state.project.query(sql)
    headers = result.column_names
    rows = result.to_pylist()
    if fmt == "json":
        echo_json(rows)
    elif fmt == "csv":
        click.echo(table_csv(headers, ([csv_cell(r[h]) for h in headers] for r in rows)))
    else:
        click.echo(table_text(headers, ([row[h] for h in headers] for row in rows)))
        click.echo(f"({counted(len(rows), 'row')})")
