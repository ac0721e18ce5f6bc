"""A source's record shape changes while its flow runs: nothing is lost, nothing is silently mangled.

The producer of a JSON source starts sending records that no longer match the declared schema — an added
field, a renamed required field, a dropped required field, a number sent as a string or as an object — in
the same files as well-formed records and records that break an expectation. The running flow must keep
going; every input line ends up exactly once either in the ODS table or in its quarantine (with a reason
naming the problem), the downstream aggregation equals a batch oracle over the accepted rows, hot and lake.
Then the user evolves the declared schema: the changed plan is refused until a full refresh rebuilds the
table with the new column from the same input files.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from datetime import datetime, timezone

import pytest

from runtime.core.errors import ErrorCode, TidehouseError
from tests._support import scale
from tests.materializer._flowkit import canon

pytestmark = [pytest.mark.spark, pytest.mark.reliability]

ACTIONS = {
    "t_ingest.sql": (
        "/*---\nname: t_ingest\ndescription: pass-through\ninputs: [raw]\n---*/\nSELECT * FROM raw\n"
    ),
    "t_by_kind.sql": """/*---
name: t_by_kind
description: orders and amount per kind
inputs: [orders]
---*/
SELECT kind, count(*) AS orders, sum(amount) AS amount FROM orders GROUP BY kind
""",
}

SCHEMA = "id bigint NOT NULL, kind string NOT NULL, amount double, ts timestamp"
FLOW = """flow: drift
trigger: 200ms
tiering: {interval: 1s}
sources:
  orders: {format: json, path: data/orders, schema: "%s"}
layers:
  ods:
    orders:
      action: t_ingest
      inputs: {raw: orders}
      expect:
        - {name: non_negative, condition: "amount IS NULL OR amount >= 0", on_violation: quarantine}
  dws:
    by_kind: {action: t_by_kind, inputs: {orders: ods.orders}, primary_key: [kind]}
