"""``tidehouse flow diff``: what registering a flow file changes, table by table, and what must be rebuilt.

The diff is made of two plans — the registered version's that built the flow's data (the latest
registered, unless a newer one has not run: :func:`materializer.built.built_by`) and the file's (with the
project's actions) — so "needs a rebuild" is exactly what the runner refuses without ``--full-refresh``
(:func:`materializer.built.refuse_changed`): a table whose fingerprint changes. Each changed
field of a table says whether it is in the fingerprint (:data:`materializer.plan.NOT_FINGERPRINTED` lists
the ones that are not: trigger, tiering, freshness, tags, the action's version when its SQL is the same...);
a table whose own fields are unchanged is rebuilt when something it reads is (an upstream table, a source,
another flow's table whose schema changed), and the diff says which. Pure: no Spark, no store.
"""

from __future__ import annotations

import difflib
import json
import shlex
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from materializer.plan import NOT_FINGERPRINTED, FlowPlan, SourcePlan, TablePlan, fingerprint
from registry.selectors import Universe, spec_tables
from runtime.core.durations import format_duration
from runtime.core.sparktypes import parse_columns
from runtime.core.text import counted

Status = Literal["added", "removed", "changed", "unchanged"]

# TablePlan fields a diff does not list: the table's identity, where the action file is, prose, and what
# follows from fields it lists (the checkpoint from the fingerprint, the quarantine from inputs/expect)
NOT_DIFFED = frozenset(
    {
        "name",
        "layer",
        "reason",
        "action_path",
        "sql_line",
        "fingerprint",
        "checkpoint",
        "quarantine",
        "passthrough",
    }
)
LABELS = {
    "ddl": "schema",
    "tiering_interval": "tiering interval",
    "primary_key": "primary key",
    "merge_engine": "merge engine",
    "bucket_key": "bucket key",
    "expect": "expectations",
    "exceptions": "batch exceptions",
}


@dataclass(frozen=True)
class Change:
    """One field that differs: ``old`` and ``new`` as plain values, ``rebuild`` when the field is in the
    fingerprint, ``detail`` lines (a unified diff of the SQL, the columns of a schema, the parameters...)."""

    field: str
    old: Any
    new: Any
    rebuild: bool
    detail: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return LABELS.get(self.field, self.field)


@dataclass(frozen=True)
class TableDiff:
    table: str
    status: Status
    rebuild: bool  # an existing table whose fingerprint changes: trigger refuses it without --full-refresh
    reasons: tuple[str, ...] = ()
    changes: tuple[Change, ...] = ()
    old_fingerprint: str | None = None
    new_fingerprint: str | None = None


@dataclass(frozen=True)
class SourceDiff:
    source: str
    status: Status
    changes: tuple[Change, ...] = ()


@dataclass(frozen=True)
class Reader:
    """Another registered flow that reads tables this change rebuilds: its tables that read them (and their
    downstream) must be rebuilt after them, or their queries stop with TH405."""

    flow: str
    reads: tuple[str, ...]  # the rebuilt tables of this flow it reads
    tables: tuple[str, ...]  # its tables to rebuild

    @property
    def command(self) -> str:
        return f"tidehouse flow trigger {self.flow} " + " ".join(f"--full-refresh {t}+" for t in self.reads)


