"""Starting Spark against a master or a Spark Connect server, and what a failed start says.

A standalone master (``spark://host:port``) that is not there is found before the driver JVM starts: Spark
itself retries its registration for about a minute, then stops its SparkContext, and the error that reaches
Python is a stopped context's Java stack, not the address it could not reach. A Connect server that is not
there is found before the client is made: the client retries it for minutes, and again at the process's exit.
A start that fails for another reason is reported in Spark's own words (:mod:`runtime.spark.reasons`).
"""

from __future__ import annotations

import socket
from urllib.parse import urlparse

CONNECT_PORT = 15002  # Spark Connect's default port


def unreachable(master: str, timeout: float = 5.0) -> str | None:
    """For a ``spark://host:port[,host:port...]`` master: None when one of its masters accepts a TCP
    connection, else why none did (``127.0.0.1:1: Connection refused``). None for other masters and for a
    URL Spark would refuse itself (no port): Spark reports those."""
    if not master.startswith("spark://"):
        return None
    addresses = []
    for address in master[len("spark://") :].split(","):
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            return None
        addresses.append((host.strip("[]"), int(port)))
    return _none_answers(addresses, timeout)


def connect_unreachable(url: str, timeout: float = 5.0) -> str | None:
    """For a Spark Connect URL (``sc://host[:port][/;param=value...]``, port 15002 by default): None when its
    server accepts a TCP connection, else why not. The Connect client retries an unreachable server for
    minutes before it gives up, and retries again at exit."""
    parsed = urlparse(url.replace("sc://", "http://", 1))
    try:
        host, port = parsed.hostname, parsed.port or CONNECT_PORT
    except ValueError:  # a port that is not a number: the client reports the URL
        return None
    return _none_answers([(host, port)], timeout) if host else None


def _none_answers(addresses: list[tuple[str, int]], timeout: float) -> str | None:
    reasons = []
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return None
        except OSError as exc:
            reasons.append(f"{host}:{port}: {exc.strerror or exc or type(exc).__name__}")
    return "; ".join(reasons)
