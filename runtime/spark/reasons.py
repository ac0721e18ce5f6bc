"""Spark's own words for why something failed, out of the text of its error: a Py4J error's Java exception
and stack, a captured PySpark error, a ``Caused by:`` chain. A user is shown one line, not the stack."""

from __future__ import annotations

import re

_EXCEPTION = re.compile(r"^:?\s*((?:[\w$]+\.)+[\w$]*(?:Exception|Error)\b.*)$")
_CLASS = re.compile(r"(?:[\w$]+\.)+[\w$]+")
# Spark's error classes: [FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH] Encountered error while ...
_ERROR_CLASS = re.compile(r"\[[A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*\] ")


def java_summary(text: str) -> str:
    """The Java exception's line of a Py4J error's text (``java.lang.IllegalStateException: ...``), without
    Py4J's preamble and the stack; else the text's first non-empty line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        found = _EXCEPTION.match(line)
        if found:
            return found.group(1)
    return lines[0] if lines else text


def java_cause(text: str) -> str:
    """Spark's own words in a Java error's text: the message of its innermost ``Caused by:``, else of its
    exception line (:func:`java_summary`), without the exception's class."""
    causes = [
        line.strip()[len("Caused by:") :].strip()
        for line in text.splitlines()
        if line.strip().startswith("Caused by:")
    ]
    line = causes[-1] if causes else java_summary(text)
    cls, sep, message = line.partition(": ")
    return message.strip() if sep and _CLASS.fullmatch(cls) else line


def spark_reason(text: str) -> str:
    """The innermost line of ``text`` that names one of Spark's error classes, from the class on (a wrapping
    ``[STREAM_FAILED]`` or ``awaitResult`` line is outer); else :func:`java_cause`'s line."""
    found = [line[m.start() :].strip() for line in text.splitlines() if (m := _ERROR_CLASS.search(line))]
    return found[-1] if found else java_cause(text)


def error_line(exc: BaseException) -> str:
    """One line for a failed batch or query: Spark's own words for an error of Spark's (its JVM, through
    Py4J, or a captured PySpark error), else the exception's type and first line."""
    text = str(exc)
    if "org.apache.spark" in text or _ERROR_CLASS.search(text):
        return spark_reason(text)
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
