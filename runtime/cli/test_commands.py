"""``tidehouse test``: run action tests (``actions/<action>.test.yaml``) in batch and as a stream."""

from __future__ import annotations

from typing import Any

import click

from runtime.cli import cli, pass_state
from runtime.cli._render import TEXT_OR_JSON, counted, echo_json, table_text

MARKS = {"pass": "PASS ", "fail": "FAIL ", "error": "ERROR"}


@cli.command("test")
@click.argument("paths", nargs=-1, metavar="[PATH|FILE::CASE]...")
@TEXT_OR_JSON
@click.option(
    "--batch-only",
    is_flag=True,
    help="Run the cases in Spark batch only, without the stream run (faster; no strategy, no retractions).",
)
@click.pass_context
@pass_state
def test_cmd(state, ctx: click.Context, paths: tuple[str, ...], fmt: str, batch_only: bool) -> None:
    """Run action tests: the cases of *.test.yaml files (default: every one under the project's actions/).

    Each case runs the action's SQL in Spark batch over its input rows and compares the result with the
    expected rows; then every case runs as a table of one streaming flow in a throw-away project, its input
    fed in several --until-idle runs, and its hot table (after each run) and lake table (after the last)
    must equal the batch result, retractions included. Exit 0 when every case passes, 1 when one fails,
    2 for a malformed test file.
    """

    def progress(message: str) -> None:
        click.echo(message, err=True)

    report = state.project.test(
        list(paths), stream=not batch_only, on_progress=progress if fmt == "text" else None
    )
    data = report.to_dict()
    if fmt == "json":
        echo_json(data)
    else:
        _print(data)
    ctx.exit(report.exit_code)


def _print(data: dict[str, Any]) -> None:
    by_file: dict[str, list[dict]] = {}
    for case in data["cases"]:
        by_file.setdefault(case["file"], []).append(case)
    width = max((len(c["case"]) for c in data["cases"]), default=0)
    for file, cases in by_file.items():
        click.echo(f"{file} ({cases[0]['action']})")
        for case in cases:
            mark, name = MARKS[case["status"]], case["case"].ljust(width)
            click.echo(f"  {mark}  {name}  {case['seconds']:6.2f}s{_facts(case)}")
    for case in data["cases"]:
        if case["status"] == "pass":
            continue
        click.echo("")
        click.echo(f"{case['status'].upper()}: {case['id']} ({case['location']})")
        if case["error"]:
            click.echo(f"  {case['error']}")
        for check in case["failures"]:
            _print_check(check)
    click.echo("")
    click.echo(_summary(data))


def _facts(case: dict[str, Any]) -> str:
    facts = []
    if case["strategy"]:
        facts.append(case["strategy"])
        facts.append(counted(case["runs"], "run"))
        if case["retractions"]:
            facts.append(counted(case["retractions"], "retraction"))
    facts.append(counted(case["rows"], "row"))
    return "  " + ", ".join(facts)


def _print_check(check: dict[str, Any]) -> None:
    missing, unexpected = check["missing"], check["unexpected"]
    click.echo(f"  {check['what']}: {len(missing)} missing, {len(unexpected)} unexpected")
    for rows, label in (
        (missing, f"missing (in {check['reference']}, not in {check['checked']})"),
        (unexpected, f"unexpected (in {check['checked']}, not in {check['reference']})"),
    ):
        if not rows:
            continue
        click.echo(f"    {label}:")
        text = table_text(check["columns"], [[_cell(row[c]) for c in check["columns"]] for row in rows])
        for line in text.splitlines():
            click.echo(f"      {line}")
    if check["note"]:
        click.echo(f"    note: {check['note']}")


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _summary(data: dict[str, Any]) -> str:
    files = len({c["file"] for c in data["cases"]})
    cases = len(data["cases"])
    parts = [f"{data['passed']} passed"]
    if data["failed"]:
        parts.append(f"{data['failed']} failed")
    if data["errors"]:
        parts.append(counted(data["errors"], "error"))
    line = (
        f"{counted(cases, 'case')} in {counted(files, 'file')}: "
        f"{', '.join(parts)} in {data['seconds']:.1f}s (batch {data['batch_seconds']:.1f}s"
    )
    stream = data["stream"]
    if stream:
        line += (
            f", stream {stream['seconds']:.1f}s: {counted(stream['flows'], 'flow')} of "
            f"{counted(stream['tables'], 'table')}, {counted(stream['runs'], 'run')}"
        )
    else:
        line += ", no stream run"
    return line + ")"
