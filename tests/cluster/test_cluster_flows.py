"""Flows on a Spark standalone cluster (a master and 2 workers from the pyspark install), as a cluster user
runs them: ``spark.master: spark://…`` in the project file, ``tidehouse flow trigger`` as the driver, the
data path in the executors (``materializer.data_path: auto``).

* the 4-layer test flow survives ``kill -9`` of one worker mid-run (its executor and Python workers with it;
  the flow goes on with the other worker) and then ``kill -9`` of the driver; a resumed ``--until-idle``
  leaves every table, hot and lake, equal to the batch oracle — with the hot store on the local disk, and
  on SeaweedFS + PostgreSQL with the lake in the REST catalog (the team setup);
* the shipped flows run to the batch oracle, hot and lake;
* a ``join_log`` joins the log rows of unchanged partitions in the executors' tasks.

CI runs the local-disk variant; the shared-services variant, the shipped flows and the ``join_log`` run with
``TIDEHOUSE_SCALE=full`` (README: the full suite).
"""

from __future__ import annotations

import random
import time

import pytest

from tests._support import scale
from tests.cluster._clusterkit import (
    CLUSTER_CONF,
    assert_log_join_in_tasks,
    assert_oracle,
    assert_shop_flow,
    cli,
    daemon_starts,
    kill_9,
    run_shop,
    set_spark,
    shop_oracle,
    start_trigger,
    wait_for,
)
from tests.examples._library import FLOW_ORDER
from tests.materializer._flowkit import make_events, oracle, write_batch, write_project
from tests.services import shared_settings, write_project_file

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.cluster]


@pytest.mark.parametrize(
    "storage",
    [
        "local",
        pytest.param(  # in CI the Connect test covers the cluster with a worker killed; storage/ the services
            "shared",
            marks=pytest.mark.skipif(scale(True, False), reason="TIDEHOUSE_SCALE=full: shared services"),
        ),
    ],
)
def test_four_layer_flow_survives_kill_9_of_a_worker_and_of_the_driver(
    spark_cluster, project_dir, home, seed, storage, request, tmp_path
):
    from runtime.project import Project

    rng = random.Random(seed)
    if storage == "shared":
        settings = shared_settings(request.getfixturevalue("seaweedfs"), request.getfixturevalue("postgres"))
        write_project_file(project_dir, settings, {"storage": {"fsync": False}})
    set_spark(project_dir, {"master": spark_cluster.url, "conf": CLUSTER_CONF})
    write_project(project_dir)
    lines = make_events(rng, 150, users=20)
    write_batch(project_dir, "part-0", lines)
    daemons = daemon_starts(spark_cluster)
    log = tmp_path / "trigger.log"
    project = Project.open()  # a reader in the test process: offsets and, at the end, the oracle
    victim = rng.randrange(2)
    proc = start_trigger(project_dir, home, "flows/testflow.yaml", log)
    try:
        store = project.store

        def ends(table: str) -> int:
            return sum(store.end_offsets(table)) if store.has_table(table) else 0

        wait_for(lambda: ends("ads.top_users") > 0, 600, "the first batches of every layer", proc, log)
        more = make_events(rng, 120, users=20)
        lines += more
        write_batch(project_dir, "part-1", more)
        dws_before = ends("dws.user_activity")
        time.sleep(rng.uniform(0.0, 2.0))
        spark_cluster.kill_worker(victim)  # mid-run: the flow goes on with the other worker
        print(f"[cluster] killed worker {victim}")
        expected_ods = sum(oracle(lines)["ods.clicks"].values())
        wait_for(
            lambda: ends("ods.clicks") >= expected_ods and ends("dws.user_activity") > dws_before,
            600,
            "the flow to take the new input on one worker",
            proc,
            log,
        )
        last = make_events(rng, 80, users=20)
        lines += last
        write_batch(project_dir, "part-2", last)
        time.sleep(rng.uniform(0.5, 4.0))  # somewhere in its next micro-batches
        kill_9(proc)
        print("[cluster] killed the driver")
    finally:
        if proc.poll() is None:
            kill_9(proc)
        spark_cluster.restart_worker(victim)
    project.close()
    done = cli(project_dir, home, "flow", "trigger", "testflow", "--until-idle")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"on {spark_cluster.url} (data path: executors)" in done.stdout
    started = {log: n for log, n in daemon_starts(spark_cluster).items() if log not in daemons}
    assert started  # the executors' task workers came from materializer.daemon...
    assert set(started.values()) == {1}, started  # ...one per executor: writes and reads share its workers
    project = Project.open()
    try:
        assert_oracle(project, lines, f"after kill -9 of worker {victim} and of the driver")
    finally:
        project.close()


@pytest.mark.skipif(scale(True, False), reason="TIDEHOUSE_SCALE=full: join_log on the cluster")
def test_log_join_on_the_cluster_joins_the_events_in_tasks(spark_cluster, project_dir, home, seed):
    """A ``join_log`` on the standalone cluster: the second run's events, of users it did not change, are
    joined and written by the executors' tasks; hot and lake equal the oracle."""
    set_spark(project_dir, {"master": spark_cluster.url, "conf": CLUSTER_CONF})
    assert_log_join_in_tasks(project_dir, home, random.Random(seed), spark_cluster.url)


@pytest.fixture(scope="module")
def shop_on_cluster(spark_cluster, tmp_path_factory):
    """The shipped flows run to idle on the cluster, flow by flow."""
    return run_shop(tmp_path_factory.mktemp("shop"), {"master": spark_cluster.url, "conf": CLUSTER_CONF})


@pytest.fixture(scope="module")
def expected_shop(spark, shop_on_cluster):
    return shop_oracle(spark, *shop_on_cluster[:2])


@pytest.mark.skipif(scale(True, False), reason="TIDEHOUSE_SCALE=full: the shipped flows on the cluster")
@pytest.mark.parametrize("flow_name", FLOW_ORDER)
def test_shipped_flows_equal_the_batch_oracle_on_the_cluster(shop_on_cluster, expected_shop, flow_name):
    project_dir, home, outputs = shop_on_cluster
    assert "(data path: executors)" in outputs[flow_name]
    assert_shop_flow(project_dir, home, expected_shop[flow_name])
