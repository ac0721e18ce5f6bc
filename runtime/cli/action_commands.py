"""``tidehouse action register|list|show``: the versioned SQL actions of the registry."""

from __future__ import annotations

from typing import Any

import click

from runtime.cli import action, pass_state
from runtime.cli._render import TEXT_OR_JSON, echo_heading, echo_json, echo_listing, version_dict


def action_dict(av, *, sql: bool = False) -> dict[str, Any]:
    """An action version as JSON-friendly data (what ``--format json`` prints)."""
    spec = av.spec
    out = version_dict(
        av,
        inputs=list(spec.inputs),
        params={
            name: {"type": p.type, "required": p.required, "default": p.default, "description": p.description}
            for name, p in spec.params.items()
        },
        output=spec.output,
        primary_key=list(spec.primary_key) if spec.primary_key else None,
        path=av.path,
        content_hash=av.content_hash,
        created_at=av.created_at.isoformat() if av.created_at else None,
    )
    if sql:
        out["sql"] = spec.sql
        out["sql_line"] = spec.sql_line
    return out


QUICK_HELP = (
    "Skip the Spark parser/analyzer checks: only the checks that need no JVM run (fast, but an SQL "
    "that does not parse is not caught here)."
)


@action.command("register")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@TEXT_OR_JSON
@click.option("--quick", is_flag=True, help=QUICK_HELP)
@pass_state
def register(state, paths: tuple[str, ...], fmt: str, quick: bool) -> None:
    """Register action files and folders (*.sql); prints name@version for each.

    Each file's header is checked, then Spark parses its SQL (a syntax error is reported at its line and
    column in the file); if any file fails, nothing is registered.
    """
    versions = state.project.register_actions(list(paths), quick=quick)
    if fmt == "json":
        echo_json(
            [
                {"ref": v.ref, "name": v.name, "version": v.version, "unchanged": v.unchanged, "path": v.path}
                for v in versions
            ]
        )
        return
    for v in versions:
        click.echo(f"{v.ref}" + (" (unchanged)" if v.unchanged else ""))


@action.command("list")
@TEXT_OR_JSON
@pass_state
def list_(state, fmt: str) -> None:
    """The latest version of every registered action."""
    echo_listing(
        state.project.actions(),
        fmt,
        as_dict=action_dict,
        empty="no actions registered (tidehouse action register actions/)",
        headers=["action", "latest", "versions", "inputs", "description"],
        row=lambda a: [
            a.name,
            a.version,
            a.version_count,
            ", ".join(a.spec.inputs),
            _first_line(a.spec.description),
        ],
    )


@action.command("show")
@click.argument("ref")
@TEXT_OR_JSON
@pass_state
def show(state, ref: str, fmt: str) -> None:
    """One action: NAME (latest) or NAME@N."""
    av = state.project.action(ref)
    versions = state.project.action_versions(av.name)
    if fmt == "json":
        echo_json(
            {
                **action_dict(av, sql=True),
                "all_versions": [
                    {
                        "version": v.version,
                        "created_at": v.created_at.isoformat(),
                        "content_hash": v.content_hash,
                    }
                    for v in versions
                ],
            }
        )
        return
    spec = av.spec
    echo_heading(av.ref, versions, spec.description)
    click.echo(f"inputs:  {', '.join(spec.inputs) or '-'}")
    if spec.params:
        click.echo("params:")
        for name, p in spec.params.items():
            default = "required" if p.required else f"default {p.default!r}"
            click.echo(f"  {name}: {p.type} ({default})" + (f" - {p.description}" if p.description else ""))
    if spec.output:
        click.echo(f"output:  {spec.output}")
    click.echo(f"file:    {av.path or '-'}  registered {av.created_at:%Y-%m-%d %H:%M:%S} UTC")
    click.echo("sql:")
    for line in spec.sql.splitlines():
        click.echo(f"  {line}")


def _first_line(text: str) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= 60 else line[:57] + "..."
