"""Starting Spark's driver against a master, and what a failed start says.

A standalone master (``spark://host:port``) that is not there is found before the driver JVM starts: Spark
itself retries its registration for about a minute, then stops its SparkContext, and the error that reaches
Python is a stopped context's Java stack, not the address it could not reach. A start that fails for another
reason is reported by the Java exception's own line, without the stack.
"""

from __future__ import annotations

import re
import socket

_EXCEPTION = re.compile(r"^:?\s*((?:[\w$]+\.)+[\w$]*(?:Exception|Error)\b.*)$")


def unreachable(master: str, timeout: float = 5.0) -> str | None:
    """For a ``spark://host:port[,host:port...]`` master: None when one of its masters accepts a TCP
    connection, else why none did (``127.0.0.1:1: Connection refused``). None for other masters and for a
    URL Spark would refuse itself (no port): Spark reports those."""
    if not master.startswith("spark://"):
        return None
    reasons = []
    for address in master[len("spark://") :].split(","):
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            return None
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
                return None
        except OSError as exc:
            reasons.append(f"{address.strip()}: {exc.strerror or exc or type(exc).__name__}")
    return "; ".join(reasons)


def java_summary(text: str) -> str:
    """The Java exception's line of a Py4J error's text (``java.lang.IllegalStateException: ...``), without
    Py4J's preamble and the stack; else the text's first non-empty line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        found = _EXCEPTION.match(line)
        if found:
            return found.group(1)
    return lines[0] if lines else text
