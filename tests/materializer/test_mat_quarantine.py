"""Expectations on a recomputed table: each violating row is quarantined once, and none is ever lost.

A ``recompute`` table re-evaluates its SQL over the whole input each micro-batch, so its expectations see the
same violating rows again and again; ``reconcile`` (run by ``--until-idle``) recomputes outside any
micro-batch. The quarantine must hold every distinct violating row exactly once, whichever of the two found
it, and a micro-batch after a reconcile must still be able to quarantine what it finds.
"""

from __future__ import annotations

import json
import random
import time

import pytest

from tests.materializer._flowkit import make_events, oracle_connection, write_batch, write_project

pytestmark = [pytest.mark.spark, pytest.mark.slow]

FLOW = """flow: qflow
trigger: 100ms
sources:
  clicks:
    format: json
    path: data/clicks
    schema: "user_id string, event_type string, item_id string, price double, ts timestamp"
layers:
  ods:
    clicks: {action: t_ingest, inputs: {raw: clicks}}
  dws:
    user_activity: {action: t_count, inputs: {events: ods.clicks}, primary_key: [user_id]}
  ads:
    top_users:
      action: t_top
      inputs: {activity: dws.user_activity}
      params: {n: 6}
      primary_key: [rank]
      expect:
        - {name: few, condition: "events < 6", on_violation: quarantine}
"""
TOP = (
    "SELECT * FROM (SELECT row_number() OVER (ORDER BY events DESC, user_id ASC) AS rank, user_id, events "
    "FROM (SELECT user_id, count(*) AS events FROM raw GROUP BY user_id)) WHERE rank <= 6"
)


def _quarantine(store) -> list[dict]:
    return [json.loads(raw) for raw in store.scan("ads.top_users__quarantine").column("raw").to_pylist()]


def _wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.25)
    return predicate()


def test_violators_of_a_recomputed_table_are_quarantined_once_each_also_after_a_reconcile(
    spark, project_dir, data_path, seed
):
    from runtime.project import Project

    rng = random.Random(seed)
    path = write_project(project_dir, flow=FLOW)
    lines = make_events(rng, 60, users=6, bad=0)
    write_batch(project_dir, "part-0", lines)
    project = Project.open()
    try:
        project.trigger(path, until_idle=True, spark=spark)  # micro-batches, then reconcile
        first = _quarantine(project.store)
        assert first and len({json.dumps(r, sort_keys=True) for r in first}) == len(first), first

        # a continuous run (no reconcile): its micro-batches find new violators and must quarantine them
        more = make_events(rng, 60, users=6, bad=0)
        write_batch(project_dir, "part-1", more)
        lines += more
        final = [
            dict(zip(("rank", "user_id", "events"), r))
            for r in oracle_connection(lines).sql(TOP).fetchall()
            if r[2] >= 6
        ]

        def quarantined_final() -> bool:
            got = {json.dumps(r, sort_keys=True) for r in _quarantine(project.store)}
            return all(json.dumps(r, sort_keys=True) in got for r in final)

        import threading

        stop = threading.Event()
        runner = threading.Thread(target=lambda: project.trigger("qflow", stop_event=stop, spark=spark))
        runner.start()
        try:
            assert _wait(quarantined_final, 120), (
                "final violators not quarantined",
                final,
                _quarantine(project.store),
            )
        finally:
            stop.set()
            runner.join(60)
        project.trigger("qflow", until_idle=True, spark=spark)
        got = _quarantine(project.store)
        texts = [json.dumps(r, sort_keys=True) for r in got]
        assert len(set(texts)) == len(texts), "a violating row was quarantined twice"
        assert quarantined_final()
        kept = {
            r["rank"]: (r["user_id"], r["events"]) for r in project.store.scan("ads.top_users").to_pylist()
        }
        assert all(kept.get(r["rank"]) != (r["user_id"], r["events"]) for r in final)  # violators not kept
    finally:
        project.close()
