"""A tiering process for the fault-injection tests (run as a subprocess, never collected by pytest).

    python _tier_worker.py HOME TABLE[,TABLE...] [--crash N:before|N:after] [--no-lock] [--until FILE]

* ``--crash N:before`` kills the process with SIGKILL right before its N-th lake commit (1-based);
  ``N:after`` right after the commit returned (the catalog already points at the new snapshot).
* ``--no-lock`` skips the cross-process tiering lock, so only the catalog's optimistic commit check fences
  concurrent cycles (as between machines sharing one catalog).
* ``--until FILE`` loops over the tables until FILE exists; otherwise runs one cycle per table.
Prints one JSON line per committed cycle: {"table", "before", "after", "rows", "attempts"}.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("home")
    parser.add_argument("tables")
    parser.add_argument("--crash", default=None)
    parser.add_argument("--no-lock", action="store_true")
    parser.add_argument("--until", default=None)
    args = parser.parse_args()

    from pyiceberg.table import Transaction

    from runtime.core.errors import ErrorCode, TidehouseError
    from runtime.lake import tiering
    from runtime.project import Project

    if args.crash:
        nth, when = args.crash.split(":")
        nth = int(nth)
        original = Transaction.commit_transaction
        count = {"commits": 0}

        def commit_transaction(self):
            is_tiering = any(
                "tidehouse.offsets" in getattr(p, "snapshot_properties", {})
                for p in getattr(self, "_snapshot_producers", [])
            )
            if is_tiering:
                count["commits"] += 1
                if count["commits"] == nth and when == "before":
                    os.kill(os.getpid(), signal.SIGKILL)
            result = original(self)
            if is_tiering and count["commits"] == nth and when == "after":
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        Transaction.commit_transaction = commit_transaction
    if args.no_lock:
        tiering.table_lock = lambda *a, **k: contextlib.nullcontext()

    project = Project.open(home=args.home, project_dir=Path(args.home).parent)
    tables = args.tables.split(",")
    while True:
        for name in tables:
            try:
                result = tiering.tier_table(project.store, project.lake, name)
            except TidehouseError as exc:  # the service logs and counts these; the next cycle catches up
                if exc.code != ErrorCode.LAKE_COMMIT_CONFLICT:
                    raise
                print(json.dumps({"table": name, "conflict": True}), flush=True)
                continue
            if result.committed:
                print(
                    json.dumps(
                        {
                            "table": name,
                            "before": list(result.offsets_before),
                            "after": list(result.offsets_after),
                            "rows": result.rows,
                            "attempts": result.attempts,
                        }
                    ),
                    flush=True,
                )
        if not args.until or Path(args.until).exists():
            break
        time.sleep(0.05)
    project.close()


if __name__ == "__main__":
    sys.exit(main())
