"""``tidehouse flow plan | trigger | status``: thin commands over :mod:`materializer`."""

from __future__ import annotations

import signal
import sys
import threading
import time

import click

from runtime.cli import flow, pass_state
from runtime.cli._render import EXCLUDE, SELECT, TEXT_OR_JSON, counted, echo_json, seconds, table_text


@flow.command("plan")
@click.argument("flow_ref", metavar="PATH|NAME")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "mermaid"]), default="text")
@SELECT
@EXCLUDE
@pass_state
def plan_cmd(state, flow_ref: str, fmt: str, select: tuple[str, ...], exclude: tuple[str, ...]) -> None:
    """The DAG by layer: each table's SQL, kind, strategy, schema, buckets, trigger, tiering, and where it
    differs from its SQL's batch result by design (batch exceptions: lookup, watermark).

    Every table's SQL is analysed with Spark against its upstream schemas (no stream is started); --select
    and --exclude only choose what is printed.
    """
    plan = state.project.plan(flow_ref, select=select, exclude=exclude)
    click.echo({"json": plan.to_json, "mermaid": plan.to_mermaid}.get(fmt, plan.to_text)())


def _fmt(value, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _layer_lines(snap: dict) -> list[str]:
    """One plain line per layer: rows, batches, delay."""
    by_layer: dict[str, list[dict]] = {}
    for row in snap.get("tables", []):
        by_layer.setdefault(row["layer"], []).append(row)
    lines = []
    for layer, rows in by_layer.items():
        written = sum(r.get("rows_written") or 0 for r in rows)
        batches = sum(r.get("batches") or 0 for r in rows)
        delays = [r["hot_delay_s"] for r in rows if r.get("hot_delay_s") is not None]
        lake = [r["lake_delay_s"] for r in rows if r.get("lake_delay_s") is not None]
        quarantined = sum(r.get("quarantined") or 0 for r in rows)
        late = sum(r.get("late_dropped") or 0 for r in rows)
        lines.append(
            f"{layer}: {counted(written, 'row')} in {counted(batches, 'batch')}, "
            f"hot delay {seconds(max(delays) if delays else None, 2)},"
            f" lake delay {seconds(max(lake) if lake else None)}"
            + (f", {quarantined} quarantined" if quarantined else "")
            + (f", {counted(late, 'late row')} dropped" if late else "")
        )
    return lines


class _Progress:
    """Per-layer progress: a rich live table on a terminal, plain lines (at most every 5 s) otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self._live = None
        self._last_plain = 0.0

    def __enter__(self) -> _Progress:
        if self.tty:
            from rich.live import Live

            self._live = Live(refresh_per_second=2, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def __call__(self, snap: dict) -> None:
        if self._live is not None:
            from rich.table import Table

            table = Table(title=f"flow {snap.get('flow')} ({snap.get('state')})")
            for col in (
                "table",
                "state",
                "batches",
                "rows",
                "rows/s",
                "hot delay s",
                "lake delay s",
                "quarantined",
                "late dropped",
            ):
                table.add_column(col)
            for r in snap.get("tables", []):
                table.add_row(
                    r["table"],
                    r.get("state") or "-",
                    _fmt(r.get("batches")),
                    _fmt(r.get("rows_written")),
                    _fmt(r.get("rows_per_s")),
                    _fmt(r.get("hot_delay_s"), 2),
                    _fmt(r.get("lake_delay_s")),
                    _fmt(r.get("quarantined")),
                    _fmt(r.get("late_dropped")),
                )
            self._live.update(table)
            return
        now = time.time()
        if now - self._last_plain >= 5.0:
            self._last_plain = now
            for line in _layer_lines(snap):
                click.echo(line)


@flow.command("trigger")
@click.argument("flow_ref", metavar="PATH|NAME")
@click.option(
    "--until-idle",
    is_flag=True,
    help="Run until every source is exhausted and every layer caught up, then tier once more and exit.",
)
@click.option(
    "--duration",
    default=None,
    metavar="DURATION",
    help="Run this long, then stop: seconds, or with a unit (30s, 5m, 2h); not with --until-idle.",
)
@click.option(
    "--full-refresh",
    "full_refresh",
    multiple=True,
    metavar="SELECTOR",
    help="Drop the selected tables (hot, lake, checkpoints) and everything downstream of them, and rebuild "
    "them: a table (dws.users) or any selector (dws.users+, layer:ads, tag:pii). Repeatable.",
)
@pass_state
def trigger_cmd(
    state, flow_ref: str, until_idle: bool, duration: str | None, full_refresh: tuple[str, ...]
) -> None:
    """Start the flow's streaming queries layer by layer, plus its tiering schedule.

    A PATH is registered first, together with the actions of the project's actions/ folder (Spark parses each
    new action version, and the flow is registered once every table analyses and no table holds data another
    definition built, TH405: what is refused is not stored); a NAME runs its latest registered version and
    the action versions it pins (a note names the flow file and each action file edited since). Ctrl-C or
    SIGTERM stops the flow gracefully (a second Ctrl-C at once); triggering it again resumes where it
    stopped.
    """
    edited_flow = state.project.edited_flow(flow_ref)  # a run by name runs the registered text
    if edited_flow is not None:
        click.echo(
            f"note: {edited_flow} has changed since {flow_ref} was registered from it: the run uses the "
            f"registered version (`flow trigger {edited_flow}` registers the file and runs it)",
            err=True,
        )
    for edited in state.project.edited_actions(flow_ref):  # a run by name runs the pins, not the files
        click.echo(
            f"note: {edited.file} is not {edited.pinned}, the version this flow pins for {edited.table}: the "
            f"run uses {edited.pinned} (`flow register` or `flow trigger` of the flow file pins the file)",
            err=True,
        )
    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, stop_handler(stop))
    try:
        with _Progress() as progress:
            report = state.project.trigger(
                flow_ref,
                until_idle=until_idle,
                duration=duration,
                full_refresh=full_refresh,
                stop_event=stop,
                on_status=progress,
            )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    click.echo(
        f"flow {report.flow}: {report.mode} finished in {report.seconds:.1f}s"
        f" on {report.spark} (data path: {report.data_path})"
    )
    for name, stats in report.tables.items():
        click.echo(
            f"  {name}: {counted(stats['rows_out'], 'row')} written in {counted(stats['batches'], 'batch')}"
            + (f", {stats['quarantined']} quarantined" if stats["quarantined"] else "")
            + (f", {stats['dropped']} dropped by expectations" if stats["dropped"] else "")
            + (
                f", {counted(stats['late_dropped'], 'late row')} dropped by the watermark"
                if stats.get("late_dropped")
                else ""
            )
        )


def stop_handler(stop: threading.Event):
    """SIGINT/SIGTERM: a graceful stop (the queries end after their micro-batch, an --until-idle run after
    the drain under way). A second Ctrl-C leaves at once (exit 130): the checkpoints stay consistent, and
    the next trigger runs the unfinished batches again."""

    def handle(signum, _frame) -> None:
        if signum == signal.SIGINT and stop.is_set():
            raise KeyboardInterrupt
        if not stop.is_set():
            click.echo(
                f"{signal.Signals(signum).name}: stopping gracefully (Ctrl-C again: at once)", err=True
            )
        stop.set()

    return handle


@flow.command("status")
@click.argument("name")
@TEXT_OR_JSON
@click.option("--json", "as_json", is_flag=True, help="Print JSON (--format json).")
@pass_state
def status_cmd(state, name: str, fmt: str, as_json: bool) -> None:
    """Per table: query state, rows/s (while the flow runs), hot end offsets, quarantined rows, late rows
    dropped by a watermark (in the last run), hot and lake delay, lake snapshot, and the freshness target
    (MISSED while the hot or the lake delay exceeds it). JSON adds batch seconds by phase and tiering
    figures."""
    status = state.project.status(name)
    if as_json or fmt == "json":
        echo_json(status)
        return
    flow_state = "running" if status["running"] else status["state"]
    where = f" on {status['spark']} (data path: {status['data_path']})" if status.get("spark") else ""
    version = f"version {status['version']}"
    if status.get("latest_version"):
        version += f"; version {status['latest_version']}, registered since, has not run"
    click.echo(f"flow {status['flow']} ({version}): {flow_state}{where}")
    headers = [
        "table",
        "state",
        "rows/s",
        "hot offsets",
        "quarantined",
        "late dropped",
        "hot delay s",
        "tiered offsets",
        "lake snapshot",
        "lake delay s",
        "freshness",
    ]
    rows = [
        [
            r["table"],
            r.get("state"),
            _fmt(r.get("rows_per_s")),
            _offsets(r.get("hot_end_offsets")),
            _fmt(r.get("quarantined")),
            _fmt(r.get("late_dropped")),
            _fmt(r.get("hot_delay_s"), 2),
            _offsets(r.get("tiered_offsets")),
            r.get("lake_snapshot_id") or "-",
            _fmt(r.get("lake_delay_s")),
            _freshness(r),
        ]
        for r in status["tables"]
    ]
    click.echo(table_text(headers, rows))
    for r in status["tables"]:
        if r.get("fresh") is False:
            delays = ", ".join(
                f"{kind} delay {_fmt(r.get(f'{kind}_delay_s'), 2)}s" for kind in r["freshness_missed"]
            )
            click.echo(f"{r['table']}: misses its freshness target of {_fmt(r['freshness_s'])}s ({delays})")
    errors = [r for r in status["tables"] if r.get("error")]
    for r in errors:
        click.echo(f"{r['table']}: {r['error']}", err=True)
    # the lake figures read '-' when the catalog cannot be opened: say why, not only "not tiered yet"
    for lake_error in dict.fromkeys(r["lake_error"] for r in status["tables"] if r.get("lake_error")):
        click.echo(f"no lake figures: {lake_error}", err=True)


def _freshness(row: dict) -> str:
    if row.get("freshness_s") is None:
        return "-"
    return f"{_fmt(row['freshness_s'])}s " + ("ok" if row.get("fresh") else "MISSED")


def _offsets(value) -> str:
    """A table's offsets, one per bucket: ``5000``, or ``[97,103]`` (bare, ``97,103`` read as 97,103 rows)."""
    if not value:
        return "-"
    return str(value[0]) if len(value) == 1 else "[" + ",".join(str(v) for v in value) + "]"
