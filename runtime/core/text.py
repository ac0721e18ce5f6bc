"""Plain-text renderings shared by the CLI and the demo: aligned tables and CSV."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

# control characters as escapes: a quarantined line of binary data printed raw broke the table into lines and
# sent its terminal escape sequences (ESC) to the terminal
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))} | {
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
}


def table_text(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Left-aligned columns, a dashed rule under the headers; ``None`` prints as an empty cell, and a control
    character (a line break, a tab, ESC) as its escape (``\\n``, ``\\t``, ``\\x1b``): JSON and CSV keep the
    text as it is."""
    rows = [["" if v is None else str(plain(v)).translate(_ESCAPES) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(v)) for w, v in zip(widths, row)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(out)


def plain(value: Any) -> Any:
    """A value as its text where Python's is no one's: an interval (Arrow's month-day-nano, a named tuple
    whose repr is ``MonthDayNano(months=0, days=1, nanoseconds=0)``) as DuckDB writes it, also inside a
    list or struct; others as they are."""
    if type(value).__name__ == "MonthDayNano":
        return interval_text(value.months, value.days, value.nanoseconds)
    if type(value) in (list, tuple):  # a list; a map is a list of (key, value) pairs
        return type(value)(plain(v) for v in value)
    if isinstance(value, dict):  # a struct
        return {k: plain(v) for k, v in value.items()}
    return value


def interval_text(months: int, days: int, nanoseconds: int) -> str:
    """An interval as DuckDB casts it to text: ``1 year 2 months 3 days 01:30:00.5``, ``-1 day``,
    ``100:00:00``, ``00:00:00`` (each part's own sign; microseconds, trailing zeros dropped)."""
    years = int(months / 12)  # toward zero, as each part keeps its sign
    parts = [
        f"{n} {unit}{'' if abs(n) == 1 else 's'}"
        for n, unit in ((years, "year"), (months - 12 * years, "month"), (days, "day"))
        if n
    ]
    micros = abs(nanoseconds) // 1000 * (-1 if nanoseconds < 0 else 1)  # toward zero
    if micros or not parts:
        hours, rest = divmod(abs(micros), 3_600_000_000)
        minutes, rest = divmod(rest, 60_000_000)
        secs, frac = divmod(rest, 1_000_000)
        fraction = f".{frac:06d}".rstrip("0") if frac else ""
        parts.append(f"{'-' if micros < 0 else ''}{hours:02d}:{minutes:02d}:{secs:02d}{fraction}")
    return " ".join(parts)


def counted(n: int, noun: str) -> str:
    """``1 row``, ``2 rows``, ``0 rows``; ``1 batch``, ``2 batches``."""
    if n == 1:
        return f"{n} {noun}"
    return f"{n} {noun}{'es' if noun.endswith(('ch', 'sh', 's', 'x')) else 's'}"


def seconds(value: float | None, digits: int = 1) -> str:
    """``2.50s``, or ``-`` for a figure not measured yet (not ``-s``)."""
    return "-" if value is None else f"{value:.{digits}f}s"


def table_csv(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """RFC 4180 CSV as Python's ``csv.writer`` writes it (CRLF line ends; a cell quoted when it holds a
    comma, a quote or a line break; ``None`` an empty cell), without the last ``\\n`` (``click.echo`` adds
    it). Written here because ``csv.writer`` before Python 3.11 refuses a NUL character in a cell ("need to
    escape"), which binary data in a quarantined record has."""
    return "".join(_csv_line(row) for row in [list(headers), *rows]).removesuffix("\n")


def _csv_line(row: Sequence[Any]) -> str:
    cells = []
    for value in row:
        text = "" if value is None else str(plain(value))
        if any(c in text for c in ',"\r\n'):
            text = '"' + text.replace('"', '""') + '"'
        cells.append(text)
    if cells == [""]:  # a row of one empty cell is not an empty line
        cells = ['""']
    return ",".join(cells) + "\r\n"
