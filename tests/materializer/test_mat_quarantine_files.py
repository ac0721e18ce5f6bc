"""A quarantined source record names the file it came from (the quarantine's ``file`` column).

Records that do not parse and records lacking a column the source declares ``NOT NULL`` go to the ODS
table's quarantine; each must name its file — whichever lists the source folder (Tidehouse, or Spark's file
source for a source with a listing option), whichever reads the batch (Arrow's JSON Lines reader or Spark),
for a pass-through table (whose write tasks quarantine on the executor path) and for SQL over the source,
for JSON and CSV, on both data paths. A project whose quarantine tables predate the column gets it, hot
and in the lake: the rows quarantined before name no file.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from tests.materializer._flowkit import ACTIONS, write_project

pytestmark = pytest.mark.spark

SCHEMA = "user_id string NOT NULL, event_type string, item_id string, price double, ts timestamp"
FLOW = f"""flow: testflow
trigger: 100ms
sources:
  clicks:
    format: json
    path: data/clicks
    schema: "{SCHEMA}"
  views:
    format: json
    path: data/views
    schema: "{SCHEMA}"
    options: {{pathGlobFilter: "*.json"}}
  orders:
    format: csv
    path: data/orders
    schema: "id int NOT NULL, amount double"
layers:
  ods:
    clicks: {{action: t_ingest, inputs: {{raw: clicks}}}}
    priced: {{action: t_clean, inputs: {{events: clicks}}}}
    views: {{action: t_ingest, inputs: {{raw: views}}}}
    orders: {{action: t_ingest, inputs: {{raw: orders}}}}
"""
OLD_DDL = "raw string, reason string, source string, quarantined_at timestamp"


def _event(user: str | None, item: str) -> str:
    record = {"event_type": "click", "item_id": item, "price": 2.5, "ts": "2024-01-01T00:00:00Z"}
    if user is not None:
        record["user_id"] = user
    return json.dumps(record)


def _write(folder, name: str, lines: list[str]) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{name}.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    path = folder / name
    tmp.rename(path)  # atomic: the file source never sees half a file
    return str(path)


def _files_by_record(store, table: str) -> dict[str, str | None]:
    """Each quarantined record's tag (the broken line's text, or the item of a record lacking user_id) ->
    the file its quarantine row names."""
    out = {}
    for row in store.scan(table).to_pylist():
        raw = row["raw"]
        tag = json.loads(raw)["item_id"] if raw.startswith('{"') else raw
        assert tag not in out, f"{tag} quarantined twice in {table}"
        out[tag] = row["file"]
    return out


def test_quarantined_records_name_their_file(spark, project_dir, data_path):
    from runtime.project import Project

    path = write_project(
        project_dir, flow=FLOW, actions={k: ACTIONS[k] for k in ("t_ingest.sql", "t_clean.sql")}
    )
    clicks, views = project_dir / "data" / "clicks", project_dir / "data" / "views"
    # a clean file (the Arrow reader takes it: a record lacking user_id is quarantined from its rows)...
    first = _write(clicks, "part-0.json", [_event("u1", "i1"), _event(None, "lacks-0"), _event("u2", "i2")])
    # ...and one with malformed lines (Spark reads the batch)
    second = _write(clicks, "part 1.json", ["{broken 1", _event("u3", "i3"), _event(None, "lacks-1"), "[2"])
    seen = _write(views, "v-0.json", [_event("u4", "i4"), "{broken v", _event(None, "lacks-v")])
    ordered = _write(project_dir / "data" / "orders", "o-0.csv", ["1,2.5", "2,lots", ",3.5", "4,1.0"])
    expected = {"lacks-0": first, "lacks-1": second, "{broken 1": second, "[2": second}
    project = Project.open()
    try:
        project.trigger(path, until_idle=True, spark=spark)
        assert _files_by_record(project.store, "ods.clicks__quarantine") == expected
        assert _files_by_record(project.store, "ods.priced__quarantine") == expected
        assert _files_by_record(project.store, "ods.views__quarantine") == {
            "{broken v": seen,
            "lacks-v": seen,
        }
        csv = sorted((r["raw"], r["file"]) for r in project.store.scan("ods.orders__quarantine").to_pylist())
        assert csv == [("2,lots", ordered), ('{"amount": 3.5, "id": null}', ordered)]
    finally:
        project.close()


def test_quarantine_tables_made_before_the_file_column_get_it_hot_and_in_the_lake(
    spark, project_dir, monkeypatch
):
    from materializer import tables
    from runtime.project import Project

    one = f"flow: testflow\nsources:\n  clicks: {{format: json, path: data/clicks, schema: '{SCHEMA}'}}\n"
    one += "layers:\n  ods:\n    clicks: {action: t_ingest, inputs: {raw: clicks}}\n"
    path = write_project(project_dir, flow=one, actions={"t_ingest.sql": ACTIONS["t_ingest.sql"]})
    name = "ods.clicks__quarantine"
    project = Project.open()
    try:
        with monkeypatch.context() as m:  # the table as an earlier version made it, with a record in it
            m.setattr(tables, "QUARANTINE_DDL", OLD_DDL)
            old = tables.quarantine_meta(name)
        assert "file" not in old.schema.names
        project.store.create_table(old)
        project.lake.ensure_table(old)
        before = pa.table(
            {"raw": ["{old"], "reason": ["malformed"], "source": ["clicks"], "quarantined_at": [None]},
            schema=old.schema,
        )
        project.store.write(name, before, writer="earlier", seq=1)
        file = _write(project_dir / "data" / "clicks", "part-0.json", ["{new", _event("u1", "i1")])

        project.trigger(path, until_idle=True, spark=spark)  # ends with a tiering cycle of every table
        hot = {r["raw"]: r["file"] for r in project.store.scan(name).to_pylist()}
        assert hot == {"{old": None, "{new": file}
        lake = project.lake.load(name).scan().to_arrow()
        assert "file" in lake.column_names
        assert dict(zip(lake.column("raw").to_pylist(), lake.column("file").to_pylist())) == hot
    finally:
        project.close()
