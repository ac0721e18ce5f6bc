"""Memory of Spark's Python processes: the data-source processes never import pandas
(runtime/spark/worker_memory.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Runs as the process Spark starts (``python -m <module>``, or ``python -m pyspark.daemon <module>``), loads
# what Spark loads there first (the pickled data source's module), then makes pyarrow convert Python values
# (which imports pandas in an ordinary process), and tries a conversion that needs pandas.
_PROBE = """
import importlib.machinery, json, sys
sys.modules["__main__"].__spec__ = importlib.machinery.ModuleSpec(sys.argv[1], None)
if sys.argv[1] == "materializer.daemon":  # what that module, run as __main__, says of itself
    from materializer.daemon import SPARK_DAEMON
    sys.modules["__main__"].SPARK_DAEMON = SPARK_DAEMON
sys.argv = sys.argv[1:]
import runtime.spark.datasource
import runtime.storage.fastpk  # builds an Arrow array from a Python list at import
import pyarrow as pa
pa.array(["+I", "-D"])
pa.table({"a": [1, 2]})
try:
    pa.table({"a": [1]}).to_pandas()
    error = None
except ImportError as exc:
    error = str(exc)
print(json.dumps({"pandas": "pandas" in sys.modules, "error": error}))
"""


def _probe(*argv: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], cwd=REPO, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "argv",
    [
        ("pyspark.sql.streaming.python_streaming_source_runner",),
        ("pyspark.daemon", "pyspark.sql.worker.create_data_source"),
        ("pyspark.daemon", "pyspark.sql.worker.plan_data_source_read"),
        ("materializer.daemon", "pyspark.sql.worker.plan_data_source_read"),  # spark.python.daemon.module
    ],
)
def test_data_source_processes_never_import_pandas(argv):
    result = _probe(*argv)
    assert result["pandas"] is False
    assert "worker_memory" in result["error"]  # a conversion that needs pandas says why it cannot have it


@pytest.mark.parametrize(
    "argv",
    [
        ("pyspark.daemon", "pyspark.worker"),
        ("materializer.daemon", "pyspark.worker"),
        ("not.a.spark.worker",),
    ],
)
def test_other_processes_keep_pandas(argv):
    """Task workers run user code (which may use pandas) and are left alone; this also shows that the probe
    above does import pandas wherever nothing keeps it out."""
    assert _probe(*argv) == {"pandas": True, "error": None}
