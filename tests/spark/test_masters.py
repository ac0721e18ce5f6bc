"""A standalone master or a Spark Connect server that is not there fails the start at once with its address
(runtime.spark.masters): Spark itself retried a master's registration for about a minute and then reported a
stopped SparkContext's Java stack, 46 lines whose cause was nowhere in them; the Connect client retried for
minutes without a word. Another failed start reports the Java exception's line."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.spark.gateway import launcher_reason
from runtime.spark.masters import connect_unreachable, unreachable
from runtime.spark.reasons import error_line, java_cause, java_summary, spark_reason

TIDEHOUSE = str(Path(sys.executable).with_name("tidehouse"))


def _closed_port() -> int:
    with socket.socket() as s:  # a port no one listens on once this socket is closed
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _ports() -> Iterator[tuple[int, int]]:
    """(a port a server listens on, one nobody does) on 127.0.0.1, while the block runs."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1], _closed_port()


def _refused(why: str | None, port: int) -> bool:
    return why is not None and why.startswith(f"127.0.0.1:{port}: ") and "refused" in why.lower()


def test_a_master_that_accepts_connections_is_reachable():
    with _ports() as (up, down):
        assert unreachable(f"spark://127.0.0.1:{up}") is None
        assert unreachable(f"spark://127.0.0.1:{down},127.0.0.1:{up}") is None  # one of HA masters suffices
        assert _refused(unreachable(f"spark://127.0.0.1:{down}", timeout=2), down)


def test_a_connect_server_that_accepts_connections_is_reachable():
    with _ports() as (up, down):
        assert connect_unreachable(f"sc://127.0.0.1:{up}") is None
        assert connect_unreachable(f"sc://127.0.0.1:{up}/;user_id=me;session_id=x") is None
        assert _refused(connect_unreachable(f"sc://127.0.0.1:{down}/;user_id=me", timeout=2), down)
    assert connect_unreachable("sc://host:port") is None  # not a port: the client reports the URL


def test_only_standalone_masters_with_a_port_are_checked():
    for master in ("local[*]", "local[2]", "yarn", "spark://127.0.0.1", "spark://"):
        assert unreachable(master) is None, master  # Spark reports a URL without a port itself


def test_a_py4j_error_is_reported_by_its_java_exception_line():
    text = (
        "An error occurred while calling None.org.apache.spark.sql.classic.SparkSession.\n"
        ": java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext.\n"
        "This stopped SparkContext was created at:\n\n"
        "org.apache.spark.api.java.JavaSparkContext.<init>(JavaSparkContext.scala:59)\n"
        "\tat py4j.Gateway.invoke(Gateway.java:238)\n"
    )
    assert java_summary(text) == (
        "java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext."
    )
    gateway = "[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number."
    assert java_summary(f"\n{gateway}\n") == gateway


def test_a_refused_setting_is_reported_in_sparks_own_words():
    text = (
        "java.lang.IllegalArgumentException: Error while instantiating 'SessionStateBuilder':\n"
        "\tat org.apache.spark.sql.SparkSession$.instantiateSessionState(SparkSession.scala:1208)\n"
        "Caused by: org.apache.spark.SparkIllegalArgumentException: [INVALID_CONF_VALUE.TYPE_MISMATCH] The "
        "value 'abc' in the config \"spark.sql.shuffle.partitions\" is invalid.\n\tat x.y(Z.scala:1)\n"
    )
    assert java_cause(text) == (
        "[INVALID_CONF_VALUE.TYPE_MISMATCH] The value 'abc' in the config \"spark.sql.shuffle.partitions\" "
        "is invalid."
    )
    assert java_cause("org.apache.spark.SparkException: it failed\n\tat a.b(C.java:1)\n") == "it failed"
    assert java_cause("no Java here") == "no Java here"


def test_a_failure_is_told_by_its_innermost_error_class():
    text = (
        "An error occurred while calling o188.getResult.\n"
        ": org.apache.spark.SparkException: Exception thrown in awaitResult: \n"
        "\tat org.apache.spark.util.SparkThreadUtils$.awaitResult(SparkThreadUtils.scala:56)\n"
        "Caused by: org.apache.spark.SparkException: [FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH] "
        "Encountered error while reading file file:///d/a.parquet. SQLSTATE: KD001\n"
        "Caused by: org.apache.spark.sql.execution.datasources.SchemaColumnConvertNotSupportedException: "
        "column: [id], physicalType: INT64, logicalType: int\n"
    )
    why = "[FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH] Encountered error while reading file "
    assert spark_reason(text) == why + "file:///d/a.parquet. SQLSTATE: KD001"
    assert spark_reason(
        "[STREAM_FAILED] Query [id = 1] terminated with exception: x\n[DIVIDE_BY_ZERO] y"
    ) == ("[DIVIDE_BY_ZERO] y")
    assert spark_reason(": java.lang.IllegalStateException: stopped\n\tat a.b(C.java:1)") == "stopped"
    assert error_line(RuntimeError(text)) == why + "file:///d/a.parquet. SQLSTATE: KD001"
    assert error_line(ValueError("bad value\nmore")) == "ValueError: bad value"
    assert error_line(KeyError()) == "KeyError"


