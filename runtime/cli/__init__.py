"""The ``tidehouse`` command: a thin shell over :class:`runtime.project.Project`.

Each command group lives in its own module and registers itself on :data:`cli`
(``runtime.cli.action_commands``, ``runtime.cli.flow_commands``, ...; the ``_commands`` suffix keeps a
submodule from shadowing the group of the same name on this package). Commands call the façade, render
text or JSON, and let errors propagate:
:func:`main` maps a :class:`~runtime.core.errors.TidehouseError` to one clear message and its exit code (2 for
user errors, 1 for internal ones); any other exception is an internal error. Tracebacks only with
``--debug``. Logging is configured from the project's settings (``logging.level``, ``logging.format``) when a
command first opens the project (:mod:`runtime.core.logs`), and undone when the command ends.
"""

from __future__ import annotations

import importlib
import sys
import traceback

import click

from runtime.core.config import redact
from runtime.core.errors import ErrorCode, TidehouseError
from runtime.core.logs import configure_logging

# Modules that add commands to the groups below.
COMMAND_MODULES = (
    "runtime.cli.info",
    "runtime.cli.action_commands",
    "runtime.cli.flow_commands",
    "runtime.cli.run",
    "runtime.cli.diff_commands",
    "runtime.cli.tier_commands",
    "runtime.cli.query",
    "runtime.cli.test_commands",
    "runtime.cli.init",
)


class State:
    """What every command receives: global options and the lazily opened project."""

    def __init__(self, home: str | None, debug: bool) -> None:
        self.home = home
        self.debug = debug
        self._project = None
        self._undo_logging = None

    @property
    def project(self):
        if self._project is None:
            from runtime.project import Project

            self._project = Project.open(home=self.home)
            config = self._project.config
            self._undo_logging = configure_logging(config.get("logging.level"), config.get("logging.format"))
        return self._project

    def close(self) -> None:
        if self._project is not None:
            self._project.close()
        if self._undo_logging is not None:
            self._undo_logging()
            self._undo_logging = None


pass_state = click.make_pass_decorator(State)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--home",
    envvar="TIDEHOUSE_HOME",
    type=click.Path(file_okay=False),
    help="Home directory (default: $TIDEHOUSE_HOME, else .tidehouse/ in the project).",
)
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(package_name="tidehouse")
@click.pass_context
def cli(ctx: click.Context, home: str | None, debug: bool) -> None:
    """Tidehouse: declarative YAML data flows for a streaming lakehouse on PySpark."""
    ctx.obj = State(home, debug)
    ctx.call_on_close(ctx.obj.close)


@cli.group()
def action() -> None:
    """Register and inspect SQL actions."""


@cli.group()
def flow() -> None:
    """Validate, register, plan, trigger and watch flows."""


@cli.group()
def tier() -> None:
    """Tier hot tables into the Iceberg lake."""


for _name in COMMAND_MODULES:
    importlib.import_module(_name)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the CLI and map errors to exit codes."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        result = cli.main(args=args, prog_name="tidehouse", standalone_mode=False)
        # without standalone mode click *returns* the code of `ctx.exit(n)` / `raise Exit(n)`
        return result if isinstance(result, int) and not isinstance(result, bool) else 0
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:  # usage errors
        exc.show()
        return 2
    except TidehouseError as exc:
        if debug:
            _print_trace(exc)
        text = redact(exc.render())
        click.echo(f"error: {text}" if "\n" not in text else text, err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except Exception as exc:  # noqa: BLE001 - any other error is internal: one line, trace with --debug
        if debug:
            _print_trace(exc)
        lost = _lost_server(exc)
        if lost is not None:  # e.g. while a flow was being planned: the same error as in a running flow
            click.echo(f"error: {redact(lost.render())}", err=True)
            return lost.exit_code
        click.echo(
            redact(
                f"internal error: {type(exc).__name__}: {exc} [{ErrorCode.INTERNAL.value}] "
                "(run with --debug for the trace)"
            ),
            err=True,
        )
        return 1


def _lost_server(exc: BaseException) -> TidehouseError | None:
    """The error of a Spark Connect server that stopped answering; its sessions close without it."""
    if "pyspark" not in sys.modules:
        return None
    from runtime.project import lost_spark_server

    return lost_spark_server(exc)


def _print_trace(exc: BaseException) -> None:
    """The traceback for ``--debug``, with secrets from the project file redacted."""
    click.echo(redact("".join(traceback.format_exception(exc))).rstrip("\n"), err=True)


def run() -> None:  # pragma: no cover - used by the console script
    sys.exit(main())
