"""Side by side with Spark Declarative Pipelines: the same 4-layer flow, freshness per layer (issue 8).

One generator writes JSON event files at a steady rate into a directory. The same four layers —
land raw (ODS) → clean (DWD) → spend per user (DWS) → the 100 biggest spenders (ADS) — run as

* an idiomatic SDP pipeline (``benchmarks/sdp_project``: streaming tables for ODS/DWD, materialized views for
  DWS/ADS), driven the way its users keep it fresh: ``spark-pipelines run`` in a loop with no pause, and on
  a 60 s schedule;
* a Tidehouse flow (``benchmarks/vs_sdp_flow``) under ``tidehouse flow trigger`` with tiering every 5 s and
  every 30 s.

Probes are marker events (a unique ``user_id`` with a large price) written at known times; per layer we
record when the marker's effect first becomes visible to an outside reader — SDP: a batch read of the
warehouse's committed Parquet files; Tidehouse: the hot table through the store, and the lake table
through pyiceberg. The systems run one after the other on the same input rate (the machine has 2 cores).

    .venv/bin/pip install -e '.[bench]' && .venv/bin/python -m benchmarks.vs_sdp   # full, < 20 min
    .venv/bin/python -m benchmarks.vs_sdp --quick                                   # smoke, ~3 min

Writes the ``vs_sdp`` section of docs/benchmarks.md and docs/img/vs_sdp.png; docs/vs_sdp.md explains the
settings.

Modules, in the order a run uses them: ``generator`` (the input), ``readers`` and ``prober`` (what each
table shows, when), ``sdp`` and ``tidehouse`` (the two systems, with ``process`` for their processes),
``run`` (one measured phase and its catch-up), ``phase`` (its figures), ``report`` (the table and the plot)
and ``cli`` (the command line). The constants both systems share are here.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAYERS = ("ODS", "DWD", "DWS", "ADS")
SDP_TABLES = {"ODS": "ods_events", "DWD": "dwd_events", "DWS": "dws_user_spend", "ADS": "ads_top_spenders"}
SDP_STREAMING = {"ODS", "DWD"}  # streaming tables (file sink with a commit log); the others are views
TH_TABLES = {"ODS": "ods.events", "DWD": "dwd.events", "DWS": "dws.user_spend", "ADS": "ads.top_spenders"}
PROBE_PREFIX = "zz-probe-"  # sorts after every generated user id, so lake min/max statistics prune it
# A probe's price is PROBE_PRICE + its number: each new probe user becomes the top spender (rank 1 of the
# ADS top 100) and stays in the top 100 for the next 99 probes, long enough for any tiering cycle to see it.
PROBE_PRICE = 1_000_000.0
IMG = REPO / "docs" / "img" / "vs_sdp.png"