"""
KINDS = ["book", "game", "tool"]
TS0 = datetime(2024, 5, 1, tzinfo=timezone.utc).timestamp()


class Input:
    """Generates input lines and remembers what each one must become."""

    def __init__(self, rng: random.Random, data_dir) -> None:
        self.rng, self.dir, self.next_id, self.files = rng, data_dir, 0, 0
        self.accepted: list[
            dict
        ] = []  # rows the ODS table must hold (declared columns, plus `channel` if sent)
        self.malformed: list[str] = []  # lines that do not parse with the schema: quarantined verbatim
        self.retyped_column: dict[str, str] = {}  # each malformed line -> the column its reason names
        self.missing: Counter = Counter()  # required column -> records lacking it
        self.negative = 0  # records breaking the expectation
        self.lines = 0

    def _order(self) -> dict:
        self.next_id += 1
        return {
            "id": self.next_id,
            "kind": self.rng.choice(KINDS),
            "amount": round(self.rng.uniform(1, 99), 2),
            "ts": datetime.fromtimestamp(TS0 + self.next_id, timezone.utc).isoformat().replace("+00:00", "Z"),
        }

    def good(self, extra: dict | None = None) -> str:
        row = self._order() | (extra or {})
        self.accepted.append(row)
        return json.dumps(row)

    def negative_amount(self) -> str:
        row = self._order() | {"amount": -round(self.rng.uniform(1, 9), 2)}
        self.negative += 1
        return json.dumps(row)

    def renamed(self, old: str, new: str) -> str:
        row = self._order()
        row[new] = row.pop(old)
        self.missing[old] += 1
        return json.dumps(row)

    def dropped(self, column: str) -> str:
        row = self._order()
        del row[column]
        self.missing[column] += 1
        return json.dumps(row)

    def retyped(self, column: str, value) -> str:
        row = self._order() | {column: value}
        line = json.dumps(row)
        self.malformed.append(line)
        self.retyped_column[line] = column
        return line

    def write(self, lines: list[str]) -> None:
        self.rng.shuffle(lines)
        tmp = self.dir.parent / f".part-{self.files}.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(self.dir / f"part-{self.files:03d}.json")  # atomic: the file source never sees half a file
        self.files += 1
        self.lines += len(lines)

    def v1_file(self, n: int) -> None:
        self.write([self.good() for _ in range(n)] + [self.negative_amount()])

    def drifted_file(self, n: int) -> None:
        """One file mixing every kind of drift with well-formed and expectation-breaking records."""
        lines = [self.good() for _ in range(n)] + [self.negative_amount() for _ in range(2)]
        lines += [self.good({"channel": self.rng.choice(["web", "app"])}) for _ in range(n)]  # added field
        lines += [self.renamed("kind", "category") for _ in range(3)]
        lines += [self.dropped("id") for _ in range(2)]
        lines += [self.retyped("amount", f"{self.rng.uniform(1, 9):.2f}") for _ in range(2)]  # "12.50"
        lines += [self.retyped("amount", {"value": 3, "currency": "EUR"})]
        lines += [self.retyped("id", "order-7")]
        self.write(lines)


def _bag(table, columns: list[str]) -> Counter:
    """The named columns as a multiset (the materializer tests' ``canon``: sorted column order, floats
    rounded, timestamps as epoch microseconds)."""
    return canon(table.select(columns))


def _expected_ods(inp: Input, columns: list[str]) -> Counter:
    out: Counter = Counter()
    for r in inp.accepted:
        ts = datetime.fromisoformat(r["ts"].replace("Z", "+00:00"))
        row = r | {"ts": int(ts.timestamp() * 1_000_000)}
        out[
            tuple(round(row[c], 6) if isinstance(row.get(c), float) else row.get(c) for c in sorted(columns))
        ] += 1
    return out


def _expected_by_kind(inp: Input) -> Counter:
    groups: dict[str, list[float]] = {}
    for r in inp.accepted:
        groups.setdefault(r["kind"], []).append(r["amount"])
    return Counter((round(sum(v), 6), k, len(v)) for k, v in groups.items())  # amount, kind, orders


def _rows(store, table: str) -> int:
    return sum(store.end_offsets(table)) if store.has_table(table) else 0


def _wait(predicate, timeout: float, what: str, failed=lambda: None) -> None:
    deadline = time.time() + timeout
    while not predicate():
        error = failed()
        if error:
            raise AssertionError(f"the flow stopped while waiting for {what}: {error}")
        assert time.time() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.25)


def _check(project, inp: Input, *, columns: list[str]) -> None:
    store = project.store
    expected_q = len(inp.malformed) + sum(inp.missing.values()) + inp.negative
    ods = store.scan("ods.orders")
    q = store.scan("ods.orders__quarantine")
    # conservation: every input line is in exactly one of the two tables
    assert ods.num_rows + q.num_rows == inp.lines, (ods.num_rows, q.num_rows, inp.lines)
    assert _bag(ods, columns) == _expected_ods(inp, columns)
    assert q.num_rows == expected_q
    reasons = q.column("reason").to_pylist()
    raws = q.column("raw").to_pylist()
    malformed = Counter(r for r, why in zip(raws, reasons) if why.startswith("malformed json record"))
    assert malformed == Counter(inp.malformed), "malformed lines are kept verbatim"
    for raw, why in zip(raws, reasons):  # the reason names the field Spark refused (materializer.malformed)
        if raw in inp.retyped_column:
            assert why.startswith(f"malformed json record: field {inp.retyped_column[raw]}: "), (raw, why)
    for column, n in inp.missing.items():
        assert sum(f"lacks required column(s) {column} " in why for why in reasons) == n, column
    assert sum(why.startswith("expectation non_negative failed") for why in reasons) == inp.negative
    assert _bag(store.scan("dws.by_kind"), ["kind", "orders", "amount"]) == _expected_by_kind(inp)
    for table, cols in (
        ("ods.orders", columns),
        ("dws.by_kind", ["kind", "orders", "amount"]),
        ("ods.orders__quarantine", ["raw", "reason"]),
    ):
        lake_rows = project.lake.load(table).scan().to_arrow()
        assert _bag(lake_rows, cols) == _bag(store.scan(table), cols), f"lake {table}"


@pytest.mark.parametrize("data_path", ["driver", "executors"])
def test_record_shape_changes_mid_stream(spark, project_dir, seed, data_path):
    """On both data paths (the executor path's write tasks quarantine a pass-through source's records; CI
    runs that path's quarantine in tests/materializer: test_mat_run, test_mat_logs)."""
    from runtime.project import Project

    if data_path == "executors" and not scale(0, 1):
        pytest.skip("TIDEHOUSE_SCALE=full runs the record-shape changes on the executor path too")

    (project_dir / "tidehouse.yaml").write_text(f"materializer:\n  data_path: {data_path}\n")
    rng = random.Random(seed)
    for name, text in ACTIONS.items():
        (project_dir / "actions" / name).write_text(text)
    flow_path = project_dir / "flows" / "drift.yaml"
    flow_path.write_text(FLOW % SCHEMA)
    data = project_dir / "data" / "orders"
    data.mkdir(parents=True)
    inp = Input(rng, data)
    inp.v1_file(40)
    project = Project.open()
    store = project.store

    stop, outcome = threading.Event(), {}

    def run() -> None:
        try:
            outcome["report"] = project.trigger(flow_path, spark=spark, stop_event=stop)
        except Exception as exc:  # noqa: BLE001 - any failure of the flow thread is surfaced by the waits below
            outcome["error"] = exc

    runner = threading.Thread(target=run, name="drift-flow", daemon=True)
    runner.start()
    try:

        def landed() -> bool:
            return _rows(store, "ods.orders") + _rows(store, "ods.orders__quarantine") >= inp.lines

        _wait(landed, 240, "the first file in ODS", lambda: outcome.get("error"))
        for _ in range(3):  # the producer's records change shape while the queries run
            inp.drifted_file(10)
            _wait(landed, 120, f"file {inp.files - 1} in ODS", lambda: outcome.get("error"))
        inp.v1_file(20)  # and back to the old shape
        _wait(landed, 120, "the last file in ODS", lambda: outcome.get("error"))
        _wait(
            lambda: _bag(store.scan("dws.by_kind"), ["kind", "orders", "amount"]) == _expected_by_kind(inp),
            120,
            "dws.by_kind to catch up",
            lambda: outcome.get("error"),
        )
    finally:
        stop.set()
        runner.join(timeout=120)
    assert "error" not in outcome, outcome.get("error")
    assert not runner.is_alive()
    report = outcome["report"]
    assert (
        report.tables["ods.orders"]["quarantined"]
        == len(inp.malformed) + sum(inp.missing.values()) + inp.negative
    )

    project.trigger("drift", until_idle=True, spark=spark)  # a final tiering cycle
    _check(project, inp, columns=["id", "kind", "amount", "ts"])

    # the user evolves the declared schema: the table's data was built by the old plan
    flow_path.write_text(FLOW % (SCHEMA + ", channel string"))
    with pytest.raises(TidehouseError) as refused:
        project.trigger(flow_path, until_idle=True, spark=spark)
    assert refused.value.code == ErrorCode.PLAN_CHANGED
    assert "ods.orders" in str(refused.value) and "--full-refresh" in (refused.value.hint or "")
    # rebuilt from the same files, the added field is now a column (absent -> null)
    project.trigger(flow_path, until_idle=True, spark=spark, full_refresh=["ods.orders"])
    _check(project, inp, columns=["id", "kind", "amount", "ts", "channel"])
    assert (
        sum(1 for c in store.scan("ods.orders").column("channel").to_pylist() if c)
        == sum(1 for r in inp.accepted if "channel" in r)
        > 0
    )
    project.close()
