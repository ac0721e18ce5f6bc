"""Deterministic sample data for the shipped flows: shop events, orders and marketing touches.

Everything is a function of the seed, so tests can regenerate the exact input of a run. Files are JSON
lines, one folder per source (``data/events``, ``data/orders``, ``data/touches``), each folder split into
numbered part files in event-time order, which is how a streaming file source picks them up. A few records
are deliberately bad so the flows show their guard rails:

* *malformed* lines (not JSON, or a field of the wrong type) - the ODS table quarantines them;
* *invalid* events (unknown event type, negative price, missing user) - ``clean_clicks`` drops them;
* mixed-case event types (``VIEW``) - ``clean_clicks`` normalises them;
* re-sent orders (same ``order_id``, a later ``ts`` and a corrected amount) - ``dedupe_by_key`` keeps the
  latest.

Command line (used by ``tidehouse init``; handy to make more data)::

    python -m runtime.scaffold.generate events data/events --seed 7 --events 5000 --files 10
    python -m runtime.scaffold.generate orders data --seed 7
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

START = dt.datetime(2024, 5, 1, 9, 0, 0, tzinfo=dt.timezone.utc)
EVENT_TYPES = ("view", "click", "add_to_cart", "purchase")
CHANNELS = ("search", "social", "email", "affiliate", "display")
CAMPAIGNS = ("spring_sale", "newsletter", "retargeting", "brand")


def iso(ts: dt.datetime) -> str:
    """Timestamps as Spark's JSON reader parses them by default (ISO 8601, milliseconds, UTC)."""
    return ts.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


@dataclass(frozen=True)
class EventsConfig:
    seed: int = 7
    events: int = 5000  # about this many good events (the funnel decides the exact count)
    users: int = 200
    items: int = 60
    invalid_ratio: float = 0.02  # events clean_clicks drops
    malformed: int = 5  # lines the ODS table quarantines
    start: dt.datetime = START


