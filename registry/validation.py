"""Semantic flow validation: what a flow means against the registered actions and the other flows.

The spec models check one file on its own. Here we check what needs more context, and report every
problem at its YAML node:

* the action of each table exists (at the pinned or requested version);
* inputs: none missing, none extra, each bound to something that exists, following the layer rules (ODS
  reads sources only; other layers read tables of their own or an earlier layer, never sources);
* parameters: none unknown, none missing, each value fits the parameter's Spark type;
* primary key, bucket key and aggregation columns exist in the action's output contract (when declared);
* no table is produced by two flows, and no cycle runs through the flow (across flows too).

What needs Spark (does the SQL parse, does every table analyse against its upstream schemas, are the key
columns in what the SQL outputs) is a :class:`SpecChecks` the caller hands in: the registry runs it only
after its own checks passed, and cannot import it (Spark sits above the registry).
:class:`materializer.checks.EngineChecks` is the one the CLI uses unless it is given ``--quick``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from registry.graph import FlowGraph
from registry.specs import LAYERS, ActionSpec, FlowSpec, check_value, did_you_mean
from registry.specs.values import describe
from runtime.core.errors import ErrorCode, Location, TidehouseError


@dataclass
class ActionCatalog:
    """The actions a flow may use: registered versions, plus unregistered local files that would be next."""

    versions: Mapping[str, Mapping[int, ActionSpec]]
    local: Mapping[str, ActionSpec] = field(default_factory=dict)  # name -> spec not registered (yet)

    def names(self) -> set[str]:
        return set(self.versions) | set(self.local)

    def latest(self, name: str) -> int | None:
        return max(self.versions[name]) if self.versions.get(name) else None


@dataclass
class Resolution:
    """The action a table resolved to: ``version`` is ``None`` for a local action not registered yet."""

    name: str
    version: int | None
    spec: ActionSpec

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}" if self.version is not None else self.name


@dataclass
class FlowCheck:
    errors: list[TidehouseError]
    resolved: dict[str, Resolution]  # "dws.user_activity" -> the action it uses


class SpecChecks(Protocol):
    """Checks the registry cannot make without an engine, each returning the errors it found (located)."""

    def check_actions(self, specs: Iterable[ActionSpec]) -> list[TidehouseError]:
        """Problems of the actions' SQL (e.g. it does not parse), at the action files."""

    def check_flow(self, spec: FlowSpec, resolved: Mapping[str, Resolution]) -> list[TidehouseError]:
        """Problems of a flow that passed :func:`validate_flow_spec`, given the action of each table."""


class _Locator:
    def __init__(self, flow: FlowSpec) -> None:
        self.flow = flow
        self.doc = flow._document

    def at(self, *path, key: bool = False, shown: tuple | None = None) -> Location:
        if self.doc is None:
            from runtime.core.yamlsource import format_path

            return Location(self.flow.path, path=format_path(shown or path))
        return self.doc.location(path, key=key, shown=shown)


def validate_flow_spec(
    flow: FlowSpec,
    catalog: ActionCatalog,
    other_flows: Mapping[str, FlowSpec] = {},
    pins: Mapping[str, str] | None = None,
) -> FlowCheck:
    """Check ``flow`` against the actions in ``catalog`` and the tables of ``other_flows`` (by flow name)."""
    loc = _Locator(flow)
    errors: list[TidehouseError] = []
    resolved: dict[str, Resolution] = {}
    own = {q for q, _ in flow.tables()}
    external = {
        q: name for name, other in other_flows.items() if name != flow.flow for q, _ in other.tables()
    }
    known_tables = own | set(external)

    for qualified, table in flow.tables():
        layer, name = qualified.split(".")
        base = ("layers", layer, name)
        res = _resolve_action(flow, qualified, table, catalog, pins, loc, errors)
        if res is not None:
            resolved[qualified] = res
        _check_references(flow, layer, table, base, known_tables, loc, errors)
        if res is not None:
            _check_inputs(table, base, res.spec, loc, errors)
            _check_params(table, base, res.spec, loc, errors)
            _check_columns(table, base, res.spec, loc, errors)

    for qualified in own:
        if qualified in external:
            other = other_flows[external[qualified]]
            where = other.location_of("layers." + qualified).prefix() or other.path or "the registry"
            layer, name = qualified.split(".")
            errors.append(
                TidehouseError(
                    ErrorCode.TABLE_DUPLICATE,
                    f"table '{qualified}' is also produced by flow '{external[qualified]}' ({where})",
                    location=loc.at("layers", layer, name, key=True),
                    hint=(
                        "a table is produced by one flow only: rename one of them, or read it from the "
                        "other flow"
                    ),
                )
            )

    errors += _cycles(flow, other_flows)
    errors.sort(key=lambda e: (e.location.line or 0, e.location.col or 0) if e.location else (0, 0))
    return FlowCheck(errors, resolved)


