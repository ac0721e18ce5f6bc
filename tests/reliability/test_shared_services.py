"""The 4-layer flow on shared services, as a team runs it: the hot store on SeaweedFS (``s3://``, its
metastore on PostgreSQL), the lake in SeaweedFS's Iceberg REST catalog, the registry on PostgreSQL;
checkpoints stay on the local disk (docs/operations.md). Over a first run, a run killed with ``kill -9``
while it works, and a run that resumes with more input, every table — hot (``project.query``: lake + hot
tail) and lake (plain pyiceberg with the printed catalog settings) — equals the batch oracle as a multiset.
Retention (1 s) trims the hot log behind tiering, so the restarted writers rebuild their primary-key state
from the lake snapshot — and the queries' private state tables (never tiered) behind their own state
snapshots (``storage.state_snapshot_rows: 1``: one whenever the changelog outgrew the state), which the
restarted queries load.

And ``tidehouse info`` masks every secret of those settings.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from runtime.core.literals import is_internal_table
from tests.materializer._flowkit import canon, make_events, oracle, write_batch, write_project
from tests.reliability._project import cli
from tests.services import shared_settings, write_project_file

TABLES = ("ods.clicks", "dwd.clicks", "dws.user_activity", "ads.low_users", "ads.top_users")


def _assert_oracle(project, lines: list[str], when: str) -> None:
    from pyiceberg.catalog import load_catalog

    expected = oracle(lines)
    catalog = load_catalog("check", **project.config.lake_catalog_properties)  # what `tidehouse info` prints
    for table in TABLES:
        assert canon(project.query(f"SELECT * FROM {table}")) == expected[table], f"{when}: hot {table}"
        lake = catalog.load_table(tuple(table.split("."))).scan().to_arrow()
        assert canon(lake) == expected[table], f"{when}: lake {table}"
    quarantined = project.query("SELECT count(*) AS n FROM ods.clicks__quarantine").column("n")[0].as_py()
    assert quarantined == expected["ods.clicks__quarantine"], f"{when}: quarantine"


def _kill_mid_run(project_dir, home, config, rng, lines: list[str]) -> None:
    """Run `tidehouse flow trigger testflow` in its own process, feed it, wait until it caught up with the new
    input and retention trimmed under it, then kill -9 its whole process group (its Spark included)."""
    from runtime.lake import lake_bootstrap
    from runtime.lake.catalog import Lake
    from runtime.storage import open_configured

    env = dict(os.environ, TIDEHOUSE_HOME=str(home))
    log_path = project_dir.parent / "trigger.log"
    lake = Lake.open(config)
    store = open_configured(config, bootstrap=lake_bootstrap(lambda: lake))  # a reader, as another host
    with open(log_path, "wb") as log_file:  # a file, not a pipe: a full pipe would block the child
        proc = subprocess.Popen(
            [sys.executable, "-c", "from runtime.cli import run; run()", "flow", "trigger", "testflow"]
            + ["--duration", "400"],
            cwd=project_dir,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            before = sum(store.end_offsets("ads.low_users")) + sum(store.end_offsets("dws.user_activity"))
            for part in range(3):
                batch = make_events(rng, 60, users=20, bad=1)
                lines += batch
                write_batch(project_dir, f"run2-{part}", batch)
                time.sleep(1.0)
            deadline = time.time() + 300
            while time.time() < deadline:
                assert proc.poll() is None, (
                    "the flow stopped: " + log_path.read_text(errors="replace")[-3000:]
                )
                now = sum(store.end_offsets("ads.low_users")) + sum(store.end_offsets("dws.user_activity"))
                if now > before and min(store.start_offsets("dwd.clicks")) > 0:
                    break
                time.sleep(0.5)
            else:
                raise AssertionError(
                    "the running flow never caught up and trimmed: "
                    + log_path.read_text(errors="replace")[-3000:]
                )
            time.sleep(rng.uniform(0.0, 2.0))  # somewhere in its next micro-batches or tiering cycles
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
            store.close()
            lake.close()
    assert proc.returncode == -signal.SIGKILL, log_path.read_text(errors="replace")[-3000:]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.reliability
def test_four_layer_flow_on_seaweedfs_rest_catalog_and_postgres_survives_kill_9(
    spark, project_dir, home, seaweedfs, postgres, seed
):
    from runtime.project import Project

    settings = shared_settings(seaweedfs, postgres)
    write_project_file(
        project_dir, settings, {"storage": {"fsync": False, "retention": "1s", "state_snapshot_rows": 1}}
    )
    path = write_project(project_dir)
    rng = random.Random(seed)
    lines = make_events(rng, 150, users=20)
    write_batch(project_dir, "run1", lines)
    project = Project.open()
    try:
        assert project.config.storage_root.startswith("s3://")
        assert project.registry.store.engine.url.get_backend_name() == "postgresql"
        project.trigger(path, until_idle=True, spark=spark)  # run 1
        _assert_oracle(project, lines, "run 1")
        config = project.config
        time.sleep(1.3)  # older than the retention: the next tiering cycles trim
        project.close()  # the primary-key buckets have one writer at a time: the killed run's, now
        _kill_mid_run(project_dir, home, config, rng, lines)  # run 2, killed
        more = make_events(rng, 120, users=20)
        lines += more
        write_batch(project_dir, "run3", more)
        project.trigger("testflow", until_idle=True, spark=spark)  # run 3 resumes where run 2 died
        assert min(project.store.start_offsets("dws.user_activity")) > 0  # its changelog was trimmed
        states = [n for n in project.store.list_tables() if is_internal_table(n)]
        trimmed = [n for n in states if min(project.store.start_offsets(n)) > 0]
        assert trimmed, f"no state table trimmed behind a snapshot: {states}"
        _assert_oracle(project, lines, "run 3 after the kill")
        versions = project.flow_versions("testflow")
        assert [v.version for v in versions] == [1]  # registered once, in PostgreSQL, across the runs
    finally:
        project.close()


def test_info_masks_every_secret_of_the_shared_services_settings(tmp_path, monkeypatch):
    """The settings of docs/operations.md (object store + metastore, REST catalog, PostgreSQL registry) with
    their secrets written out: `tidehouse info` (text and JSON) shows none of them."""
    secrets = {
        "metastore": "MetaPw-7f3a",
        "s3": "S3Secret-91bd",
        "catalog": "CatalogSecret-c0de",
        "lake_s3": "LakeS3Secret-5e77",
        "registry": "RegistryPw-42aa",
    }
    root = tmp_path / "proj"
    root.mkdir()
    settings = {
        "storage": {
            "root": "s3://tidehouse/hot",
            "metastore": f"postgresql+psycopg://tidehouse:{secrets['metastore']}@db:5432/tidehouse_hot",
            "s3": {"endpoint": "http://seaweedfs:8333", "access_key": "th", "secret_key": secrets["s3"]},
        },
        "lake": {
            "catalog": {
                "type": "rest",
                "uri": "http://seaweedfs:8181",
                "credential": f"th:{secrets['catalog']}",
                "warehouse": "s3://lake/",
                "s3.endpoint": "http://seaweedfs:8333",
                "s3.access-key-id": "th",
                "s3.secret-access-key": secrets["lake_s3"],
            }
        },
        "registry": {"url": f"postgresql+psycopg://tidehouse:{secrets['registry']}@db:5432/tidehouse"},
    }
    write_project_file(root, settings)
    monkeypatch.chdir(root)  # the project file is found from the working directory
    home = tmp_path / "home"
    outputs = []
    for fmt in ("text", "json"):
        code, out, err = cli(home, "info", "--format", fmt)
        assert code == 0, err
        outputs += [out, err]
    report = json.loads(outputs[2])
    assert report["storage_root"] == "s3://tidehouse/hot"
    assert report["lake_catalog"]["uri"] == "http://seaweedfs:8181"  # what is not secret stays readable
    text = "\n".join(outputs)
    leaked = [name for name, value in secrets.items() if value in text]
    assert not leaked, f"secrets {leaked} printed:\n{text[:4000]}"
