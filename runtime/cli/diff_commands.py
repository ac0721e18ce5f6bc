"""``tidehouse flow diff PATH``: what registering a flow file changes, and what must be rebuilt."""

from __future__ import annotations

import click

from runtime.cli import flow, pass_state
from runtime.cli._render import TEXT_OR_JSON


@flow.command("diff")
@click.argument("path", type=click.Path(dir_okay=False))
@TEXT_OR_JSON
@pass_state
def diff_cmd(state, path: str, fmt: str) -> None:
    """The flow file against the registered version that built its data (the latest, unless a newer one was
    registered and has not run): tables added and removed; per changed table its action, SQL (a unified
    diff), parameters, schema, keys, buckets, expectations, trigger, tiering, freshness and tags; and which
    tables need a rebuild (--full-refresh) and why.

    The file is validated and analysed as `flow plan` does, with the project's actions; a table needs a
    rebuild when its fingerprint changes (what `flow trigger` refuses with TH405), the settings outside it
    (trigger, tiering, freshness, tags) never rebuild. A report: exit 0 with or without differences.
    """
    diff = state.project.diff_flow(path)
    click.echo(diff.to_json() if fmt == "json" else diff.to_text())
