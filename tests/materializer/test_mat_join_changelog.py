"""join_changelog: joins of two primary-key tables equal the batch oracle, hot and lake, over several
--until-idle runs with updates and deletes on both sides, rows that change join key, inner, left, right and
full outer joins, NULL join keys, on both data paths; and what `flow plan` says about joins it keeps and
joins it does not."""

from __future__ import annotations

import json
import random
import time

import pytest

from tests._support import scale
from tests.materializer._flowkit import canon, make_events, write_batch, write_project
from tests.materializer._joinflow import JOIN_ACTIONS, JOIN_FLOW, STRATEGIES, join_oracle

pytestmark = pytest.mark.spark


def check(project, lines) -> None:
    for table, rows in join_oracle(lines).items():
        assert canon(project.store.scan(table)) == rows, f"hot {table}"
        assert canon(project.lake.load(table).scan().to_arrow()) == rows, f"lake {table}"


def test_joins_equal_the_oracle_over_runs(spark, project_dir, data_path, seed):
    from runtime.project import Project

    rng = random.Random(seed)
    flow = write_project(project_dir, JOIN_FLOW, JOIN_ACTIONS)
    lines: list[str] = []
    project = Project.open()
    try:
        plan = project.plan(flow, spark=spark)
        for table, strategy in STRATEGIES.items():
            assert plan.table(table).strategy == strategy, plan.table(table).reason
        for run, n in enumerate((80, 60, 90, 60)[: scale(2, 4)]):  # CI: a first run, then one incremental
            more = make_events(rng, n, users=30, bad=0)
            write_batch(project_dir, f"part-{run}", more)
            lines += more
            project.trigger(flow if run == 0 else "testflow", until_idle=True, spark=spark)
            check(project, lines)
        assert project.store.has_table("ads.by_events__state")
    finally:
        project.close()


PLAN_FLOW = JOIN_FLOW.split("  ads:\n")[0] + (
    "  ads:\n"
    "    by_events:\n"
    "      action: t_by_events\n"
    "      inputs: {mid: dws.mid_users, counts: dws.per_events}\n"
    "      primary_key: [user_id]\n"
    "    not_equi:\n"
    "      action: t_not_equi\n"
    "      inputs: {mid: dws.mid_users, counts: dws.per_events}\n"
    "      primary_key: [user_id]\n"
    "    aggregated:\n"
    "      action: t_aggregated\n"
    "      inputs: {mid: dws.mid_users, counts: dws.per_events}\n"
    "      primary_key: [grp]\n"
)
PLAN_ACTIONS = {
    **JOIN_ACTIONS,
    "t_not_equi.sql": """/*---
name: t_not_equi
description: a join on a computed key
inputs: [mid, counts]
---*/
SELECT m.user_id, c.users FROM mid m JOIN counts c ON m.events + 1 = c.events
""",
    "t_aggregated.sql": """/*---
name: t_aggregated
description: an aggregate over a join
inputs: [mid, counts]
---*/
SELECT m.grp, sum(c.users) AS users FROM mid m JOIN counts c ON m.events = c.events GROUP BY m.grp
""",
}


def test_flow_plan_names_the_strategy_and_why(spark, project_dir, run_cli):
    write_project(project_dir, PLAN_FLOW, PLAN_ACTIONS)
    code, out, err = run_cli("flow", "plan", "flows/testflow.yaml", "--format", "json")
    assert code == 0, err
    tables = {t["name"]: t for t in json.loads(out)["tables"]}
    kept = tables["ads.by_events"]
    assert kept["strategy"] == "join_changelog"
    assert "left join of mid and counts ON mid.events = counts.events" in kept["reason"]
    assert kept["incremental"] == {
        "kind": "left",
        "left": "mid",
        "right": "counts",
        "keys": [["events", "events"]],
        "filtered": [],  # no Filter below the join on either side
    }
    assert tables["ads.not_equi"]["strategy"] == "recompute"
    assert "is not an equality of two columns" in tables["ads.not_equi"]["reason"]
    assert tables["ads.aggregated"]["strategy"] == "recompute"
    assert "Aggregate above the join" in tables["ads.aggregated"]["reason"]
    code, out, _ = run_cli("flow", "plan", "flows/testflow.yaml")
    assert code == 0
    block = out[out.index("ads.by_events") :]
    assert "strategy join_changelog" in block and "why: left join of mid and counts" in block


def _event(user: str) -> str:
    return json.dumps(
        {"user_id": user, "event_type": "click", "item_id": "i1", "price": 5.0, "ts": "2024-01-01T00:00:00Z"}
    )


