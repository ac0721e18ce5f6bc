"""The plan: pure data that execution runs and ``tidehouse flow plan`` prints.

A :class:`FlowPlan` holds, per table, everything the runner needs — the resolved action and its SQL, the
named-parameter bindings, the inputs and how they are read, the analysed output schema (Spark DDL), the
strategy, keys, buckets, trigger, tiering interval, checkpoint location and a fingerprint of everything that
affects the table's content. It is built by :func:`materializer.analyze.build_plan`; this module only
holds the data and renders it (text, JSON, mermaid). Rendering is deterministic: same flow, same bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal

from registry.graph import FlowGraph
from runtime.core.durations import format_duration
from runtime.core.literals import TableKind

QUARANTINE_SUFFIX = "__quarantine"
QUARANTINE_DDL = "raw string, reason string, source string, quarantined_at timestamp, file string"


@dataclass(frozen=True)
class Param:
    """One named-parameter binding: ``:name`` in the SQL is bound to ``value`` cast to ``type``."""

    name: str
    type: str
    value: Any


@dataclass(frozen=True)
class Input:
    """One relation the SQL reads: ``name`` (the view name in the SQL) bound to ``ref``.

    ``ref`` is ``source:<name>`` or ``<layer>.<table>``; ``kind`` is ``source``, ``log`` or
    ``primary_key``; ``ddl`` is its user-column schema.
    """

    name: str
    ref: str
    kind: str
    ddl: str
    primary_key: tuple[str, ...] = ()


@dataclass(frozen=True)
class Expectation:
    name: str
    condition: str
    on_violation: Literal["drop", "quarantine", "fail"]


@dataclass(frozen=True)
class BatchException:
    """A named way a table differs from its SQL's batch result by design (docs/concepts.md, Correctness):
    ``lookup`` (processing-time lookups) or ``watermark`` (late rows dropped by a streaming aggregation)."""

    kind: Literal["lookup", "watermark"]
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


def source_path(project_dir, path: str | None) -> str | None:
    """A flow source's ``path`` as its plan holds it: a relative local path resolved against the project
    directory (docs/flows.md), a URI or absolute path as it is."""
    if path and "://" not in path and not Path(path).is_absolute():
        return str((Path(project_dir) / path).resolve())
    return path


@dataclass(frozen=True)
class SourcePlan:
    name: str
    format: str
    path: str | None  # absolute (relative paths resolve against the project directory)
    ddl: str | None  # the declared schema; None lets the format decide (rate, ...)
    options: tuple[tuple[str, str], ...] = ()
    fingerprint: str = ""
    required: tuple[str, ...] = ()  # columns declared NOT NULL: a record without one is quarantined

    @property
    def ref(self) -> str:
        return f"source:{self.name}"

    @property
    def quarantines(self) -> bool:
        """Formats that parse text records route malformed ones to a quarantine table."""
        return self.format in ("json", "csv") and self.ddl is not None


@dataclass(frozen=True)
class TablePlan:
    name: str  # "dwd.clicks"
    layer: str
    kind: TableKind
    strategy: str
    reason: str
    action: str  # "clean_clicks@2"
    action_path: str | None
    sql_line: int
    sql: str
    params: tuple[Param, ...]
    inputs: tuple[Input, ...]
    ddl: str  # output schema (user columns), Spark DDL
    primary_key: tuple[str, ...]
    merge_engine: str
    aggregations: tuple[tuple[str, str], ...]
    buckets: int
    bucket_key: tuple[str, ...]
    trigger: float  # seconds; 0 = as fast as possible
    tiering_interval: float
    expect: tuple[Expectation, ...]
    quarantine: str | None  # quarantine table fed by this table (malformed source rows, expectations)
    fingerprint: str
    checkpoint: str
    passthrough: bool = False  # the SQL returns its one input unchanged: micro-batches skip running it
    # where the table may differ from its SQL's batch result by design
    exceptions: tuple[BatchException, ...] = ()
    # the freshness target in seconds (None: none): what status and metrics check, not how the table is built
    freshness: float | None = None
    # labels to select the table by (`--select tag:NAME`)
    tags: tuple[str, ...] = ()
    # what the topn / agg_changelog / agg_log / join_changelog strategies maintain
    # (materializer/incremental/facts.py), else None
    incremental: Any = None

    @property
    def writer_id(self) -> str:
        """The hot-storage writer of this table's query; tied to the checkpoint, whose batch ids it uses."""
        return f"mat:{self.name}:{self.fingerprint[:12]}"

    @property
    def lake_tables(self) -> tuple[str, ...]:
        """The tables this table's query writes, each tiered into the lake: itself and its quarantine."""
        return (self.name, self.quarantine) if self.quarantine else (self.name,)


