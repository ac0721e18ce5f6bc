"""Starting the driver JVM with its own output in the log folder.

PySpark starts the driver JVM (``spark-submit``) with this process's stdout and stderr. With a log folder
(the CLI's ``<home>/logs``, where Spark's log already goes) the JVM's own output goes to ``jvm.log`` there
instead: the JVM's warnings (at every start: its incubator modules) do not reach the terminal, and when
``spark-submit`` refuses to start (a malformed ``spark.executor.memory``, ``yarn`` without a Hadoop
configuration), its reason is read from that file and shown as one line, where PySpark would print a Java
stack trace and then only "Java gateway process exited before sending its port number". The JVM is started
as PySpark's session builder starts it (the same ``spark-submit`` arguments,
:func:`pyspark.java_gateway.launch_gateway`): the builder then finds it running.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from runtime.core.errors import ErrorCode, TidehouseError

JVM_LOG = "jvm.log"
ROLL_BYTES = 16 * 1024 * 1024  # a larger jvm.log is renamed jvm.log.1 when a JVM starts (one kept)

_STARTED: dict[str, Path] = {}  # "log": the jvm.log of the JVM this process started

_THREAD = re.compile(r'^Exception in thread "[^"]*" (?:[\w$]+\.)+[\w$]+: (.+)$')
_ERROR = re.compile(r"^Error: (.+)$")
_SCRIPT = re.compile(r"^\S*spark-(?:class|submit): line \d+: ")


def launch(options: Mapping[str, str], log_dir: str | os.PathLike) -> None:
    """Start this process's driver JVM with ``options`` (every ``spark.*`` option the session builder
    holds, ``spark.master`` and ``spark.app.name`` among them), its output appended to ``log_dir/jvm.log``.
    A JVM that exits before it serves is ``SPARK_START`` with the reason it wrote there."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    path = Path(log_dir) / JVM_LOG
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file() and path.stat().st_size > ROLL_BYTES:
        path.replace(path.with_name(JVM_LOG + ".1"))
    conf = SparkConf()  # no JVM yet: only holds the options, as the builder's own SparkConf does
    for key, value in options.items():
        conf.set(key, value)
    with open(path, "ab") as err:
        start = err.tell()
        try:
            gateway = launch_gateway(conf, popen_kwargs={"stdout": err, "stderr": err})
        except Exception as exc:  # noqa: BLE001 - PySpark's JAVA_GATEWAY_EXITED, a missing java
            raise TidehouseError(
                ErrorCode.SPARK_START,
                f"could not start Spark: {launcher_reason(_written(path, start)) or exc}",
                hint="check that Java 17 is installed (JAVA_HOME, or java on the PATH) and spark.master and "
                f"spark.conf in the project file; the JVM's output: {path}",
            ) from None
    SparkContext._ensure_initialized(gateway=gateway)
    _STARTED["log"] = path


def driver_ended(wait: float = 0.0) -> str | None:
    """How this process's driver JVM ended (``killed by signal 9``, ``exit code 1``): None while it runs
    (after ``wait`` seconds for it to end), or when this process started none."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        return None
    try:
        code = proc.wait(timeout=wait) if wait > 0 else proc.poll()
    except subprocess.TimeoutExpired:
        return None
    if code is None:
        return None
    how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    where = _STARTED.get("log")
    return f"{how}; its last output is in {where}" if where is not None else how


def _written(path: Path, start: int) -> str:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(1 << 20).decode(errors="replace")


def launcher_reason(text: str) -> str | None:
    """Why ``spark-submit`` did not start, from what it wrote: the message of the main thread's exception,
    else its ``Error:`` line (for a JVM that could not be created, the line before it, which says why), else
    its first line that is not a warning; None when it wrote nothing else."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if found := _THREAD.match(line):
            return found.group(1).strip()
    for i, line in enumerate(lines):
        if found := _ERROR.match(line):
            if found.group(1).startswith("Could not create the Java Virtual Machine") and i:
                return f"{lines[i - 1]}: the Java virtual machine could not be created"
            return found.group(1).strip()
    said = [_SCRIPT.sub("", line) for line in lines if not line.startswith("WARNING:")]
    if len(said) > 1 and said[0].startswith("Error occurred during initialization of VM"):
        return f"{said[0]}: {said[1]}"  # the JVM's reason follows: "Too small maximum heap"
    return said[0] if said else None  # e.g. Spark's launch script: "/no/jdk/bin/java: No such file or ..."