@dataclass(frozen=True)
class FlowDiff:
    flow: str
    path: str
    version: int | None  # the registered version compared against (None: the flow is not registered)
    tables: tuple[TableDiff, ...]
    sources: tuple[SourceDiff, ...]
    full_refresh: tuple[str, ...]  # the tables --full-refresh must name (the rest of `rebuild` is downstream)
    readers: tuple[Reader, ...] = ()  # other flows reading rebuilt tables: to rebuild next
    latest: int | None = None  # the latest registered version, when newer than ``version`` (it did not run)

    def _with(self, status: Status) -> list[str]:
        return [t.table for t in self.tables if t.status == status]

    @property
    def added(self) -> list[str]:
        return self._with("added")

    @property
    def removed(self) -> list[str]:
        return self._with("removed")

    @property
    def changed(self) -> list[str]:
        return self._with("changed")

    @property
    def rebuild(self) -> list[str]:
        return [t.table for t in self.tables if t.rebuild]

    @property
    def differs(self) -> bool:
        return any(t.status != "unchanged" for t in self.tables) or any(
            s.status != "unchanged" for s in self.sources
        )

    @property
    def command(self) -> str | None:
        """The trigger that rebuilds what must be rebuilt, or None."""
        if not self.full_refresh:
            return None
        return f"tidehouse flow trigger {shlex.quote(self.path)} " + " ".join(
            f"--full-refresh {shlex.quote(t)}" for t in self.full_refresh
        )

    # -- rendering --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "flow": self.flow,
            "path": self.path,
            "registered_version": self.version,
            "latest_version": self.latest or self.version,
            "differs": self.differs,
            "added": self.added,
            "removed": self.removed,
            "changed": self.changed,
            "rebuild": self.rebuild,
            "full_refresh": list(self.full_refresh),
            "command": self.command,
            "readers": [{**asdict(r), "command": r.command} for r in self.readers],
            "sources": [asdict(s) for s in self.sources if s.status != "unchanged"],
            "tables": [asdict(t) for t in self.tables],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def to_text(self) -> str:
        against = f"version {self.version}" if self.version is not None else "nothing (not registered)"
        if self.latest is not None:
            against += f", which built its data (version {self.latest}, registered since, did not run)"
        lines = [f"flow {self.flow}: {self.path} against {against}"]
        if not self.differs:
            lines.append("  no difference")
            return "\n".join(lines)
        for s in self.sources:
            if s.status == "unchanged":
                continue
            lines.append(f"  {_MARK[s.status]} source {s.source}: {s.status}")
            lines += _change_lines(s.changes)
        for t in self.tables:
            if t.status == "unchanged":
                continue
            if t.status == "added":
                note = "added: built from its inputs on the next trigger"
            elif t.status == "removed":
                note = "removed: no longer run or tiered; its hot and lake tables are kept" + "".join(
                    f"; {r}" for r in t.reasons
                )
            elif t.rebuild:
                note = "REBUILD: " + "; ".join(t.reasons)
            else:
                note = "no rebuild: " + "; ".join(t.reasons)
            lines.append(f"  {_MARK[t.status]} {t.table}: {note}")
            lines += _change_lines(t.changes)
        same = self._with("unchanged")
        if same:
            lines.append(f"  unchanged: {', '.join(same)}")
        if self.full_refresh:
            lines.append(f"rebuild {counted(len(self.rebuild), 'table')}: {', '.join(self.rebuild)}")
            lines.append(f"  {self.command}")
            for r in self.readers:
                lines.append(
                    f"then flow {r.flow}, which reads {', '.join(r.reads)} ({', '.join(r.tables)} rebuilt):"
                )
                lines.append(f"  {r.command}")
        else:
            lines.append("no table needs a rebuild")
        return "\n".join(lines)


_MARK = {"added": "+", "removed": "-", "changed": "~", "unchanged": "="}


def _change_lines(changes: tuple[Change, ...]) -> list[str]:
    out = []
    for c in changes:
        tag = "rebuild" if c.rebuild else "no rebuild"
        if c.detail and c.field == "sql":
            out.append(f"      sql [{tag}]:")
            out += [f"        {line}" for line in c.detail]
        elif c.detail:
            out.append(f"      {c.label} [{tag}]: " + "; ".join(c.detail))
        else:
            out.append(f"      {c.label} [{tag}]: {_show(c.field, c.old)} -> {_show(c.field, c.new)}")
    return out


def _show(field: str, value: Any) -> str:
    if value is None:
        return "none"
    if field in ("trigger", "tiering_interval", "freshness"):
        return format_duration(value)
    if isinstance(value, (list, tuple)):
        return (
            "(" + ", ".join(_show(field, v) if isinstance(v, (list, tuple)) else str(v) for v in value) + ")"
        )
    return json.dumps(value) if not isinstance(value, str) else value


# -- field renderers ----------------------------------------------------------------------------------
def _sql(old: TablePlan, new: TablePlan) -> tuple[str, ...]:
    return tuple(
        line.rstrip("\n")
        for line in difflib.unified_diff(
            old.sql.splitlines(), new.sql.splitlines(), old.action, new.action, lineterm="", n=1
        )
    )


def _params(old: TablePlan, new: TablePlan) -> tuple[str, ...]:
    before, after = {p.name: p for p in old.params}, {p.name: p for p in new.params}
    out = []
    for name in sorted(before.keys() | after.keys()):
        a, b = before.get(name), after.get(name)
        if a == b:
            continue
        out.append(f":{name} {_param(a)} -> {_param(b)}")
    return tuple(out)


