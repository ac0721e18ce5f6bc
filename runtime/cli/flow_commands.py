"""``tidehouse flow register|list|show|validate``: the authoring side of flows.

``flow plan|trigger|status`` are added to the same group by :mod:`runtime.cli.run`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from runtime.cli import flow, pass_state
from runtime.cli._render import (
    TEXT_OR_JSON,
    counted,
    echo_heading,
    echo_json,
    echo_listing,
    table_text,
    version_dict,
)
from runtime.core.errors import TidehouseError, TidehouseErrors
from runtime.core.refs import FlowRef


def flow_dict(fv, *, text: bool = False) -> dict[str, Any]:
    """A flow version as JSON-friendly data (what ``--format json`` prints)."""
    out = version_dict(
        fv,
        path=fv.path,
        created_at=fv.created_at.isoformat() if fv.created_at else None,
        content_hash=fv.content_hash,
        tables=[q for q, _ in fv.spec.tables()],
        pins=dict(fv.pins),
    )
    if text:
        out["source_text"] = fv.source_text
    return out


QUICK_HELP = (
    "Skip the Spark parser/analyzer checks: only the checks that need no JVM run (fast, but a "
    "primary key the SQL does not output, or an SQL that does not analyse, is not caught here)."
)


@flow.command("register")
@click.argument("path", type=click.Path(dir_okay=False))
@TEXT_OR_JSON
@click.option("--quick", is_flag=True, help=QUICK_HELP)
@pass_state
def register(state, path: str, fmt: str, quick: bool) -> None:
    """Validate a flow file and register it, pinning its actions to their current versions.

    The project's actions/ is registered first (as `flow trigger PATH` does), so each table pins its action
    file as it is now. Validation is `flow validate`'s: the registry's checks, then Spark's analysis of
    every table.
    """
    fv = state.project.register_flow(path, quick=quick)
    if fmt == "json":
        echo_json({**flow_dict(fv), "unchanged": fv.unchanged})
        return
    click.echo(fv.ref + (" (unchanged)" if fv.unchanged else ""))
    for table, pin in fv.pins.items():
        click.echo(f"  {table}: {pin}")


@flow.command("list")
@TEXT_OR_JSON
@pass_state
def list_(state, fmt: str) -> None:
    """The latest version of every registered flow."""
    echo_listing(
        state.project.flows(),
        fmt,
        as_dict=flow_dict,
        empty="no flows registered (tidehouse flow register flows/<flow>.yaml)",
        headers=["flow", "latest", "versions", "tables", "registered", "file"],
        row=lambda f: [
            f.name,
            f.version,
            f.version_count,
            len(f.pins),
            f"{f.created_at:%Y-%m-%d %H:%M:%S}",
            f.path or "-",
        ],
    )


@flow.command("show")
@click.argument("ref")
@TEXT_OR_JSON
@click.option("--source", is_flag=True, help="Also print the registered YAML.")
@pass_state
def show(state, ref: str, fmt: str, source: bool) -> None:
    """One flow: NAME (latest) or NAME@N, with the action version pinned for each table."""
    fv = state.project.flow(ref)
    versions = state.project.flow_versions(fv.name)
    if fmt == "json":
        echo_json(
            {
                **flow_dict(fv, text=True),
                "all_versions": [
                    {"version": v.version, "created_at": v.created_at.isoformat(), "pins": v.pins}
                    for v in versions
                ],
            }
        )
        return
    spec = fv.spec
    echo_heading(fv.ref, versions, spec.description)
    click.echo(f"file:    {fv.path or '-'}  registered {fv.created_at:%Y-%m-%d %H:%M:%S} UTC")
    rows = []
    for qualified, table in spec.tables():
        kind = f"pk({', '.join(table.primary_key)})" if table.primary_key else "log"
        rows.append(
            [
                qualified,
                fv.pins.get(qualified, table.action),
                kind,
                table.buckets,
                ", ".join(f"{k}={v}" for k, v in table.inputs.items()),
            ]
        )
    click.echo(table_text(["table", "action (pinned)", "kind", "buckets", "inputs"], rows))
    if source:
        click.echo("---")
        click.echo(fv.source_text.rstrip("\n"))


@flow.command("validate")
@click.argument("targets", metavar="TARGET...", nargs=-1, required=True)
@click.option(
    "--actions",
    "actions_dir",
    type=click.Path(file_okay=False),
    help="Also use the (unregistered) actions in this folder; default: the project's actions/.",
)
@TEXT_OR_JSON
@click.option("--quick", is_flag=True, help=QUICK_HELP)
@pass_state
def validate(state, targets: tuple[str, ...], actions_dir: str | None, fmt: str, quick: bool) -> None:
    """Check flow files (PATH: a file, or a folder for its .yaml files) or registered flows (NAME[@N]): exit 0
    if every one is valid, else 2 with every error (`tidehouse flow validate flows/`).

    First the checks that need no JVM (keys, types, actions, inputs, parameters, layers, cycles); when they
    pass, Spark parses the actions' SQL and analyses every table as `flow plan` does, so a primary key, bucket
    key or aggregated column the SQL does not output is an error at its line in the flow file. With several
    targets, each one's result is a line of its own (`TARGET: ok`) and JSON is `{"ok", "flows": [...]}`; a
    flow file may read the tables of the other flow files given, as if they were registered.
    """
    targets = tuple(FlowRef.targets(targets))
    files = [Path(t) for t in targets if Path(t).is_file()]  # the others are errors of their own, below
    results, worst = [], 0
    for target in targets:
        try:
            result = state.project.validate_flow(
                target, actions_dir=actions_dir, quick=quick, alongside=files
            )
        except TidehouseError as exc:
            errors = exc.errors if isinstance(exc, TidehouseErrors) else [exc]
            worst = max([worst, exc.exit_code, *(e.exit_code for e in errors)])
            result = {"ok": False, "errors": [e.to_dict() for e in errors]}
            if fmt != "json":
                for error in errors:
                    click.echo(error.render(), err=True)
                if len(targets) > 1:
                    click.echo(f"{target}: {counted(len(errors), 'error')}")
        else:
            if fmt != "json":
                click.echo("ok" if len(targets) == 1 else f"{target}: ok")
        results.append({"target": target, **result} if len(targets) > 1 else result)
    if fmt == "json":
        echo_json(results[0] if len(targets) == 1 else {"ok": worst == 0, "flows": results})
    if worst:
        raise click.exceptions.Exit(worst)
