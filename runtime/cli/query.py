"""``tidehouse query SQL``: union read (lake + hot tail) of every table the SQL names, with DuckDB."""

from __future__ import annotations

import click

from runtime.cli import cli, pass_state
from runtime.cli._render import arrow_rows, counted, csv_cell, echo_json, table_csv, table_text
from runtime.core.errors import ErrorCode, TidehouseError


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
    what a statement creates, changes or drops there does not outlast the query.

    Values print as DuckDB writes them (BIT as `101`, an interval as `1 day 01:30:00`); with `--format
    json` each row is an object (a map too; binary as base64, NaN as "NaN"): its columns need distinct
    names."""
    result = state.project.query(sql)
    headers = result.column_names
    rows = arrow_rows(result)
    if fmt == "json":
        if twice := next((h for h in headers if headers.count(h) > 1), None):
            raise TidehouseError(
                ErrorCode.QUERY_INVALID,
                f"the result has {headers.count(twice)} columns named {twice}: a JSON row is an object, "
                "whose keys differ",
                hint="name them apart in the SQL (SELECT a.id AS a_id, b.id AS b_id ...), or use --format "
                "table or csv",
            )
        echo_json([dict(zip(headers, row)) for row in rows])
    elif fmt == "csv":
        click.echo(table_csv(headers, ([csv_cell(v) for v in row] for row in rows)))
    else:
        click.echo(table_text(headers, rows))
        click.echo(f"({counted(len(rows), 'row')})")