@dataclass(frozen=True)
class FlowPlan:
    flow: str
    version: int | None
    sources: tuple[SourcePlan, ...]
    tables: tuple[TablePlan, ...]  # topological order
    generations: tuple[tuple[str, ...], ...]  # table names by topological generation
    edges: tuple[
        tuple[str, str, str], ...
    ]  # (upstream, table, relation): the flow graph the plan was made of

    def table(self, name: str) -> TablePlan:
        for plan in self.tables:
            if plan.name == name:
                return plan
        raise KeyError(name)

    def source(self, name: str) -> SourcePlan:
        for src in self.sources:
            if src.name == name:
                return src
        raise KeyError(name)

    def graph(self) -> FlowGraph:
        """The flow's DAG, from the plan's own edges: the graph the plan was built from, not a new one."""
        return FlowGraph.from_edges(
            [t.name for t in self.tables], self.edges, sources=[s.name for s in self.sources]
        )

    # -- rendering --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "flow": self.flow,
            "version": self.version,
            "generations": [list(g) for g in self.generations],
            "sources": [asdict(s) for s in self.sources],
            "tables": [asdict(t) for t in self.tables],
            "edges": [list(e) for e in self.edges],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, default=str)

    def to_text(self) -> str:
        lines = [f"flow {self.flow}" + (f" (version {self.version})" if self.version else "")]
        for src in self.sources:
            lines.append(
                f"  source {src.name}: {src.format}"
                + (f" {src.path}" if src.path else "")
                + (f"  schema: {src.ddl}" if src.ddl else "")
                + (f"  required: {', '.join(src.required)}" if src.required else "")
            )
        by_name = {t.name: t for t in self.tables}
        for i, gen in enumerate(self.generations):
            layers = sorted({by_name[n].layer for n in gen})
            lines.append(f"generation {i} ({', '.join(layers)})")
            for name in gen:
                t = by_name[name]
                key = f" primary key ({', '.join(t.primary_key)})" if t.primary_key else ""
                lines.append(f"  {t.name}: {t.kind}{key}, {t.buckets} bucket(s), strategy {t.strategy}")
                lines.append(f"    why: {t.reason}")
                lines.append(
                    f"    action {t.action}" + (f" ({t.action_path}:{t.sql_line})" if t.action_path else "")
                )
                lines.append("    inputs: " + ", ".join(f"{i.name} <- {i.ref} [{i.kind}]" for i in t.inputs))
                if t.params:
                    lines.append(
                        "    params: "
                        + ", ".join(
                            f":{p.name} = {json.dumps(p.value, default=str)} ({p.type})" for p in t.params
                        )
                    )
                lines.append(f"    schema: {t.ddl}")
                lines.append(
                    f"    trigger {format_duration(t.trigger)}, tiering every "
                    f"{format_duration(t.tiering_interval)}, fingerprint {t.fingerprint[:12]}"
                    + (f", freshness {format_duration(t.freshness)}" if t.freshness is not None else "")
                )
                if t.expect:
                    lines.append(
                        "    expect: "
                        + "; ".join(f"{e.name}: {e.condition} ({e.on_violation})" for e in t.expect)
                    )
                if t.quarantine:
                    lines.append(f"    quarantine: {t.quarantine}")
                if t.tags:
                    lines.append(f"    tags: {', '.join(t.tags)}")
                for exc in t.exceptions:
                    lines.append(f"    batch exception {exc}")
                lines.append("    sql: " + " ".join(t.sql.split()))
        return "\n".join(lines)

    def to_mermaid(self) -> str:
        def node_id(name: str) -> str:
            return name.replace(":", "_").replace(".", "_")

        lines = ["flowchart LR"]
        for src in self.sources:
            lines.append(f'  {node_id(src.ref)}[("{src.name} ({src.format})")]')
        by_layer: dict[str, list[TablePlan]] = {}
        for t in self.tables:
            by_layer.setdefault(t.layer, []).append(t)
        for layer, tables in by_layer.items():
            lines.append(f"  subgraph {layer}")
            for t in tables:
                caveat = f"<br/>≠ batch: {', '.join(e.kind for e in t.exceptions)}" if t.exceptions else ""
                lines.append(f'    {node_id(t.name)}["{t.name}<br/>{t.kind} · {t.strategy}{caveat}"]')
            lines.append("  end")
        for upstream, table, relation in self.edges:
            lines.append(f"  {node_id(upstream)} -->|{relation}| {node_id(table)}")
        return "\n".join(lines)


