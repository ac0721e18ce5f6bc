"""``tidehouse demo``: the shipped e-commerce flow on live generated events, with a view per layer.

The demo builds a throw-away project (default ``tidehouse-demo/`` in the current directory: its own
``tidehouse.yaml``, ``actions/``, ``flows/``, ``data/`` and its home ``tidehouse-demo/.tidehouse/``, like any
project ``tidehouse init`` makes), then:

1. a producer thread writes a new part file of shop events into ``data/events/`` every second;
2. the flow runs for ``seconds`` with its tiering service, and a live view shows, per layer, the hot rows,
   rows/s, hot delay, lake delay and quarantined records (a rich table on a terminal, plain lines
   otherwise);
3. the flow then runs ``--until-idle`` once more, which drains every layer and tiers every table, so the
   lake equals the hot tables;
4. it prints hot and lake row counts per table, the top rows of ``ads.top_users`` and ``ads.conversion``
   (union reads), and where the Iceberg tables are and how to read them from another engine.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.core.durations import format_duration
from runtime.core.literals import LAYERS
from runtime.core.text import seconds

FLOW = "ecommerce_activity"
MARKER = ".tidehouse-demo"  # only a folder holding this file is ever wiped by the demo


@dataclass
class DemoResult:
    project_dir: Path
    home: Path
    tables: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # table -> hot_rows, lake_rows, quarantined
    seconds: float = 0.0


class Producer(threading.Thread):
    """Writes one part file of events per second (about ``rate`` events each) until stopped or done."""

    def __init__(self, folder: Path, *, rate: int, seconds: int, seed: int) -> None:
        super().__init__(name="demo-producer", daemon=True)
        from runtime.scaffold.generate import EventsConfig, shop_events

        lines = shop_events(EventsConfig(seed=seed, events=rate * seconds, malformed=max(1, seconds // 10)))
        size = max(1, len(lines) // seconds)
        self.chunks = [lines[i : i + size] for i in range(0, len(lines), size)]
        self.folder = folder
        self.stop = threading.Event()
        self.written = 0

    def write_next(self) -> bool:
        from runtime.scaffold.generate import write_parts

        if self.written >= len(self.chunks):
            return False
        write_parts(self.chunks[self.written], self.folder, 1, first=self.written)
        self.written += 1
        return True

    def run(self) -> None:
        while not self.stop.wait(1.0) and self.write_next():
            pass


def layer_rows(snapshot: dict) -> list[dict[str, Any]]:
    """A status snapshot summed per layer: hot rows, rows/s, max hot delay, max lake delay, quarantined."""
    out = []
    for layer in LAYERS:
        rows = [r for r in snapshot.get("tables", []) if r.get("layer") == layer]
        if not rows:
            continue
        hot = [r["hot_delay_s"] for r in rows if r.get("hot_delay_s") is not None]
        lake = [r["lake_delay_s"] for r in rows if r.get("lake_delay_s") is not None]
        out.append(
            {
                "layer": layer,
                "tables": len(rows),
                "hot_rows": sum(r.get("hot_rows") or 0 for r in rows),
                "lake_rows": sum(sum(r.get("tiered_offsets") or []) for r in rows),
                "rows_per_s": sum(r.get("rows_per_s") or 0.0 for r in rows),
                "hot_delay_s": max(hot) if hot else None,
                "lake_delay_s": max(lake) if lake else None,
                "quarantined": sum(r.get("quarantined") or 0 for r in rows),
            }
        )
    return out


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


class LiveView:
    """Per-layer figures: a rich live table on a terminal, a plain line per layer every few seconds
    otherwise."""

    HEADERS = (
        "layer",
        "log rows (hot)",
        "tiered rows",
        "rows/s",
        "hot delay s",
        "lake delay s",
        "quarantined",
    )

    def __init__(self, echo: Callable[[str], None], tty: bool, every_s: float = 5.0) -> None:
        self.echo = echo
        self.tty = tty
        self.every_s = every_s
        self._last = 0.0
        self._live = None
        self.started = time.time()

    def __enter__(self) -> LiveView:
        if self.tty:
            from rich.live import Live

            self._live = Live(self._table([]), refresh_per_second=2, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None

    def _cells(self, row: dict) -> list[str]:
        return [
            row["layer"],
            str(row["hot_rows"]),
            str(row["lake_rows"]),
            _num(row["rows_per_s"]),
            _num(row["hot_delay_s"], 2),
            _num(row["lake_delay_s"]),
            str(row["quarantined"]),
        ]

    def _table(self, rows: list[dict]):
        from rich.table import Table

        table = Table(title=f"{FLOW} · {time.time() - self.started:.0f}s")
        for header in self.HEADERS:
            table.add_column(header, justify="left" if header == "layer" else "right")
        for row in rows:
            table.add_row(*self._cells(row))
        return table

    def __call__(self, snapshot: dict) -> None:
        rows = layer_rows(snapshot)
        if self._live is not None:
            self._live.update(self._table(rows))
            return
        now = time.time()
        if now - self._last < self.every_s or not rows:
            return
        self._last = now
        self.echo(
            f"[{now - self.started:5.0f}s] "
            + " | ".join(
                f"{r['layer']}: {r['hot_rows']} rows, {_num(r['rows_per_s'])} rows/s, hot delay "
                f"{seconds(r['hot_delay_s'], 2)}, lake delay {seconds(r['lake_delay_s'])}"
                + (f", {r['quarantined']} quarantined" if r["quarantined"] else "")
                for r in rows
            )
        )


def prepare(directory: Path, *, fresh: bool = True) -> Path:
    """A clean demo project in ``directory`` (wiped first only if it is a previous demo's folder)."""
    from runtime.core.errors import ErrorCode, TidehouseError
    from runtime.scaffold.project import init_project

    directory = directory.resolve()
    if directory.exists() and any(directory.iterdir()):
        if not (directory / MARKER).exists():
            raise TidehouseError(
                ErrorCode.CONFIG_INVALID,
                f"{directory} is not empty and is not a demo folder",
                hint="give --dir an empty or new folder",
            )
        if fresh:
            shutil.rmtree(directory)
    init_project(directory, force=True, with_data=False)
    (directory / MARKER).write_text("made by `tidehouse demo`; deleted by the next demo run\n")
    return directory


def table_counts(project, plan) -> dict[str, dict[str, Any]]:
    """Rows per table of a flow plan now, through the façade's union read: the table (lake + hot tail = its
    current content), its lake snapshot alone, and its quarantine."""

    def count(relation: str) -> int:
        return project.query(f"SELECT count(*) AS n FROM {relation}").column("n")[0].as_py()

    out = {}
    for t in plan.tables:
        layer, table = t.name.split(".")
        out[t.name] = {
            "hot_rows": count(t.name),
            "lake_rows": count(f'{layer}."{table}$lake"'),
            "quarantined": count(t.quarantine) if t.quarantine else 0,
        }
    return out


def run_demo(
    directory: str | Path,
    *,
    seconds: int = 60,
    rate: int = 200,
    seed: int = 7,
    echo: Callable[[str], None] = print,
    tty: bool | None = None,
) -> DemoResult:
    """Run the demo (see the module docstring) and return the final row counts."""
    from runtime.project import Project

    started = time.time()
    tty = sys.stdout.isatty() if tty is None else tty
    root = prepare(Path(directory))
    project = Project.open(home=root / ".tidehouse", project_dir=root)
    flow_path = root / "flows" / f"{FLOW}.yaml"
    producer = Producer(root / "data" / "events", rate=rate, seconds=seconds, seed=seed)
    try:
        producer.write_next()  # the first second of events is there before the queries start
        echo(f"demo project: {root}")
        echo(
            f"starting Spark and planning {FLOW} (about {rate} events/s for {seconds}s; "
            "Ctrl-C stops early)..."
        )
        plan = project.plan(flow_path, register=True)  # planned once, run twice
        stop = threading.Event()
        deadline: list[float] = []

        def on_status(snapshot: dict) -> None:
            if not deadline:  # the queries are up: start the clock and the live events now
                deadline.append(time.time() + seconds)
                producer.start()
            elif time.time() >= deadline[0]:
                stop.set()
            view(snapshot)

        try:
            with LiveView(echo, tty) as view:
                project.trigger(flow_path, plan=plan, stop_event=stop, on_status=on_status)
        except KeyboardInterrupt:
            stop.set()
        producer.stop.set()
        if producer.is_alive():
            producer.join(timeout=5)
        while producer.write_next():  # whatever the live run did not get to, the drain reads
            pass
        echo("draining every layer and tiering every table into the lake (--until-idle)...")
        project.trigger(flow_path, plan=plan, until_idle=True)
        result = DemoResult(root, project.home, table_counts(project, plan), time.time() - started)
        _summary(project, result, echo)
        return result
    finally:
        producer.stop.set()
        project.close()


def _summary(project, result: DemoResult, echo: Callable[[str], None]) -> None:
    from runtime.core.text import table_text

    echo("")
    echo(
        f"finished in {format_duration(round(result.seconds))}; rows per table (hot = current content, "
        "lake = current Iceberg snapshot):"
    )
    echo(
        table_text(
            ["layer", "table", "hot rows", "lake rows", "quarantined"],
            [
                [name.split(".")[0], name, c["hot_rows"], c["lake_rows"], c["quarantined"]]
                for name, c in result.tables.items()
            ],
        )
    )
    for title, sql in (
        (
            "top users (ads.top_users)",
            "SELECT rank, user_id, events, views, clicks, add_to_carts, "
            "purchases, round(revenue, 2) AS revenue FROM ads.top_users ORDER BY rank LIMIT 5",
        ),
        (
            "conversion funnel (ads.conversion)",
            "SELECT step, stage, reached, "
            "round(rate_from_previous, 3) AS from_previous, round(rate_from_first, 3) AS from_first "
            "FROM ads.conversion ORDER BY step",
        ),
    ):
        data = project.query(sql)
        echo("")
        echo(f"{title}:")
        echo(table_text(data.column_names, [list(r.values()) for r in data.to_pylist()]))
    catalog = project.info()["lake_catalog"]
    name = catalog.pop("name")
    props = catalog
    echo("")
    echo("the Iceberg tables (namespaces ods, dwd, dws, ads) are in the catalog:")
    for key, value in props.items():
        echo(f"  {key}: {value}")
    echo("read one from Python (or any engine with these catalog settings):")
    args = ", ".join(f"{k}={v!r}" for k, v in props.items())
    echo(
        f"  from pyiceberg.catalog import load_catalog\n"
        f"  load_catalog({name!r}, {args})"
        ".load_table('ads.top_users').scan().to_arrow()"
    )
    echo(
        f"query hot + lake again: cd {result.project_dir} && "
        'tidehouse query "SELECT * FROM ads.top_users ORDER BY rank"'
    )