def shop_events(cfg: EventsConfig) -> list[str]:
    """JSON lines of shop events in event-time order (malformed lines included)."""
    rnd = random.Random(cfg.seed)
    prices = {f"i{n:03d}": round(rnd.uniform(2, 120), 2) for n in range(cfg.items)}
    items = sorted(prices)
    ts = cfg.start
    records: list[dict] = []
    while len(records) < cfg.events:
        user = f"u{rnd.randrange(cfg.users):04d}"
        for item in rnd.sample(items, rnd.randint(1, 4)):  # one visit: a few items viewed
            funnel = ["view"]
            for stage, chance in (("click", 0.45), ("add_to_cart", 0.4), ("purchase", 0.5)):
                if rnd.random() >= chance:
                    break
                funnel.append(stage)
            for stage in funnel:
                ts += dt.timedelta(milliseconds=rnd.randint(20, 900))
                kind = stage.upper() if rnd.random() < 0.03 else stage
                records.append(
                    {
                        "user_id": user,
                        "event_type": kind,
                        "item_id": item,
                        "price": prices[item],
                        "ts": iso(ts),
                    }
                )
    lines = []
    for record in records:
        roll = rnd.random()
        if roll < cfg.invalid_ratio / 3:
            record = {**record, "event_type": rnd.choice(["refund", "hover"])}
        elif roll < 2 * cfg.invalid_ratio / 3:
            record = {**record, "price": -1.0}
        elif roll < cfg.invalid_ratio:
            record = {**record, "user_id": None}
        lines.append(json.dumps(record, separators=(",", ":")))
    for n in range(cfg.malformed):  # never the first or last line, so every part file still parses mostly
        at = rnd.randrange(1, len(lines) - 1)
        bad = (
            lines[at][: len(lines[at]) // 2]
            if n % 2 == 0
            else json.dumps(
                {
                    "user_id": "u9999",
                    "event_type": "view",
                    "item_id": "i000",
                    "price": "twelve",
                    "ts": "2024-05-01T09:00:00.000Z",
                }
            )
        )
        lines.insert(at, bad)
    return lines


@dataclass(frozen=True)
class OrdersConfig:
    seed: int = 7
    customers: int = 150
    orders: int = 600
    touches: int = 900
    resent_ratio: float = 0.05  # orders sent again with a corrected amount
    malformed: int = 2
    start: dt.datetime = START


def orders_and_touches(cfg: OrdersConfig) -> tuple[list[str], list[str]]:
    """(order lines, touch lines), each in event-time order. Some customers never had a touch."""
    rnd = random.Random(cfg.seed)
    horizon = 3 * 3600.0
    touches = []
    for _ in range(cfg.touches):
        customer = f"c{rnd.randrange(int(cfg.customers * 0.9)):04d}"  # the last 10% are never touched
        at = cfg.start + dt.timedelta(seconds=rnd.uniform(0, horizon))
        touches.append(
            (
                at,
                {
                    "customer_id": customer,
                    "channel": rnd.choice(CHANNELS),
                    "campaign": rnd.choice(CAMPAIGNS),
                    "ts": iso(at),
                },
            )
        )
    orders = []
    for n in range(cfg.orders):
        at = cfg.start + dt.timedelta(seconds=rnd.uniform(600, horizon + 600))
        order = {
            "order_id": f"o{n:05d}",
            "customer_id": f"c{rnd.randrange(cfg.customers):04d}",
            "amount": round(rnd.uniform(5, 400), 2),
            "ts": iso(at),
        }
        orders.append((at, order))
        if rnd.random() < cfg.resent_ratio:
            later = at + dt.timedelta(seconds=rnd.uniform(1, 300))
            orders.append((later, {**order, "amount": round(order["amount"] * 0.9, 2), "ts": iso(later)}))
    order_lines = [json.dumps(o, separators=(",", ":")) for _, o in sorted(orders, key=lambda p: p[0])]
    touch_lines = [json.dumps(t, separators=(",", ":")) for _, t in sorted(touches, key=lambda p: p[0])]
    for _ in range(cfg.malformed):
        order_lines.insert(rnd.randrange(1, len(order_lines) - 1), '{"order_id": "o99999", "amount": 1')
    return order_lines, touch_lines


def write_parts(lines: list[str], folder: Path, files: int, *, first: int = 0) -> list[Path]:
    """Split ``lines`` into ``files`` part files ``part-00000.json``... (atomically: write, then rename)."""
    folder.mkdir(parents=True, exist_ok=True)
    size = max(1, -(-len(lines) // max(1, files)))
    written = []
    for n, chunk in enumerate(_chunks(lines, size)):
        path = folder / f"part-{first + n:05d}.json"
        tmp = folder / f".{path.name}.tmp"
        tmp.write_text("\n".join(chunk) + "\n", encoding="utf-8")
        tmp.replace(path)  # a streaming file source never sees a half-written file
        written.append(path)
    return written


def _chunks(lines: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(lines), size):
        yield lines[start : start + size]


def write_events(folder: Path, cfg: EventsConfig = EventsConfig(), files: int = 10) -> list[Path]:
    return write_parts(shop_events(cfg), Path(folder), files)


def write_orders(data_dir: Path, cfg: OrdersConfig = OrdersConfig(), files: int = 4) -> list[Path]:
    order_lines, touch_lines = orders_and_touches(cfg)
    data_dir = Path(data_dir)
    return write_parts(order_lines, data_dir / "orders", files) + write_parts(
        touch_lines, data_dir / "touches", files
    )


def write_sample_data(data_dir: Path, *, seed: int = 7, events: int = 5000) -> list[Path]:
    """All the data the shipped flows read, under ``data_dir`` (``events/``, ``orders/``, ``touches/``)."""
    data_dir = Path(data_dir)
    return write_events(data_dir / "events", EventsConfig(seed=seed, events=events)) + write_orders(
        data_dir, OrdersConfig(seed=seed)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runtime.scaffold.generate", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="what", required=True)
    ev = sub.add_parser("events", help="shop events (JSON lines) into a folder")
    ev.add_argument("folder", type=Path)
    ev.add_argument("--events", type=int, default=5000)
    ev.add_argument("--files", type=int, default=10)
    ev.add_argument("--malformed", type=int, default=5)
    od = sub.add_parser(
        "orders", help="orders and marketing touches into DATA_DIR/orders and DATA_DIR/touches"
    )
    od.add_argument("folder", type=Path)
    od.add_argument("--orders", type=int, default=600)
    od.add_argument("--files", type=int, default=4)
    for p in (ev, od):
        p.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.what == "events":
        paths = write_events(
            args.folder,
            EventsConfig(seed=args.seed, events=args.events, malformed=args.malformed),
            args.files,
        )
    else:
        paths = write_orders(args.folder, OrdersConfig(seed=args.seed, orders=args.orders), args.files)
    print(f"wrote {len(paths)} files under {args.folder}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
