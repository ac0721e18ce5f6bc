"""The sample data generator: deterministic per seed, with the bad records the flows must handle."""

from __future__ import annotations

import json
from collections import Counter

from runtime.scaffold.generate import (
    EventsConfig,
    OrdersConfig,
    main,
    orders_and_touches,
    shop_events,
    write_sample_data,
)


def _parsed(lines):
    good, bad = [], 0
    for line in lines:
        try:
            record = json.loads(line)
            float(record["price"]) if "price" in record else None
            good.append(record)
        except (ValueError, KeyError):
            bad += 1
    return good, bad


def test_same_seed_same_bytes_other_seed_other_data(tmp_path, seed):
    a = write_sample_data(tmp_path / "a", seed=seed, events=400)
    b = write_sample_data(tmp_path / "b", seed=seed, events=400)
    c = write_sample_data(tmp_path / "c", seed=seed + 1, events=400)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert [p.read_bytes() for p in a] != [p.read_bytes() for p in c]
    assert not list((tmp_path / "a").rglob(".*.tmp")), "part files are renamed into place"


def test_events_hold_funnel_invalid_and_malformed_records(seed):
    lines = shop_events(EventsConfig(seed=seed, events=2000, malformed=6))
    good, _ = _parsed(lines)
    malformed = sum(1 for line in lines if not _is_valid_event(line))
    assert malformed == 6
    kinds = Counter(r["event_type"].lower() for r in good if isinstance(r.get("event_type"), str))
    assert kinds["view"] > kinds["click"] > kinds["add_to_cart"] > kinds["purchase"] > 0
    assert any(r["event_type"].isupper() for r in good), "mixed-case types exercise normalisation"
    assert any(
        r["event_type"] in ("refund", "hover") or r["price"] == -1.0 or r["user_id"] is None for r in good
    )
    stamps = [r["ts"] for r in good if r["user_id"] != "u9999"]
    assert stamps == sorted(stamps), "event time never goes backwards, so watermarks drop nothing"


def _is_valid_event(line: str) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record.get("price"), (int, float))


def test_orders_include_resent_orders_and_untouched_customers(seed):
    orders, touches = orders_and_touches(OrdersConfig(seed=seed, orders=400, malformed=2))
    good, bad = _parsed(orders)
    assert bad == 2
    ids = Counter(o["order_id"] for o in good)
    assert any(n > 1 for n in ids.values()), "some orders are sent twice"
    touched = {json.loads(t)["customer_id"] for t in touches}
    assert {o["customer_id"] for o in good} - touched, "some customers never had a touch"


def test_command_line(tmp_path, capsys):
    assert main(["events", str(tmp_path / "ev"), "--events", "100", "--files", "3", "--seed", "1"]) == 0
    assert len(list((tmp_path / "ev").glob("part-*.json"))) == 3
    assert main(["orders", str(tmp_path), "--orders", "50"]) == 0
    assert (tmp_path / "orders").is_dir() and (tmp_path / "touches").is_dir()
    assert "wrote" in capsys.readouterr().out
