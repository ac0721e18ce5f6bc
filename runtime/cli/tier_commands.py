"""``tidehouse tier run`` (one cycle now) and ``tidehouse tier schedule`` (the tiering service)."""

from __future__ import annotations

import signal
import threading
import time

import click

from runtime.cli import pass_state, tier
from runtime.cli._render import EXCLUDE, SELECT, TEXT_OR_JSON, counted, echo_json, table_text
from runtime.core.durations import run_seconds
from runtime.core.errors import TidehouseError

# how often `tier schedule` looks for hot tables made since it started (a flow's first run, a new table) and
# for new tiering intervals (a flow registered again)
LOOK_FOR_TABLES_S = 5.0


def _follow_tables(project, flow: str | None, service) -> None:
    """Tier also the tables made since the service started, and each table whose flow was registered again
    with another tiering interval at its new one; a registry or store that cannot be read now (a database
    restarting) is said, and the service goes on with the tables it has."""
    try:
        found = project.tier_tables(flow)
    except TidehouseError as exc:
        click.echo(f"looking for new tables failed (tiering goes on): {exc.render()}", err=True)
        return
    added, changed = service.follow_tables(found)
    for name in added:
        click.echo(f"tiering {name} every {found[name]:g}s (a new table)")
    for name, before in changed.items():
        click.echo(f"tiering {name} every {found[name]:g}s (its flow's new interval; it was {before:g}s)")


def _line(result) -> str:
    state = f"snapshot {result.snapshot_id}" if result.committed else "up to date"
    extra = f" ({', '.join(result.maintenance)})" if result.maintenance else ""
    return (
        f"{result.table}: {result.rows} rows in {result.seconds:.3f}s, {state}, "
        f"lake delay {result.lake_delay_s:.1f}s{extra}"
    )


@tier.command("run")
@click.option("--flow", "flow", help="Tier the tables of this registered flow (default: every hot table).")
@click.option("--table", "table", help="Tier only this table (layer.name).")
@SELECT
@EXCLUDE
@TEXT_OR_JSON
@pass_state
def run_cmd(
    state, flow: str | None, table: str | None, select: tuple[str, ...], exclude: tuple[str, ...], fmt: str
) -> None:
    """Run one tiering cycle of each table now.

    --select and --exclude choose tables of the --flow (with their quarantine tables) by selector.
    """
    report = state.project.tier(flow, table, select=select, exclude=exclude)
    if fmt == "json":
        echo_json(
            {"tables": {name: r.to_dict() for name, r in report.results.items()}, "errors": report.errors}
        )
    else:
        rows = []
        for name in [*report.results, *report.errors]:
            if name in report.errors:
                rows.append([name, "-", "-", "-", "-", "failed: " + report.errors[name]])
                continue
            r = report.results[name]
            rows.append(
                [
                    name,
                    r.rows,
                    f"{r.seconds:.3f}",
                    r.snapshot_id if r.snapshot_id is not None else "-",
                    f"{r.lake_delay_s:.1f}",
                    "committed" if r.committed else "up to date",
                ]
            )
        click.echo(
            table_text(["table", "rows", "seconds", "snapshot", "lake delay s", "state"], rows)
            if rows
            else "no hot tables to tier"
        )
    report.raise_for_errors()


@tier.command("schedule")
@click.option("--flow", "flow", help="Tier the tables of this registered flow on their intervals.")
@click.option(
    "--duration",
    default=None,
    metavar="DURATION",
    help="Stop after this long: seconds, or with a unit (30s, 5m, 2h) (default: until stopped).",
)
@pass_state
def schedule_cmd(state, flow: str | None, duration: str | None) -> None:
    """Run the tiering service (per-table jobs on their intervals) until SIGINT/SIGTERM.

    Without --flow it tiers every hot table, each at the interval the latest version of its flow declares
    (tiering.interval for a table no registered flow produces). A table made while it runs (a flow's first
    run, a flow's new table) is tiered from the next look for new tables, every 5 s; it may start before any
    table is made. A flow registered again with another tiering interval is followed at the same look.

    With the setting metrics.port, each table's tiering figures are served to Prometheus while it runs.
    """
    duration = run_seconds(duration, "--duration")
    project = state.project
    tables = project.tier_tables(flow)
    stop = threading.Event()

    def _stop(signum, _frame) -> None:
        click.echo(f"{signal.Signals(signum).name}: stopping the tiering service", err=True)
        stop.set()

    previous = {s: signal.signal(s, _stop) for s in (signal.SIGINT, signal.SIGTERM)}
    service = project.tiering_service(
        tables,
        on_cycle=lambda r: r.committed and click.echo(_line(r)),
        on_error=lambda t, e: click.echo(f"{t}: tiering failed: {e}", err=True),
    )
    click.echo(
        f"tiering {counted(len(tables), 'table')}: "
        + ", ".join(f"{n} every {iv:g}s" for n, iv in tables.items())
        if tables
        else f"no hot tables yet: each is tiered once it is made (looking every {LOOK_FOR_TABLES_S:g}s)"
    )
    deadline = None if duration is None else time.monotonic() + duration
    look = time.monotonic() + LOOK_FOR_TABLES_S
    try:
        with project.metrics_endpoint(tiering=service, flow=flow):
            service.start()
            while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                stop.wait(0.2)
                if time.monotonic() >= look:  # new tables, new intervals
                    look = time.monotonic() + LOOK_FOR_TABLES_S
                    _follow_tables(project, flow, service)
    finally:
        service.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    summary = service.summary()
    click.echo(
        "stopped: "
        + ", ".join(f"{n} {s['commits']} commits/{s['errors']} errors" for n, s in summary.items())
    )