def _param(p) -> str:
    return "unset" if p is None else f"{json.dumps(p.value, default=str)} ({p.type})"


def _columns(ddl: str) -> dict[str, str]:
    return {c.name: str(c.type) for c in parse_columns(ddl)}


def _schema(old: TablePlan, new: TablePlan) -> tuple[str, ...]:
    before, after = _columns(old.ddl), _columns(new.ddl)
    out = [f"+ {n} {t}" for n, t in after.items() if n not in before]
    out += [f"- {n} {t}" for n, t in before.items() if n not in after]
    out += [f"{n} {before[n]} -> {after[n]}" for n in after if n in before and before[n] != after[n]]
    if not out:  # same columns and types: the order changed
        out.append("column order " + ", ".join(before) + " -> " + ", ".join(after))
    return tuple(out)


def _inputs(old: TablePlan, new: TablePlan) -> tuple[str, ...]:
    before, after = {i.name: i.ref for i in old.inputs}, {i.name: i.ref for i in new.inputs}
    return tuple(
        f"{name} <- {before.get(name, 'unset')} -> {after.get(name, 'unset')}"
        for name in sorted(before.keys() | after.keys())
        if before.get(name) != after.get(name)
    )


def _expect(old: TablePlan, new: TablePlan) -> tuple[str, ...]:
    before, after = {e.name: e for e in old.expect}, {e.name: e for e in new.expect}
    out = []
    for name in sorted(before.keys() | after.keys()):
        a, b = before.get(name), after.get(name)
        if a == b:
            continue
        if a is None:
            out.append(f"+ {name}: {b.condition} ({b.on_violation})")
        elif b is None:
            out.append(f"- {name}")
        else:
            out.append(f"{name}: {a.condition} ({a.on_violation}) -> {b.condition} ({b.on_violation})")
    return tuple(out)


DETAIL: dict[str, Callable[[TablePlan, TablePlan], tuple[str, ...]]] = {
    "sql": _sql,
    "params": _params,
    "ddl": _schema,
    "inputs": _inputs,
    "expect": _expect,
}