def fingerprint(payload: Any) -> str:
    """sha256 of a canonical JSON rendering."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# The fingerprint of a table is derived from its TablePlan: every field is in, except these, which do not
# change what the table holds. The fingerprint names the table's checkpoint and hot-storage writer id, so a
# change of it makes a running deployment rebuild the table: a new field is in (and changes every
# fingerprint) unless it is added here, on purpose, with the reason.
NOT_FINGERPRINTED: dict[str, str] = {
    "layer": "part of the name, which is in",
    "reason": "prose about the strategy, which is in",
    "action": "the action's name and version: its SQL and parameters are in (the same SQL computes the same)",
    "action_path": "where the action file is",
    "sql_line": "where the SQL starts in the action file",
    "trigger": "how often micro-batches run, not what they compute",
    "tiering_interval": "how far the lake lags, not what the table holds",
    "quarantine": "follows from the inputs and the expectations, which are in",
    "fingerprint": "itself",
    "checkpoint": "named after the fingerprint",
    "passthrough": "a shortcut that writes the same rows as running the SQL (which is in)",
    "exceptions": "follow from the strategy and the SQL, which are in",
    "freshness": "a target that status and metrics check, not how the table is built",
    "tags": "labels to select tables by, not what the table holds",
    "incremental": "facts read from the SQL (which is in) for the strategy (which is in)",
}
# keys under which fingerprints have always carried these fields (renaming a key changes every fingerprint)
_FINGERPRINT_KEYS = {"primary_key": "pk", "merge_engine": "merge", "aggregations": "aggs"}


def table_fingerprint(plan: TablePlan, upstream: Mapping[str, str]) -> str:
    """The fingerprint of a table: sha256 of its plan's fields minus :data:`NOT_FINGERPRINTED`.

    A field holding plan parts (parameters, expectations) is in by the values of their fields, in order. An
    input is in by its name, its ref and ``upstream[ref]``, the fingerprint of what it reads (a source, or the
    upstream table's own fingerprint, which covers that table's kind, schema and keys): a change upstream
    changes every table downstream.
    """
    payload: dict[str, Any] = {}
    for f in fields(TablePlan):
        if f.name in NOT_FINGERPRINTED:
            continue
        value = getattr(plan, f.name)
        if f.name == "inputs":
            value = [(i.name, i.ref, upstream[i.ref]) for i in value]
        payload[_FINGERPRINT_KEYS.get(f.name, f.name)] = _plain(value)
    return fingerprint(payload)


def _plain(value: Any) -> Any:
    """Plan parts as lists of their field values (what the JSON of a fingerprint holds)."""
    if is_dataclass(value) and not isinstance(value, type):
        return [_plain(getattr(value, f.name)) for f in fields(value)]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def data_path_of(setting: str, master: str, connect: bool) -> str:
    """Where micro-batches move their rows, ``driver`` or ``executors`` (docs/architecture.md, "Two data
    paths"): the setting ``materializer.data_path``, where ``auto`` is the driver for a ``local[...]``
    master; always the executors over Spark Connect (the driver is the Connect server). The plan depends on
    it: a GROUP BY over a log table is ``agg_log`` on the driver path, Spark's ``aggregate`` on the other."""
    if connect:
        return "executors"
    if setting != "auto":
        return setting
    return "driver" if master.startswith("local") else "executors"


def quarantine_name(table: str) -> str:
    return f"{table}{QUARANTINE_SUFFIX}"