def _resolve_action(flow, qualified, table, catalog, pins, loc, errors) -> Resolution | None:
    layer, name = qualified.split(".")
    where = loc.at("layers", layer, name, "action")
    action, version = table.action_name, table.action_version
    if version is None and pins and qualified in pins:
        pinned_name, _, pinned = pins[qualified].partition("@")
        if pinned_name == action and pinned.isdigit():
            version = int(pinned)
    if version is None and action in catalog.local:
        return Resolution(action, None, catalog.local[action])
    versions = catalog.versions.get(action)
    if not versions:
        errors.append(
            TidehouseError(
                ErrorCode.ACTION_UNKNOWN,
                f"unknown action '{action}'",
                location=where,
                hint=did_you_mean(action, catalog.names()) or "register it with `tidehouse action register`",
            )
        )
        return None
    if version is None:
        version = max(versions)
    if version not in versions:
        listed = ", ".join(str(v) for v in sorted(versions))
        errors.append(
            TidehouseError(
                ErrorCode.ACTION_VERSION_UNKNOWN,
                f"action '{action}' has no version {version}",
                location=where,
                hint=f"registered versions: {listed}",
            )
        )
        return None
    return Resolution(action, version, versions[version])


def _check_references(flow: FlowSpec, layer: str, table, base: tuple, known: set[str], loc, errors) -> None:
    order = LAYERS.index(layer)
    # what a typo may have meant: a table it can read (its own layer or an earlier one), not itself
    readable = {q for q in known if q.split(".")[0] in LAYERS[: order + 1] and q != f"{layer}.{base[2]}"}
    for input_name, ref in table.inputs.items():
        where = loc.at(*base, "inputs", input_name)
        if layer == "ods":
            if "." in ref:
                errors.append(
                    TidehouseError(
                        ErrorCode.LAYER_VIOLATION,
                        f"ODS tables read sources only, not the table '{ref}'",
                        location=where,
                        hint=_hint_choices("sources", flow.sources),
                    )
                )
            elif ref not in flow.sources:
                errors.append(
                    TidehouseError(
                        ErrorCode.INPUT_UNKNOWN_TABLE,
                        f"unknown source '{ref}'",
                        location=where,
                        hint=did_you_mean(ref, flow.sources) or _hint_choices("sources", flow.sources),
                    )
                )
            continue
        if "." not in ref:
            if ref in flow.sources:
                readers = [q for q, t in flow.tables() if q.startswith("ods.") and ref in t.inputs.values()]
                errors.append(
                    TidehouseError(
                        ErrorCode.LAYER_VIOLATION,
                        f"only ODS tables read sources; {layer} tables read tables, not the source '{ref}'",
                        location=where,
                        hint=f"read {readers[0]}" if readers else f"add an ODS table that ingests '{ref}'",
                    )
                )
            else:
                errors.append(
                    TidehouseError(
                        ErrorCode.INPUT_UNKNOWN_TABLE,
                        f"'{ref}' is not a table: write 'layer.table'",
                        location=where,
                        hint=_closest_table(ref, readable),
                    )
                )
            continue
        ref_layer = ref.split(".", 1)[0]
        if ref_layer not in LAYERS:
            errors.append(
                TidehouseError(
                    ErrorCode.INPUT_UNKNOWN_TABLE,
                    f"unknown layer '{ref_layer}' in '{ref}'",
                    location=where,
                    hint=did_you_mean(ref, readable) or "layers are " + ", ".join(LAYERS),
                )
            )
        elif ref not in known:
            errors.append(
                TidehouseError(
                    ErrorCode.INPUT_UNKNOWN_TABLE,
                    f"unknown table '{ref}'",
                    location=where,
                    hint=did_you_mean(ref, readable)
                    or "neither this flow nor a registered one or one validated with it produces it",
                )
            )
        elif LAYERS.index(ref_layer) > order:
            errors.append(
                TidehouseError(
                    ErrorCode.LAYER_VIOLATION,
                    f"a {layer} table cannot read '{ref}' from the later layer {ref_layer}",
                    location=where,
                    hint="tables read their own or an earlier layer: " + " -> ".join(LAYERS),
                )
            )


def _closest_table(name: str, known: Iterable[str]) -> str | None:
    """A 'did you mean' for a bare table name: the known ``layer.table`` whose name is closest."""
    import difflib

    by_name = {q.split(".")[1]: q for q in sorted(known)}
    close = difflib.get_close_matches(name, list(by_name), n=1, cutoff=0.6)
    return f"did you mean '{by_name[close[0]]}'?" if close else None


def _hint_choices(what: str, names: Iterable[str]) -> str:
    names = sorted(names)
    return f"{what}: {', '.join(names)}" if names else f"the flow declares no {what}"