def test_an_output_key_from_two_join_keys_fails_the_batch(spark, project_dir):
    """The output key grp comes from users of two event counts (two partitions): the batch that makes the
    second partition produce it fails with TH243, as recompute refuses several rows for one key."""
    from runtime.core.errors import ErrorCode, TidehouseError
    from runtime.project import Project

    flow = JOIN_FLOW.split("    grp_stats:\n")[0] + (
        "    per_events:\n"
        "      action: t_per_events\n"
        "      inputs: {activity: dws.user_activity}\n"
        "      primary_key: [events]\n"
        "  ads:\n"
        "    by_grp:\n"
        "      action: t_by_grp\n"
        "      inputs: {mid: dws.mid_users, counts: dws.per_events}\n"
        "      primary_key: [grp]\n"
    )
    actions = {
        **JOIN_ACTIONS,
        "t_by_grp.sql": """/*---
name: t_by_grp
description: a join whose output key is not a key of the joined rows
inputs: [mid, counts]
---*/
SELECT m.grp, c.users FROM mid m JOIN counts c ON m.events = c.events
""",
    }
    path = write_project(project_dir, flow, actions)
    project = Project.open()
    try:
        assert project.plan(path, spark=spark).table("ads.by_grp").strategy == "join_changelog"
        write_batch(project_dir, "part-0", [_event("u1")])
        project.trigger(path, until_idle=True, spark=spark)
        assert canon(project.store.scan("ads.by_grp")) == {("1", 1): 1}
        write_batch(project_dir, "part-1", [_event("u11"), _event("u11"), _event("u2"), _event("u2")])
        with pytest.raises(TidehouseError) as err:
            project.trigger("testflow", until_idle=True, spark=spark)
        assert err.value.code is ErrorCode.PRIMARY_KEY_INVALID, err.value.render()
        assert "ads.by_grp" in err.value.message and "two join key values" in err.value.message
    finally:
        project.close()


def test_behind_retention_the_state_is_rebuilt_from_both_inputs(spark, project_dir, monkeypatch, seed):
    """The join reads dws tables of another flow that runs on while the join does not: retention trims their
    changelogs under the join's next batch, which rebuilds its state from both inputs (then follows the
    changelogs again), equal to the oracle each time."""
    from materializer.incremental import join
    from runtime.project import Project
    from tests.materializer._flowkit import oracle_connection
    from tests.materializer._joinflow import JOIN_ORACLE

    calls = {"rebuild": 0, "step": 0}
    for name in calls:
        real = getattr(join.Partitioner, name)

        def counted(self, *args, _real=real, _name=name):
            calls[_name] += 1
            return _real(self, *args)

        monkeypatch.setattr(join.Partitioner, name, counted)
    (project_dir / "tidehouse.yaml").write_text("storage:\n  retention: 1s\n  segment_bytes: 2048\n")
    producer = JOIN_FLOW.split("    grp_stats:\n")[0] + (
        "    per_events:\n"
        "      action: t_per_events\n"
        "      inputs: {activity: dws.user_activity}\n"
        "      primary_key: [events]\n"
    )
    path = write_project(project_dir, producer, JOIN_ACTIONS)
    joiner = project_dir / "flows" / "joiner.yaml"
    joiner.write_text(
        "flow: joiner\ntrigger: 100ms\ntiering: {interval: 1s}\nlayers:\n  ads:\n    by_events:\n"
        "      action: t_by_events\n      inputs: {mid: dws.mid_users, counts: dws.per_events}\n"
        "      primary_key: [user_id]\n"
    )
    rng = random.Random(seed)
    lines: list[str] = []
    project = Project.open()

    def produce(part: int) -> None:
        more = make_events(rng, 60, users=30, bad=0)
        write_batch(project_dir, f"part-{part}", more)
        lines.extend(more)
        project.trigger(path if part == 0 else "testflow", until_idle=True, spark=spark)

    def check(run: str) -> None:
        want = canon(oracle_connection(lines).sql(JOIN_ORACLE["ads.by_events"]).to_arrow_table())
        assert canon(project.store.scan("ads.by_events")) == want, run

    try:
        produce(0)
        project.trigger(joiner, until_idle=True, spark=spark)
        assert project.plan("joiner", spark=spark).table("ads.by_events").strategy == "join_changelog"
        check("first")
        assert calls["rebuild"] == 1
        for part in (1, 2):
            produce(part)
            time.sleep(1.5)  # older than storage.retention: the next final tiering cycle may trim them
        logs = [log for t in ("dws.mid_users", "dws.per_events") for log in project.store._table(t).logs]
        assert any(log.first_offset > 0 for log in logs), "retention trimmed the inputs' changelogs"
        project.trigger("joiner", until_idle=True, spark=spark)
        check("behind retention")
        assert calls["rebuild"] == 2
        steps = calls["step"]
        produce(3)
        project.trigger("joiner", until_idle=True, spark=spark)
        check("following again")
        assert calls["rebuild"] == 2 and calls["step"] > steps
    finally:
        project.close()
