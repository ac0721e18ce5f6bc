"""A small 4-layer test flow with its own actions, its input generator and an independent batch oracle.

The oracle is plain DuckDB SQL over the parsed input lines — it never touches the streaming code path.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

from tests._support import comparable

ACTIONS = {
    "t_ingest.sql": """/*---
name: t_ingest
description: pass-through
inputs: [raw]
---*/
SELECT * FROM raw
""",
    "t_clean.sql": """/*---
name: t_clean
description: normalise and filter events
inputs: [events]
params:
  valid: {type: "array<string>", default: ["click", "view", "buy"]}
  min_price: {type: double, default: 0.0}
---*/
SELECT user_id, lower(event_type) AS event_type, item_id, price, ts
FROM events
WHERE array_contains(:valid, lower(event_type)) AND price >= :min_price
""",
    "t_count.sql": """/*---
name: t_count
description: count and spend per key
inputs: [events]
params:
  key: {type: string, default: user_id}
---*/
SELECT IDENTIFIER(:key), count(*) AS events, sum(price) AS spend
FROM events
GROUP BY IDENTIFIER(:key)
""",
    "t_small.sql": """/*---
name: t_small
description: keys with few events (rows enter, then leave)
inputs: [activity]
params:
  max_events: {type: bigint, default: 3}
---*/
SELECT user_id, events FROM activity WHERE events < :max_events
""",
    "t_top.sql": """/*---
name: t_top
description: top n by events
inputs: [activity]
params:
  n: {type: int, default: 3}
---*/
SELECT * FROM (
  SELECT row_number() OVER (ORDER BY events DESC, user_id ASC) AS rank, user_id, events
  FROM activity
) WHERE rank <= :n
""",
    "t_enrich.sql": """/*---
name: t_enrich
description: events joined with the activity of their user (lookup)
inputs: [events, activity]
---*/
SELECT e.user_id, e.item_id, a.events AS user_events
FROM events e JOIN activity a ON e.user_id = a.user_id
""",
}

_HEAD = """trigger: 100ms
tiering: {interval: 1s}
sources:
  clicks:
    format: json
    path: data/clicks
    schema: "user_id string, event_type string, item_id string, price double, ts timestamp"
layers:
  ods:
    clicks: {action: t_ingest, inputs: {raw: clicks}}
  dwd:
    clicks: {action: t_clean, inputs: {events: ods.clicks}, params: {min_price: 1.0}}
  dws:
    user_activity:
      action: t_count
      inputs: {events: dwd.clicks}
      primary_key: [user_id]
      buckets: 2
"""


def flow_head(description: str) -> str:
    """The test flow's source and first layers (ods.clicks, dwd.clicks, dws.user_activity), which the flows of
    the materializer tests build on."""
    return f"flow: testflow\ndescription: {description}\n" + _HEAD


FLOW = (
    flow_head("four layers, log + pk + aggregation + deletes")
    + """  ads:
    low_users:
      action: t_small
      inputs: {activity: dws.user_activity}
      primary_key: [user_id]
    top_users:
      action: t_top
      inputs: {activity: dws.user_activity}
      primary_key: [rank]
"""
)

ORACLE = {
    "ods.clicks": "SELECT user_id, event_type, item_id, price, ts FROM raw",
    "dwd.clicks": (
        "SELECT user_id, lower(event_type) AS event_type, item_id, price, ts FROM raw "
        "WHERE lower(event_type) IN ('click', 'view', 'buy') AND price >= 1.0"
    ),
    "dws.user_activity": (
        "SELECT user_id, count(*) AS events, sum(price) AS spend FROM raw "
        "WHERE lower(event_type) IN ('click', 'view', 'buy') AND price >= 1.0 GROUP BY user_id"
    ),
}
ORACLE["ads.low_users"] = f"SELECT user_id, events FROM ({ORACLE['dws.user_activity']}) WHERE events < 3"
ORACLE["ads.top_users"] = (
    f"SELECT * FROM (SELECT row_number() OVER (ORDER BY events DESC, user_id ASC) AS rank, "
    f"user_id, events FROM ({ORACLE['dws.user_activity']})) WHERE rank <= 3"
)


def write_project(root: Path, flow: str = FLOW, actions: dict | None = None) -> Path:
    for name, text in (actions or ACTIONS).items():
        (root / "actions" / name).write_text(text)
    path = root / "flows" / "testflow.yaml"
    path.write_text(flow)
    (root / "data" / "clicks").mkdir(parents=True, exist_ok=True)
    return path


def make_events(rng: random.Random, n: int, users: int = 8, bad: int = 2) -> list[str]:
    lines = []
    for _ in range(n):
        lines.append(
            json.dumps(
                {
                    "user_id": f"u{rng.randrange(users)}",
                    "event_type": rng.choice(["click", "VIEW", "buy", "hover"]),
                    "item_id": f"i{rng.randrange(20)}",
                    "price": round(rng.uniform(0, 20), 2),
                    "ts": f"2024-01-01T00:{rng.randrange(60):02d}:{rng.randrange(60):02d}Z",
                }
            )
        )
    for _ in range(bad):
        lines.insert(rng.randrange(len(lines) + 1), "{this is not json")
    return lines


def write_batch(root: Path, name: str, lines: list[str]) -> None:
    tmp = root / "data" / f".{name}.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    tmp.rename(root / "data" / "clicks" / f"{name}.json")  # atomic: the file source never sees half a file


def oracle_connection(all_lines: list[str]):
    """A DuckDB connection with the well-formed input lines registered as ``raw``, for the ORACLE SQL."""
    import duckdb
    import pyarrow as pa

    rows = []
    for line in all_lines:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    raw = pa.table(
        {
            "user_id": [r["user_id"] for r in rows],
            "event_type": [r["event_type"] for r in rows],
            "item_id": [r["item_id"] for r in rows],
            "price": pa.array([r["price"] for r in rows], pa.float64()),
            "ts": pa.array([r["ts"] for r in rows]).cast(pa.timestamp("us", tz="UTC")),
        }
    )
    con = duckdb.connect()
    con.register("raw", raw)
    return con


def oracle(all_lines: list[str]) -> dict[str, Counter]:
    """Each table's batch result over the complete input, in DuckDB."""
    con = oracle_connection(all_lines)
    out = {name: canon(con.sql(sql).to_arrow_table()) for name, sql in ORACLE.items()}
    out["ods.clicks__quarantine"] = sum(1 for line in all_lines if line.startswith("{this"))
    return out


def canon(table) -> Counter:
    """Rows as a multiset of tuples in column-name order, floats rounded, timestamps as epoch microseconds
    (a multiset, so a duplicated row is a difference)."""

    if hasattr(table, "read_all"):
        table = table.read_all()
    cols = sorted(c for c in table.column_names if not c.startswith("__"))
    out: Counter = Counter()
    for row in table.select(cols).to_pylist():
        vals = []
        for c in cols:
            v = row[c]
            if isinstance(v, float):
                v = comparable(v)
            elif hasattr(v, "timestamp"):
                v = int(v.timestamp() * 1_000_000)
            vals.append(v)
        out[tuple(vals)] += 1
    return out


def canon_list(table) -> list:
    cols = sorted(c for c in table.column_names if not c.startswith("__"))
    return sorted(tuple(r[c] for c in cols) for r in table.select(cols).to_pylist())
