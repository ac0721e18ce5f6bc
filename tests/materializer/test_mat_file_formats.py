"""Every file format docs/flows.md declares for a source runs end to end: CSV (a header, and a malformed
record that goes to the quarantine), Parquet, ORC and text, on both data paths. Each ODS table, hot and lake,
holds exactly the files' records (a multiset); JSON has the rest of the suite. CI runs the driver path (what
``data_path: auto`` takes on local[*]); TIDEHOUSE_SCALE=full runs the executor path too."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest

from tests._support import scale
from tests.materializer._flowkit import ACTIONS, canon, write_project

FLOW = """\
flow: formats
tiering: {interval: 1h}
sources:
  csv_rows:
    format: csv
    path: data/csv
    schema: "id int, name string, price double"
    options: {header: true}
  parquet_rows: {format: parquet, path: data/parquet, schema: "id int, name string, price double"}
  orc_rows: {format: orc, path: data/orc, schema: "id int, name string, price double"}
  text_rows: {format: text, path: data/text}
layers:
  ods:
    csv_rows: {action: t_ingest, inputs: {raw: csv_rows}}
    parquet_rows: {action: t_ingest, inputs: {raw: parquet_rows}}
    orc_rows: {action: t_ingest, inputs: {raw: orc_rows}}
    text_rows: {action: t_ingest, inputs: {raw: text_rows}}
"""


def _rows(rng: random.Random, n: int, first: int) -> list[dict]:
    return [
        {"id": first + i, "name": rng.choice(["a", "b", "c é", None]), "price": round(rng.uniform(0, 99), 2)}
        for i in range(n)
    ]


def _table(rows: list[dict]) -> pa.Table:
    schema = pa.schema([("id", pa.int32()), ("name", pa.string()), ("price", pa.float64())])
    return pa.Table.from_pylist(rows, schema=schema)


def _csv(rows: list[dict]) -> str:
    cells = [f"{r['id']},{'' if r['name'] is None else r['name']},{r['price']}" for r in rows]
    return "id,name,price\n" + "\n".join(cells) + "\n"


@pytest.mark.spark
def test_csv_parquet_orc_and_text_sources_land_every_record_once(spark, project_dir, data_path, seed):
    from runtime.project import Project

    if data_path == "executors" and scale(True, False):  # CI's time: auto's path on local[*] runs in CI
        pytest.skip("TIDEHOUSE_SCALE=full: the executor path (CI runs the driver path, ~11 s each)")
    rng = random.Random(seed)
    path = write_project(project_dir, FLOW, {"t_ingest.sql": ACTIONS["t_ingest.sql"]})
    data = project_dir / "data"
    for folder in ("csv", "parquet", "orc", "text"):
        (data / folder).mkdir(parents=True)
    expected: dict[str, list[dict]] = {"csv_rows": [], "parquet_rows": [], "orc_rows": [], "text_rows": []}
    for part in range(2):  # two files per source, so a micro-batch reads more than one
        rows = _rows(rng, 20, 100 * part)
        # CSV: an empty cell is null; a price that is no number makes the record malformed (quarantined)
        (data / "csv" / f"part-{part}.csv").write_text(_csv(rows) + f"{900 + part},bad,not-a-price\n")
        expected["csv_rows"] += rows
        pq.write_table(_table(rows), data / "parquet" / f"part-{part}.parquet")
        expected["parquet_rows"] += rows
        orc.write_table(_table(rows), str(data / "orc" / f"part-{part}.orc"))
        expected["orc_rows"] += rows
        lines = [f"line {part}.{i}: {r['name']}" for i, r in enumerate(rows)]
        (data / "text" / f"part-{part}.txt").write_text("\n".join(lines) + "\n")
        expected["text_rows"] += [{"value": line} for line in lines]

    project = Project.open()
    try:
        report = project.trigger(path, until_idle=True, spark=spark)
        for name, rows in expected.items():
            table = f"ods.{name}"
            want = canon(pa.Table.from_pylist(rows))
            assert canon(project.store.scan(table)) == want, table
            assert canon(project.lake.load(table).scan().to_arrow()) == want, f"{table} (lake)"
            figures = report.tables[table]  # what the run's report prints
            assert (figures["rows_out"], figures["quarantined"]) == (len(rows), 2 if "csv" in name else 0)
        quarantined = project.store.scan("ods.csv_rows__quarantine").to_pylist()
        assert sorted(q["raw"] for q in quarantined) == ["900,bad,not-a-price", "901,bad,not-a-price"]
    finally:
        project.close()