def _entries(old: Any, new: Any) -> tuple[str, ...]:
    """The entries of two mappings that differ (``limit: 10 -> 5``), not both whole; () unless both are
    mappings."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return ()
    out = []
    for key in [*old, *(k for k in new if k not in old)]:
        if key not in new:
            out.append(f"- {key}")
        elif key not in old:
            out.append(f"+ {key}: {json.dumps(new[key])}")
        elif old[key] != new[key]:
            out.append(f"{key}: {json.dumps(old[key])} -> {json.dumps(new[key])}")
    return tuple(out)


def _plain(value: Any) -> Any:
    return json.loads(
        json.dumps(value, default=lambda v: asdict(v) if hasattr(v, "__dataclass_fields__") else str(v))
    )


def table_changes(old: TablePlan, new: TablePlan) -> tuple[Change, ...]:
    """Every field of the two plans of a table that differs (but :data:`NOT_DIFFED`), in field order."""
    out = []
    for f in fields(TablePlan):
        if f.name in NOT_DIFFED:
            continue
        if f.name == "inputs":  # an input's kind and schema are its upstream's (diffed there)
            a, b = [(i.name, i.ref) for i in old.inputs], [(i.name, i.ref) for i in new.inputs]
        else:
            a, b = getattr(old, f.name), getattr(new, f.name)
        if a == b:
            continue
        a, b = _plain(a), _plain(b)
        detail = DETAIL[f.name](old, new) if f.name in DETAIL else _entries(a, b)
        out.append(Change(f.name, a, b, rebuild=f.name not in NOT_FINGERPRINTED, detail=detail))
    return tuple(out)


def _source_changes(old: SourcePlan, new: SourcePlan) -> tuple[Change, ...]:
    out = []
    for f in fields(SourcePlan):
        if f.name in ("name", "fingerprint"):
            continue
        a, b = getattr(old, f.name), getattr(new, f.name)
        if a != b:
            out.append(Change(f.name, _plain(a), _plain(b), rebuild=old.fingerprint != new.fingerprint))
    return tuple(out)


# -- the diff -----------------------------------------------------------------------------------------
def diff_plans(
    old: FlowPlan | None,
    new: FlowPlan,
    path: str = "",
    others: Mapping[str, Any] | None = None,
    latest: int | None = None,
) -> FlowDiff:
    """What changes from ``old`` (the registered version's plan; None: not registered) to ``new``.
    ``others``: the specs of the other registered flows (``{name: FlowSpec}``), to name those that read a
    table this change rebuilds or removes. ``latest``: the latest registered version, when it is not
    ``old``'s."""
    old_tables = {t.name: t for t in old.tables} if old else {}
    old_sources = {s.ref: s for s in old.sources} if old else {}
    new_sources = {s.ref: s for s in new.sources}
    sources = []
    for ref in sorted(old_sources.keys() | new_sources.keys()):
        a, b = old_sources.get(ref), new_sources.get(ref)
        name = ref.split(":", 1)[1]
        if a is None or b is None:
            sources.append(SourceDiff(name, "added" if a is None else "removed"))
        else:
            changes = _source_changes(a, b)
            sources.append(SourceDiff(name, "changed" if changes else "unchanged", changes))

    def upstream_fingerprint(plan_tables: dict[str, TablePlan], plan_sources, inp) -> str | None:
        if inp.ref in plan_tables:
            return plan_tables[inp.ref].fingerprint
        if inp.ref in plan_sources:
            return plan_sources[inp.ref].fingerprint
        return fingerprint({"external": inp.ref, "ddl": inp.ddl})  # another flow's table, as analyse does

    new_tables = {t.name: t for t in new.tables}
    tables: list[TableDiff] = []
    for t in new.tables:  # plan order (topological): an upstream's verdict is known before its readers'
        before = old_tables.get(t.name)
        if before is None:
            tables.append(TableDiff(t.name, "added", False, new_fingerprint=t.fingerprint))
            continue
        changes = table_changes(before, t)
        rebuild = before.fingerprint != t.fingerprint
        reasons = [f"{c.label} changed" for c in changes if c.rebuild]
        old_inputs = {i.name: i for i in before.inputs}
        for inp in t.inputs:
            was = old_inputs.get(inp.name)
            if was is None or was.ref != inp.ref:
                continue  # a rebound input is an inputs change, listed above
            a = upstream_fingerprint(old_tables, old_sources, was)
            b = upstream_fingerprint(new_tables, new_sources, inp)
            if a != b:
                what = (
                    f"source {inp.ref.split(':', 1)[1]}, whose definition changed"
                    if inp.ref in new_sources
                    else f"{inp.ref}, which is rebuilt"
                    if inp.ref in new_tables
                    else f"{inp.ref} of another flow, whose schema changed"
                )
                reasons.append(f"reads {what}")
        if rebuild and not reasons:
            reasons.append("its plan changed")
        if not rebuild:
            reasons = [", ".join(c.label for c in changes) + " only"] if changes else []
        status: Status = "changed" if changes or rebuild else "unchanged"
        tables.append(
            TableDiff(t.name, status, rebuild, tuple(reasons), changes, before.fingerprint, t.fingerprint)
        )
    for name, before in old_tables.items():
        if name not in new_tables:
            read_by = [
                f"read by flow {flow}"
                for flow, spec in sorted((others or {}).items())
                if _reads(spec, {name})
            ]
            tables.append(
                TableDiff(name, "removed", False, tuple(read_by), old_fingerprint=before.fingerprint)
            )
    rebuilt = [t.table for t in tables if t.rebuild]
    roots = Universe(new.graph(), flow=new.flow).upstream_roots(rebuilt) if rebuilt else []
    readers = []
    for flow, spec in sorted((others or {}).items()):
        reads = sorted(_reads(spec, set(rebuilt)))
        if reads:
            readers.append(Reader(flow, tuple(reads), tuple(spec_tables(spec, [f"{t}+" for t in reads]))))
    return FlowDiff(
        new.flow,
        path,
        old.version if old else None,
        tuple(tables),
        tuple(sources),
        tuple(roots),
        tuple(readers),
        None if old is None or latest == old.version else latest,
    )


def _reads(spec, tables: set[str]) -> set[str]:
    """The tables of ``tables`` that a flow spec's tables read."""
    return {ref for _, t in spec.tables() for ref in t.inputs.values() if ref in tables}
