"""Tidehouse's own log records on stderr, configured once per command from the settings.

``logging.level`` (default ``warning``; ``debug`` adds a line per micro-batch) and ``logging.format``:

* ``text`` — ``2024-05-01 12:00:00,123 WARNING materializer.runner [testflow dwd.clicks #12]: message``: the
  flow, table and batch id of the record in brackets when it has them;
* ``json`` — one JSON object per line: ``ts`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, every field
  the record carries (``flow``, ``table``, ``batch_id``; a batch line also ``rows_in``, ``rows_out``,
  ``seconds``, ``read_s``...), and ``exc`` (the traceback) when there is one.

Spark's JVM log is not here: it goes to ``<home>/logs/spark.log`` (:mod:`runtime.spark.session`). py4j's
records are held at WARNING whatever the level (at DEBUG it logs every call between Python and the JVM), and
its copy of an error already logged (:func:`mark_reported`) is left out.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
CONTEXT = ("flow", "table", "batch_id")
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "where"}
QUIET = ("py4j",)
REPORTED = "_tidehouse_reported"


def mark_reported(exc: BaseException) -> None:
    """Mark ``exc`` as told already (a failed batch's own log line says why): a record that logs it again
    with its whole traceback (py4j's, at ERROR, for an exception a Python callback raised back to the JVM:
    ~200 lines with the Java stack) is not written."""
    with contextlib.suppress(AttributeError, TypeError):
        setattr(exc, REPORTED, True)


def _unreported(record: logging.LogRecord) -> bool:
    """False for a record that only repeats an error its caller reports: one marked by :func:`mark_reported`;
    py4j's ``Exception while sending command.`` (on the root logger, with its traceback: the call then raises
    its Py4JError to the caller); and py4j's record of a callback that met a JVM that no longer answers (a
    ``Py4JError`` without a Java exception: the run reports the JVM that ended)."""
    exc = record.exc_info[1] if record.exc_info else None
    if record.name == "root" and "py4j" in Path(record.pathname).parts:
        return False
    if record.name.startswith("py4j") and type(exc).__name__ in ("Py4JError", "Py4JNetworkError"):
        return False
    return not getattr(exc, REPORTED, False)


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """A plain line; the record's flow, table and batch id in brackets."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(where)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        parts = [str(v) for v in (getattr(record, "flow", None), getattr(record, "table", None)) if v]
        batch = getattr(record, "batch_id", None)
        if batch is not None:
            parts.append(f"#{batch}")
        record.where = f" [{' '.join(parts)}]" if parts else ""
        return super().format(record)


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record comes (a test runner swaps it per command)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def configure_logging(level: str = "warning", fmt: str = "text") -> Callable[[], None]:
    """Send log records at ``level`` and above to stderr as ``fmt`` (``text`` or ``json``); returns a function
    that undoes it (a command run in-process leaves the logging of its host as it found it)."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "tidehouse", False)]:
        root.removeHandler(handler)
    handler = _Stderr()
    handler.tidehouse = True
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(_unreported)
    previous = root.level, {name: logging.getLogger(name).level for name in QUIET}
    root.addHandler(handler)
    root.setLevel(LEVELS[level])
    for name in QUIET:
        logging.getLogger(name).setLevel(max(LEVELS[level], logging.WARNING))

    def undo() -> None:
        root.removeHandler(handler)
        root.setLevel(previous[0])
        for name, lvl in previous[1].items():
            logging.getLogger(name).setLevel(lvl)

    return undo
