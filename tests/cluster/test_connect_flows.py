"""Flows over Spark Connect: ``spark.remote: sc://…`` in the project file, ``tidehouse flow trigger`` as the
client, the Spark Connect server (``sbin/start-connect-server.sh`` from the pyspark install) as the driver.

* the 4-layer test flow over a Connect server on ``local[2]``, run after run, equals the batch oracle (CI);
* a ``join_log`` over Connect joins the events of users a run did not change in tasks, equal to the oracle
  (``TIDEHOUSE_SCALE=full``; CI runs join_log in tasks on ``local[2]``'s executor path, tests/materializer),
  and so do joins that keep the users without events (``TIDEHOUSE_SCALE=full``);
* planning a flow over Connect leaves no session for the garbage collector to close at exit, where closing
  can wait forever (CI);
* the 4-layer test flow, with the Connect server's Spark on the standalone cluster (master + 2 workers):
  ``kill -9`` of a worker mid-run, then of the client, then of the Connect server (the driver: restarted);
  a resumed ``--until-idle`` leaves every table, hot and lake, equal to the batch oracle
  (``TIDEHOUSE_SCALE=full``: about 5 minutes);
* the shipped flows run to the batch oracle, hot and lake, over a Connect server on ``local[2]``
  (``TIDEHOUSE_SCALE=full``).
"""

from __future__ import annotations

import random
import subprocess
import sys
import time

import pytest

from tests._support import scale
from tests.cluster._clusterkit import (
    CONNECT_SERVER_CONF,
    TASKS_TIERED,
    assert_log_join_in_tasks,
    assert_oracle,
    assert_outer_log_join,
    assert_shop_flow,
    cli,
    daemon_starts,
    env,
    kill_9,
    run_shop,
    set_spark,
    shop_oracle,
    start_trigger,
    wait_for,
)
from tests.examples._library import FLOW_ORDER
from tests.materializer._flowkit import make_events, oracle, write_batch, write_project
from tests.spark_services import ConnectServer

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.cluster]


def test_four_layer_flow_over_connect_equals_the_oracle_run_after_run(
    connect_server, project_dir, home, seed
):
    """Two ``--until-idle`` runs over a Connect server on ``local[2]``: rows that the first run put into a
    filtered table leave it in the second (the changelog strategy's deletes, over Connect)."""
    from runtime.project import Project

    rng = random.Random(seed)
    set_spark(project_dir, {"remote": connect_server.url})
    write_project(project_dir)
    lines = make_events(rng, 60, users=20)
    for part, more in enumerate((lines, make_events(rng, 150, users=20))):
        if part:
            lines = lines + more
        write_batch(project_dir, f"part-{part}", more)
        done = cli(project_dir, home, "flow", "trigger", "flows/testflow.yaml", "--until-idle")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert f"on {connect_server.url} (data path: executors)" in done.stdout
        assert TASKS_TIERED in done.stdout + done.stderr  # the lake's files came from Spark tasks
        project = Project.open()
        try:
            assert_oracle(project, lines, f"after run {part + 1}")
        finally:
            project.close()


@pytest.mark.skipif(scale(True, False), reason="TIDEHOUSE_SCALE=full: join_log over Spark Connect")
def test_log_join_over_connect_joins_the_events_in_tasks(connect_server, project_dir, home, seed):
    """A ``join_log`` over Connect: the second run's events, of users it did not change, are joined and
    written by tasks (the functions run in the server's Python process); hot and lake equal the oracle."""
    set_spark(project_dir, {"remote": connect_server.url})
    assert_log_join_in_tasks(project_dir, home, random.Random(seed), connect_server.url)


@pytest.mark.skipif(scale(True, False), reason="TIDEHOUSE_SCALE=full: outer join_log over Spark Connect")
def test_outer_log_join_over_connect_equals_the_oracle(connect_server, project_dir, home, seed):
    """Joins that keep the users without events over Connect, the events in tasks: the unmatched rows of
    users with their first events deleted by tasks (step (3a), its SQL run before the views are bound for
    the join's); hot and lake equal the oracle run after run."""
    set_spark(project_dir, {"remote": connect_server.url})
    assert_outer_log_join(project_dir, home, random.Random(seed), connect_server.url)


# In a process of its own: plan the test flow over Spark Connect, then list the Connect sessions still
# open that the exit hook (runtime.spark.session) would not stop. The garbage collector would close such a
# session's gRPC channel during interpreter shutdown, which can wait forever: the CLI hung after its work.
_LEFT_OPEN = """
import gc
from pyspark.sql.connect.session import SparkSession
from runtime.project import Project
from runtime.spark import session as sessions

gc.disable()  # a session dropped in a reference cycle stays for the garbage collector to find
project = Project.open()
plan = project.plan("flows/testflow.yaml")
project.close()
tracked = set(map(id, sessions._CONNECT_SESSIONS))
print("left open:", sum(1 for o in gc.get_objects()
                        if isinstance(o, SparkSession) and not o.is_stopped and id(o) not in tracked))
print("tables:", len(plan.tables))
"""


