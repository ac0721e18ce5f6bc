"""Scale-out (issue 18): how fast each way of running the vs_sdp flow works off a backlog, and what its driver
costs.

One run measures, on the same 4-layer logic as ``benchmarks/vs_sdp`` (land raw → clean → spend per user →
the 100 biggest spenders; the Tidehouse flow ``benchmarks/vs_sdp_flow``, the SDP project
``benchmarks/sdp_project``) and the same backlog of JSON event files (5,000,000 rows by default, written
before any run):

* **SDP**: one ``spark-pipelines run`` (``--remote local[2]``, as vs_sdp runs it);
* **Tidehouse local**: ``tidehouse flow trigger --until-idle`` on ``local[*]`` (data path: the driver, what
  ``materializer.data_path: auto`` picks there);
* **Tidehouse local, executor path**: the same with ``materializer.data_path: executors``: whether ``auto``
  picks the faster path on one machine for a backlog too;
* **Tidehouse cluster, 1 and 2 workers**: the same on a Spark standalone cluster on this machine (the
  launcher of the cluster tests, ``tests/spark_services.py``; one core per worker by default), data path
  ``auto`` = the executors.

Each path runs twice on a fresh state: over an empty input directory, then over the backlog; the backlog
run minus the empty run is the time the backlog cost (start-up, table creation, the first query start and
shutdown are in both), by the wall clock and by each run's own clock (Tidehouse's "finished in", SDP's log
stamps). CPU seconds are sampled from ``/proc`` per process tree (``cpu``): the driver (the ``tidehouse``
process or ``spark-pipelines``, with their JVM and Python workers) and the cluster (master, workers,
executors and their Python workers); rows per CPU second is the rate least disturbed by other work on the
machine.

    .venv/bin/python -m benchmarks.scale_out --rows 15000000 --repeat 5   # the run of record: ~40 min
    .venv/bin/python -m benchmarks.scale_out --repeat 3      # 5M rows (the issue's least), ~15 min
    .venv/bin/python -m benchmarks.scale_out                 # one round of 5M rows, ~6 min on 2 cores
    .venv/bin/python -m benchmarks.scale_out --rows 200000   # reduced

The full run's backlog is 15M rows: a sustained rate, of which each JVM's warm-up is a small part. Every
JVM compiles the code it runs hot on its own (one executor's JIT threads: 6.8 CPU s in a 5M-row backlog run,
6.4 s in a 15M-row one, ~2 s in an empty run), SDP's one JVM too; the backlog's share of it was about a fifth
of the cluster's added CPU at 5M rows and under a tenth at 15M, and two executors pay it twice.

With ``--repeat N`` the paths run in N interleaved rounds; the report shows each path's median round (by
backlog cost) and lists every round, since two runs of one path on this machine differ by up to a quarter.

Modules: ``cpu`` (process-tree CPU), ``runs`` (the backlog, one run, one path), ``report`` (figures and the
section of docs/benchmarks.md; no Spark), ``cli`` (the command line).
"""

from __future__ import annotations

FLOW_FILE = "flows/vs_sdp.yaml"
TABLES = {"ODS": "ods.events", "DWD": "dwd.events", "DWS": "dws.user_spend", "ADS": "ads.top_spenders"}
# key -> (label in the report, standalone workers; 0: no cluster)
PATHS: dict[str, tuple[str, int]] = {
    "sdp": ("SDP (spark-pipelines, local[2])", 0),
    "local": ("Tidehouse local[*], driver path", 0),
    "local-exec": ("Tidehouse local[*], executor path", 0),
    "cluster1": ("Tidehouse cluster, 1 worker", 1),
    "cluster2": ("Tidehouse cluster, 2 workers", 2),
}
# the paths that set ``materializer.data_path`` (the others leave it at ``auto``)
DATA_PATHS: dict[str, str] = {"local-exec": "executors"}