def test_the_launchers_reason_is_read_from_what_it_wrote():
    thread = (
        "WARNING: Using incubator modules: jdk.incubator.vector\n"
        "Exception in thread \"main\" org.apache.spark.SparkException: When running with master 'yarn' "
        "either HADOOP_CONF_DIR or YARN_CONF_DIR must be set in the environment.\n"
        "\tat org.apache.spark.deploy.SparkSubmitArguments.error(SparkSubmitArguments.scala:670)\n"
    )
    assert launcher_reason(thread) == (
        "When running with master 'yarn' either HADOOP_CONF_DIR or YARN_CONF_DIR must be set in the "
        "environment."
    )
    jvm = (
        "Invalid maximum heap size: -Xmxlots\nError: Could not create the Java Virtual Machine.\n"
        "Error: A fatal exception has occurred. Program will exit.\n"
    )
    assert launcher_reason(jvm) == (
        "Invalid maximum heap size: -Xmxlots: the Java virtual machine could not be created"
    )
    assert launcher_reason("Error: Missing application resource.\n") == "Missing application resource."
    script = (
        "/venv/pyspark/bin/spark-class: line 71: /no/jdk/bin/java: No such file or directory\n"
        "/venv/pyspark/bin/spark-class: line 97: CMD: bad array subscript\n"
    )
    assert launcher_reason(script) == "/no/jdk/bin/java: No such file or directory"
    vm = "Error occurred during initialization of VM\nToo small maximum heap\n"
    assert launcher_reason(vm) == "Error occurred during initialization of VM: Too small maximum heap"
    assert launcher_reason("WARNING: Using incubator modules: jdk.incubator.vector\n") is None


def _register(tmp_path: Path, project: str, **environ: str) -> subprocess.CompletedProcess:
    """``tidehouse action register actions/`` (it checks the action's SQL with Spark) in a project."""
    (tmp_path / "tidehouse.yaml").write_text(project)
    (tmp_path / "actions").mkdir()
    (tmp_path / "actions" / "ingest.sql").write_text(
        "/*---\nname: ingest\ndescription: raw rows\ninputs: [raw]\n---*/\nSELECT a FROM raw\n"
    )
    env = {**os.environ, "TIDEHOUSE_HOME": str(tmp_path / "home"), **environ}
    cmd = [TIDEHOUSE, "action", "register", "actions/"]
    return subprocess.run(
        cmd, check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    "conf,code,says",
    [
        # spark-submit refused it: a Java stack trace, then "Java gateway process exited ..."
        ("spark.executor.memory: lots", "TH400", "could not start Spark: Executor memory must be a positive"),
        ("spark.driver.memory: lots", "TH400", "could not start Spark: Invalid maximum heap size: -Xmxlots"),
        # the session state refused it at the first query: an internal error (exit 1) with 40 lines of Java
        ("spark.sql.shuffle.partitions: abc", "TH100", "spark.conf: Spark refuses a setting: [INVALID_CONF"),
    ],
    ids=["launcher", "jvm", "session-state"],
)
@pytest.mark.slow  # each starts a driver JVM (session-state a whole session: ~8 s alone, ~45 s in the matrix)
def test_a_setting_spark_refuses_is_one_line_and_exit_2(tmp_path, conf, code, says):
    proc = _register(tmp_path, f"spark:\n  conf:\n    {conf}\n")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    # one line: no Java stack, and the JVM's own output is in <home>/logs/jvm.log, not on the terminal
    assert len(lines) == 1 and says in lines[0] and f"[{code}]" in lines[0], proc.stderr
    key = conf.split(":")[0]  # the message names the key, its words or its value: the error is at its line
    assert lines[0].startswith(f"error: {tmp_path / 'tidehouse.yaml'}:3:5: spark.conf.{key}: "), lines[0]
    jvm = (tmp_path / "home" / "logs" / "jvm.log").read_text()
    if code == "TH100":  # the JVM started (Spark refused the setting later): its start-up notice went there
        assert "WARNING: Using incubator modules" in jvm, jvm


def test_a_java_that_is_not_there_is_named(tmp_path):
    proc = _register(tmp_path, "", JAVA_HOME=str(tmp_path / "no-jdk"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"error: could not start Spark: {tmp_path / 'no-jdk'}/bin/java: No such"), (
        proc.stderr
    )
    assert "check that Java 17 is installed (JAVA_HOME" in proc.stderr and len(proc.stderr.splitlines()) == 1


@pytest.mark.parametrize("where", ["master: spark", "remote: sc"])
def test_a_command_that_starts_spark_on_a_server_that_is_not_there_exits_2_naming_it(tmp_path, where):
    """The master, or the Connect server: the Connect client retried one that refused for minutes, printing
    nothing, and again in its exit handler (a run was still there after 10 minutes)."""
    port = _closed_port()
    proc = _register(tmp_path, f"spark:\n  {where}://127.0.0.1:{port}\n")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    what = "Spark master" if where.startswith("master") else "Spark Connect server"
    url = f"{where.split(': ')[1]}://127.0.0.1:{port}"
    assert f"could not reach the {what} {url}: 127.0.0.1:{port}: " in proc.stderr, proc.stderr
    assert "\tat " not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