def test_planning_over_connect_leaves_no_session_for_the_garbage_collector_to_close(
    connect_server, project_dir, home
):
    set_spark(project_dir, {"remote": connect_server.url})
    write_project(project_dir)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _LEFT_OPEN],
            cwd=project_dir,
            env=env(home),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the process did not exit after planning over Spark Connect: {exc.stdout!r}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "tables: 0" not in done.stdout, done.stdout  # it planned the flow
    assert "left open: 0" in done.stdout, done.stdout + done.stderr[-3000:]


@pytest.mark.skipif(scale(True, False), reason="TIDEHOUSE_SCALE=full: kill -9 of worker, client and server")
def test_four_layer_flow_over_connect_survives_kill_9_of_a_worker_the_client_and_the_server(
    spark_cluster, project_dir, home, seed, tmp_path
):
    from runtime.project import Project

    rng = random.Random(seed)
    workdir = tmp_path / "connect"
    daemons = daemon_starts(spark_cluster)
    server = ConnectServer.start(workdir, master=spark_cluster.url, conf=CONNECT_SERVER_CONF)
    set_spark(project_dir, {"remote": server.url})
    write_project(project_dir)
    lines = make_events(rng, 150, users=20)
    write_batch(project_dir, "part-0", lines)
    project = Project.open()  # a reader in the test process: offsets and, at the end, the oracle
    store = project.store

    def ends(table: str) -> int:
        return sum(store.end_offsets(table)) if store.has_table(table) else 0

    victim = rng.randrange(2)
    proc = None
    try:
        log = tmp_path / "trigger-1.log"
        proc = start_trigger(project_dir, home, "flows/testflow.yaml", log)
        wait_for(lambda: ends("ads.top_users") > 0, 600, "the first batches of every layer", proc, log)
        more = make_events(rng, 120, users=20)
        lines += more
        write_batch(project_dir, "part-1", more)
        dws_before = ends("dws.user_activity")
        time.sleep(rng.uniform(0.0, 2.0))
        spark_cluster.kill_worker(victim)  # mid-run: the server's Spark goes on with the other worker
        print(f"[connect] killed worker {victim}")
        expected_ods = sum(oracle(lines)["ods.clicks"].values())
        wait_for(
            lambda: ends("ods.clicks") >= expected_ods and ends("dws.user_activity") > dws_before,
            600,
            "the flow to take the new input on one worker",
            proc,
            log,
        )
        more = make_events(rng, 80, users=20)
        lines += more
        write_batch(project_dir, "part-2", more)
        time.sleep(rng.uniform(0.5, 4.0))  # somewhere in its next micro-batches
        kill_9(proc)  # the client: its queries go on on the server until the next client replaces them
        print("[connect] killed the client")
        spark_cluster.restart_worker(victim)

        log = tmp_path / "trigger-2.log"
        proc = start_trigger(project_dir, home, "flows/testflow.yaml", log)
        more = make_events(rng, 80, users=20)
        lines += more
        write_batch(project_dir, "part-3", more)
        before = ends("ods.clicks")
        wait_for(  # its own queries run (the first client's may still be running on the server)
            lambda: "ads:" in log.read_text(errors="replace") and ends("ods.clicks") > before,
            600,
            "the second client's queries to run",
            proc,
            log,
        )
        time.sleep(rng.uniform(0.0, 3.0))
        server.kill()  # the driver
        print("[connect] killed the Connect server")
        # the client sees its server gone (its calls retry for ~70 s): one clear error, no hang
        proc.wait(timeout=300)
        output = log.read_text(errors="replace")
        assert proc.returncode not in (0, None), output[-3000:]
        assert "Traceback" not in output, output[-3000:]
        assert "Spark Connect" in output, output[-3000:]
    finally:
        if proc is not None and proc.poll() is None:
            kill_9(proc)
        server.stop()  # killed already, unless the test failed before: never leave a server behind
        if spark_cluster.alive_workers() < 2:
            spark_cluster.restart_worker(victim)
    server = ConnectServer.start(
        workdir, master=spark_cluster.url, conf=CONNECT_SERVER_CONF, port=server.port
    )
    try:
        project.close()
        done = cli(project_dir, home, "flow", "trigger", "testflow", "--until-idle")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert f"on {server.url} (data path: executors)" in done.stdout
        assert set(daemon_starts(spark_cluster)) - set(daemons)  # the server's setting reached the executors
        project = Project.open()
        try:
            assert_oracle(project, lines, "after kill -9 of a worker, the client and the Connect server")
        finally:
            project.close()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def shop_over_connect(connect_server, tmp_path_factory):
    """The shipped flows run to idle over Spark Connect, flow by flow."""
    return run_shop(tmp_path_factory.mktemp("shop-connect"), {"remote": connect_server.url})


@pytest.fixture(scope="module")
def expected_shop(spark, shop_over_connect):
    return shop_oracle(spark, *shop_over_connect[:2])


@pytest.mark.skipif(scale(True, False), reason="TIDEHOUSE_SCALE=full: the shipped flows over Spark Connect")
@pytest.mark.parametrize("flow_name", FLOW_ORDER)
def test_shipped_flows_equal_the_batch_oracle_over_connect(shop_over_connect, expected_shop, flow_name):
    project_dir, home, outputs = shop_over_connect
    assert "(data path: executors)" in outputs[flow_name] and " on sc://" in outputs[flow_name]
    assert_shop_flow(project_dir, home, expected_shop[flow_name])