def _check_bindings(
    section: str,
    noun: str,
    given,
    declared,
    required,
    base: tuple,
    action: ActionSpec,
    loc,
    errors,
    *,
    codes: tuple[ErrorCode, ErrorCode],
    unbound_is: str,
    placeholder,
) -> None:
    """A table's bindings under ``section`` (``inputs``, ``params``) against what its action declares: a
    name the action does not declare (at its key, with the closest unbound or declared name), and a required
    name the table does not bind (at the section, with what to add)."""
    unknown_code, missing_code = codes
    unbound = [n for n in required if n not in given]
    for name in given:
        if name not in declared:
            errors.append(
                TidehouseError(
                    unknown_code,
                    f"action '{action.name}' has no {noun} '{name}'",
                    location=loc.at(*base, section, name, key=True),
                    hint=did_you_mean(name, unbound)
                    or did_you_mean(name, declared)
                    or _hint_choices(f"its {noun}s", declared),
                )
            )
    for name in unbound:
        errors.append(
            TidehouseError(
                missing_code,
                f"{noun} '{name}' of action '{action.name}' is {unbound_is}",
                location=loc.at(*base, section, shown=base + (section, name)),
                hint=f"add {section}: {{{name}: <{placeholder(name)}>}}",
            )
        )


def _check_inputs(table, base: tuple, action: ActionSpec, loc, errors) -> None:
    read = "source" if base[1] == "ods" else "layer.table"
    _check_bindings(
        "inputs",
        "input",
        list(table.inputs),
        list(action.inputs),
        list(action.inputs),
        base,
        action,
        loc,
        errors,
        codes=(ErrorCode.INPUT_EXTRA, ErrorCode.INPUT_MISSING),
        unbound_is="not bound",
        placeholder=lambda _: read,
    )


def _check_params(table, base: tuple, action: ActionSpec, loc, errors) -> None:
    declared = action.params
    _check_bindings(
        "params",
        "parameter",
        list(table.params),
        list(declared),
        [n for n, spec in declared.items() if spec.required],
        base,
        action,
        loc,
        errors,
        codes=(ErrorCode.PARAM_UNKNOWN, ErrorCode.PARAM_MISSING),
        unbound_is="required",
        placeholder=lambda name: declared[name].type,
    )
    for name, value in table.params.items():
        spec = declared.get(name)
        if spec is None:
            continue
        if value is None:
            errors.append(
                TidehouseError(
                    ErrorCode.PARAM_TYPE,
                    f"expected a {spec.type} value, got null",
                    location=loc.at(*base, "params", name),
                )
            )
            continue
        for sub, message in check_value(value, spec.spark_type):
            errors.append(
                TidehouseError(
                    ErrorCode.PARAM_TYPE,
                    f"parameter '{name}' ({spec.type}): {message}",
                    location=loc.at(*base, "params", name, *sub),
                )
            )


def _check_columns(table, base: tuple, action: ActionSpec, loc, errors) -> None:
    columns = action.output_columns
    if columns is None:
        return
    lowered = {c.lower() for c in columns}
    listed = ", ".join(columns)
    for field_name, code in (
        ("primary_key", ErrorCode.PRIMARY_KEY_INVALID),
        ("bucket_key", ErrorCode.PRIMARY_KEY_INVALID),
    ):
        for i, col in enumerate(getattr(table, field_name)):
            if col.lower() not in lowered:
                errors.append(
                    TidehouseError(
                        code,
                        f"{field_name.replace('_', ' ')} column '{col}' is not in the output of action "
                        f"'{action.name}' ({listed})",
                        location=loc.at(*base, field_name, i),
                        hint=did_you_mean(col, columns),
                    )
                )
    for col in table.aggregations:
        if col.lower() not in lowered:
            errors.append(
                TidehouseError(
                    ErrorCode.SPEC_BAD_VALUE,
                    f"aggregated column '{col}' is not in the output of action '{action.name}' ({listed})",
                    location=loc.at(*base, "aggregations", col, key=True),
                    hint=did_you_mean(col, columns),
                )
            )


def _inputs(flow: FlowSpec) -> dict[str, dict[str, str]]:
    return {qualified: dict(table.inputs) for qualified, table in flow.tables()}


def _cycles(flow: FlowSpec, other_flows: Mapping[str, FlowSpec]) -> list[TidehouseError]:
    """Cycles through this flow's tables, also through tables of the other flows (the flow graph's check)."""
    context = {
        q: inputs
        for name, other in other_flows.items()
        if name != flow.flow
        for q, inputs in _inputs(other).items()
    }
    graph = FlowGraph.build(flow.sources, _inputs(flow), context=context, check=False)
    return graph.cycle_errors(flow.location_of)


__all__ = ["ActionCatalog", "FlowCheck", "Resolution", "SpecChecks", "describe", "validate_flow_spec"]
