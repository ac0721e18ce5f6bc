"""Small actions and flows the registry tests share (independent of the shipped actions/ library)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from runtime.core.errors import TidehouseError, TidehouseErrors

ACTIONS = {
    "ingest": """
        /*---
        name: ingest
        description: Pass records through.
        inputs: [raw]
        ---*/
        SELECT * FROM raw
    """,
    "clean": """
        /*---
        name: clean
        inputs: [events]
        params:
          min_price: {type: double, default: 0.0}
          valid_types: {type: "array<string>", default: [click, view]}
        ---*/
        SELECT * FROM events WHERE price >= :min_price AND array_contains(:valid_types, event_type)
    """,
    "count_by_key": """
        /*---
        name: count_by_key
        inputs: [events]
        params:
          key: {type: string, description: the column to count by}
        output: "user_id string, cnt bigint"
        ---*/
        SELECT IDENTIFIER(:key) AS user_id, count(*) AS cnt FROM events GROUP BY 1
    """,
    "typed": """
        /*---
        name: typed
        inputs: [a]
        params:
          n: {type: int, default: 1}
          day: {type: date, default: "2024-01-01"}
          weights: {type: "map<string,double>", default: {}}
          flag: {type: boolean, default: false}
        ---*/
        SELECT * FROM a WHERE :n > 0 AND :day IS NOT NULL AND :flag IS NOT NULL AND size(:weights) >= 0
    """,
    "join2": """
        /*---
        name: join2
        inputs: [left, right]
        ---*/
        SELECT * FROM left JOIN right USING (id)
    """,
}

# (in these texts a backslash at the end of a line continues it: the YAML has one line there)
BASE_FLOW = """
flow: shop
sources:
  clicks: {format: json, path: data/clicks, schema: "user_id string, price double, event_type string"}
layers:
  ods:
    clicks: {action: ingest, inputs: {raw: clicks}}
  dwd:
    clean: {action: clean, inputs: {events: ods.clicks}}
  dws:
    counts: {action: count_by_key, inputs: {events: dwd.clean}, params: {key: user_id}, \
primary_key: [user_id]}
"""

OTHER_FLOW = """
flow: other
sources:
  orders: {format: json, path: data/orders, schema: "user_id string, price double, event_type string"}
layers:
  ods:
    orders: {action: ingest, inputs: {raw: orders}}
  dwd:
    shared: {action: clean, inputs: {events: ods.orders}}
"""


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def write_actions(folder: Path, names=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in ACTIONS.items():
        if names is None or name in names:
            (folder / f"{name}.sql").write_text(dedent(text))
    return folder


def errors_of(exc: TidehouseError) -> list[TidehouseError]:
    return list(exc.errors) if isinstance(exc, TidehouseErrors) else [exc]


def marked_line(text: str) -> int | None:
    """The 1-based line carrying the ``#<`` marker (where the error is expected)."""
    for number, line in enumerate(text.splitlines(), 1):
        if line.rstrip().endswith("#<"):
            return number
    return None
