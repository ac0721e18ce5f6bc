"""Spark's Python daemon for the materializer's tasks (materializer/daemon.py): what it loads before it
forks, and where the façade sets it. That executors run it is checked by the cluster tests (their logs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from materializer import daemon
from materializer.sparkconf import SIMPLIFIED_TRACEBACK as SIMPLIFIED
from materializer.sparkconf import WAREHOUSE, spark_conf
from runtime.core.config import Config

REPO = Path(__file__).resolve().parents[2]

# a fresh interpreter, as Spark starts the daemon: what one preload loads, and the threads it leaves
_PROBE = """
import gc, json, sys, threading
from materializer.daemon import preload
before = set(sys.modules)
loaded = preload(sys.argv[1])
print(json.dumps({
    "loaded": list(loaded),
    "new": sorted(set(sys.modules) - before),
    "python_threads": threading.active_count(),
}))
"""


def _probe(worker_module: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, worker_module], cwd=REPO, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_task_workers_daemon_loads_every_task_module_and_starts_no_thread():
    result = _probe("pyspark.worker")
    assert result["loaded"] == list(daemon.TASK_MODULES)
    assert set(daemon.TASK_MODULES) <= set(result["new"])
    assert {"pyarrow", "pyiceberg", "materializer.strategies"} <= set(result["new"])  # and what they import
    assert result["python_threads"] == 1  # forking a process that runs Python threads could deadlock


def test_other_workers_daemons_load_nothing():
    """Spark's data-source planning workers (and any other worker module) get plain ``pyspark.daemon``."""
    result = _probe("pyspark.sql.worker.plan_data_source_read")
    assert result["loaded"] == []
    assert not [m for m in result["new"] if m.split(".")[0] in ("materializer", "runtime", "pyiceberg")]


def test_the_daemon_loads_pyspark_from_the_installed_package_when_spark_puts_its_zip_first():
    """As Spark starts the daemon on an executor: its pyspark.zip first on PYTHONPATH (pip's pyspark ships
    the zip Spark's workers get). The preload then compiles nothing from the zip."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = [str(lib / "pyspark.zip"), *map(str, sorted(lib.glob("py4j-*.zip")))]
    probe = (
        "import sys\nfrom materializer.daemon import installed_pyspark_first, preload\n"
        "sys.path[:] = installed_pyspark_first(sys.path)\npreload('pyspark.worker')\n"
        "import pyspark.worker\nprint(pyspark.__file__)\nprint(pyspark.worker.__file__)"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*zips, str(REPO)]))
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    files = out.stdout.split()
    assert files[0] == pyspark.__file__ and not any("pyspark.zip" in f for f in files), files


def test_a_module_that_fails_to_load_fails_the_daemon(monkeypatch):
    monkeypatch.setattr(daemon, "TASK_MODULES", ("json", "materializer.no_such_module"))
    with pytest.raises(ModuleNotFoundError, match="no_such_module"):
        daemon.preload("pyspark.worker")


def test_the_daemon_names_its_worker_module():
    assert daemon.worker_module(["daemon.py", "pyspark.sql.worker.plan_data_source_read"]) == (
        "pyspark.sql.worker.plan_data_source_read"
    )
    assert daemon.worker_module(["daemon.py"]) == "pyspark.worker"
    assert daemon.__name__ == daemon.TASK_DAEMON


@pytest.mark.parametrize(
    "spark, daemon, traceback",
    [
        ({"master": "spark://10.0.0.1:7077"}, "materializer.daemon", "false"),
        ({"master": "local[2]"}, None, None),  # the driver path: few task workers, and a laptop's memory
        ({"remote": "sc://10.0.0.1:15002"}, None, "false"),  # the daemon: the Connect server's own --conf
        (
            {
                "master": "spark://h:7077",
                "conf": {"spark.python.daemon.module": "my.daemon", SIMPLIFIED: "true"},
            },
            "my.daemon",
            "true",
        ),
    ],
)
def test_the_facade_sets_the_daemon_and_one_worker_environment_on_a_cluster(
    spark, daemon, traceback, tmp_path
):
    conf = spark_conf(Config(tmp_path, tmp_path, {f"spark.{k}": v for k, v in spark.items()}))
    assert conf.get("spark.python.daemon.module") == daemon
    assert conf.get(SIMPLIFIED) == traceback
    # Spark's own catalog folder under the home, not spark-warehouse/ wherever the command ran (Connect: the
    # server's setting)
    assert conf.get(WAREHOUSE) == (None if "remote" in spark else str(tmp_path / "spark-warehouse"))
    ours = ("spark.python.daemon.module", SIMPLIFIED, WAREHOUSE)
    given = spark.get("conf", {})
    assert {k: v for k, v in conf.items() if k not in ours} == {
        k: v for k, v in given.items() if k not in ours
    }
