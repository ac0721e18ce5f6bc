"""Flow specs: sources, and the tables of the four layers with the action that produces each (BRIEF §3.4).

These models check everything that one file can tell on its own (keys, types, names, durations, merge
engine rules). Checks that need the registered actions and the other flows (unknown actions, inputs,
parameter types, layer rules, cycles, duplicate tables) live in :mod:`registry.validation`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, PrivateAttr, field_validator, model_validator

from registry.specs.base import (
    BAD_IDENTIFIER,
    BAD_PRIMARY_KEY,
    BAD_VALUE,
    MISSING,
    WRONG_TYPE,
    Column,
    Duration,
    Identifier,
    PrimaryKey,
    Spec,
    Text,
    custom,
    ddl_columns,
    listed_once,
)
from runtime.core.durations import format_duration
from runtime.core.errors import Location
from runtime.core.literals import (
    AGGREGATIONS,
    DEFAULT_MERGE_ENGINE,
    LAYERS,
    MERGE_ENGINES,
    Aggregation,
    Layer,
    MergeEngine,
)
from runtime.core.refs import REF_RE
from runtime.core.settings import default

OnViolation = Literal["drop", "quarantine", "fail"]
_TIERING = format_duration(default("tiering.interval"))  # in descriptions (the docs are generated from them)

FILE_FORMATS = ("json", "csv", "parquet", "orc", "text")  # Spark file sources: they need a path
SCHEMA_REQUIRED = ("json", "csv")  # streaming file sources cannot infer these schemas


def _action_ref(value: Any) -> str:
    if not isinstance(value, str):
        raise custom(WRONG_TYPE, "expected an action name like 'clean_clicks' or 'clean_clicks@2'")
    if not REF_RE.match(value):
        raise custom(
            BAD_IDENTIFIER,
            f"{value!r} is not an action reference: write 'name' or 'name@N' (N = a version number from 1)",
        )
    return value


def _string_map(value: Any) -> Any:
    """Source options are strings for Spark; numbers and booleans are accepted and spelled as Spark does."""
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if isinstance(item, bool):
            item = "true" if item else "false"
        elif isinstance(item, (int, float)):
            item = str(item)
        elif not isinstance(item, str):
            raise custom(WRONG_TYPE, "option values must be strings, numbers or booleans", at=(key,))
        out[key] = item
    return out


ActionRef = Annotated[str, BeforeValidator(_action_ref)]


class TieringSpec(Spec):
    """How fresh a table's lake copy is kept."""

    interval: Duration = Field(
        description="Tiering interval: the lake copy lags the hot table by at most about "
        "this much ('30s', '1m')."
    )


class ExpectSpec(Spec):
    """A data-quality rule checked on every row a table receives."""

    name: Identifier = Field(description="Name of the rule, shown in status and in quarantine records.")
    condition: Text = Field(description="A Spark SQL boolean expression over the table's columns.")
    on_violation: OnViolation = Field(
        "quarantine",
        description="What happens to a row that fails: drop it, quarantine it (default), or fail the flow.",
    )


class SourceSpec(Spec):
    """An external streaming input of the flow, read by ODS tables."""

    format: Identifier = Field(
        description="Spark streaming source format: json, csv, parquet, orc, text, rate, kafka, ..."
    )
    path: Text | None = Field(None, description="Where file sources read from (relative to the project).")
    schema_: Text | None = Field(
        None,
        alias="schema",
        description="Spark DDL schema of the records, e.g. "
        "'user_id string NOT NULL, ts timestamp'. A record "
        "that does not parse with it, or lacks a NOT NULL "
        "column, goes to the ODS table's quarantine; "
        "fields it does not declare are ignored.",
    )
    options: Annotated[dict[str, Text], BeforeValidator(_string_map)] = Field(
        default_factory=dict,
        description="Options passed to the Spark reader (strings). For json, csv, parquet, orc and text "
        "sources each must be an option of Spark's reader of that format or of its file sources (any case), "
        "or a key with a dot (Hadoop's); mode and columnNameOfCorruptRecord are Tidehouse's (quarantine).",
    )

    @field_validator("schema_")
    @classmethod
    def _schema_parses(cls, value: str | None) -> str | None:
        if value is not None:
            ddl_columns(value)
        return value

    @model_validator(mode="after")
    def _file_sources(self) -> SourceSpec:
        if self.format in FILE_FORMATS and not self.path:
            raise custom(MISSING, f"a {self.format} source needs a 'path'", at=("path",))
        if self.format in SCHEMA_REQUIRED and not self.schema_:
            raise custom(
                MISSING, f"a streaming {self.format} source needs a 'schema' (Spark DDL)", at=("schema",)
            )
        return self


class TableSpec(Spec):
    """One table of a layer and the action that produces it."""

    action: ActionRef = Field(
        description="The action producing the table: 'name' (pinned to the latest version "
        "when the flow is registered) or 'name@N'."
    )
    inputs: dict[Identifier, Text] = Field(
        default_factory=dict,
        description="Binds each input of the action: to a "
        "source name (ODS tables) or to a table 'layer.table'.",
    )
    params: dict[Identifier, Any] = Field(
        default_factory=dict, description="Parameter values of the action, checked against their Spark types."
    )
    primary_key: PrimaryKey = Field(
        (),
        description="Primary key columns; makes this a primary-key table "
        "with a changelog (otherwise a log table).",
    )
    merge_engine: MergeEngine = Field(
        DEFAULT_MERGE_ENGINE,
        description="How rows with the same key merge: "
        f"{DEFAULT_MERGE_ENGINE} (default), "
        f"{', '.join(e for e in MERGE_ENGINES if e != DEFAULT_MERGE_ENGINE)}.",
    )
    aggregations: dict[Column, Aggregation] = Field(
        default_factory=dict,
        description="With merge_engine "
        f"aggregate: column -> {'|'.join(AGGREGATIONS)}; a column "
        "not named takes the incoming value.",
    )
    buckets: Annotated[int, Field(strict=True, ge=1, le=1024)] = Field(
        1, description="Number of buckets (>= 1)."
    )
    bucket_key: Annotated[tuple[Column, ...], listed_once("bucket key column")] = Field(
        (), description="Columns that choose a row's bucket; default: the primary key (must be part of it)."
    )
    trigger: Duration | None = Field(
        None, description="Micro-batch interval of this table's query; default: the flow's trigger."
    )
    tiering: TieringSpec | None = Field(
        None,
        description="Lake freshness of this table; default: the flow's, else "
        "the project setting tiering.interval.",
    )
    freshness: Duration | None = Field(
        None,
        description="Freshness target ('1m'): flow status and the metrics flag "
        "the table while its hot delay or its lake delay exceeds "
        "it; default: the flow's (none). Not below the tiering "
        "interval.",
    )
    lookups: Literal["processing_time"] | None = Field(
        None,
        description="'processing_time': join each row of the table's one append-only input with its "
        "primary-key inputs as they are when its micro-batch runs (a lookup join): a later change of them "
        "does not revise rows already written. Default: batch semantics (a log table cannot read primary-key "
        "tables without it).",
    )
    expect: tuple[ExpectSpec, ...] = Field((), description="Data-quality rules checked on every row.")
    tags: Annotated[tuple[Identifier, ...], listed_once("tag")] = Field(
        (),
        description="Labels to select the table by (`--select tag:NAME`, see operations.md); they change "
        "nothing the table holds, so editing them never rebuilds it.",
    )
    description: Text = Field("", description="What the table holds, for docs and `flow plan`.")

    @property
    def action_name(self) -> str:
        return REF_RE.match(self.action).group(1)

    @property
    def action_version(self) -> int | None:
        version = REF_RE.match(self.action).group(2)
        return int(version) if version else None

    @property
    def effective_bucket_key(self) -> tuple[str, ...]:
        return self.bucket_key or self.primary_key

    @field_validator("expect")
    @classmethod
    def _expect_unique(cls, value: tuple) -> tuple:
        names = [e.name for e in value]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise custom(BAD_VALUE, f"expectation {name!r} is defined twice", at=(i, "name"))
        return value

    @model_validator(mode="after")
    def _keys_and_engines(self) -> TableSpec:
        if not self.primary_key and "merge_engine" in self.model_fields_set:
            raise custom(
                BAD_PRIMARY_KEY,
                "a merge engine needs a primary key (log tables only append)",
                at=("merge_engine",),
            )
        pk = {c.lower() for c in self.primary_key}
        if self.aggregations and self.merge_engine != "aggregate":
            raise custom(BAD_VALUE, "'aggregations' needs merge_engine: aggregate", at=("aggregations",))
        if self.merge_engine == "aggregate" and not self.aggregations:
            raise custom(
                MISSING,
                "merge_engine aggregate needs 'aggregations' (column -> function)",
                at=("aggregations",),
            )
        for name in self.aggregations:
            if name.lower() in pk:
                raise custom(
                    BAD_VALUE, f"primary key column {name!r} cannot be aggregated", at=("aggregations", name)
                )
        if self.primary_key:
            for i, name in enumerate(self.bucket_key):
                if name.lower() not in pk:
                    raise custom(
                        BAD_PRIMARY_KEY,
                        f"bucket key column {name!r} is not part of the primary key "
                        f"({', '.join(self.primary_key)})",
                        at=("bucket_key", i),
                    )
        return self


def _layers(value: Any) -> Any:
    """Layers come back in ods, dwd, dws, ads order whatever order the file uses."""
    if isinstance(value, dict):
        return {layer: value[layer] for layer in LAYERS if layer in value} | {
            k: v for k, v in value.items() if k not in LAYERS
        }
    return value


class DefaultsSpec(Spec):
    """Defaults applied to every table of the flow that does not set the key itself."""

    buckets: Annotated[int, Field(strict=True, ge=1, le=1024)] | None = Field(
        None, description="Default number of buckets of the flow's tables."
    )
    expect: tuple[ExpectSpec, ...] = Field(
        (), description="Rules added to every table (ODS tables included)."
    )


class FlowSpec(Spec):
    """A flow: sources and the tables of its layers."""

    flow: Identifier = Field(description="Name of the flow.")
    description: Text = Field("", description="What the flow computes.")
    trigger: Duration = Field(1.0, description="Default micro-batch interval of every query ('500ms', '1s').")
    tiering: TieringSpec | None = Field(
        None,
        description="Default lake freshness of every table; default: the "
        f"project setting tiering.interval ({_TIERING}).",
    )
    freshness: Duration | None = Field(
        None, description="Default freshness target of every table (see the table key); default: none."
    )
    sources: dict[Identifier, SourceSpec] = Field(
        default_factory=dict, description="External inputs, read by ODS tables."
    )
    layers: Annotated[dict[Layer, dict[Identifier, TableSpec]], BeforeValidator(_layers)] = Field(
        description="Tables by layer: ods, dwd, dws, ads (each: table name -> table)."
    )
    defaults: DefaultsSpec = Field(DefaultsSpec(), description="Defaults for every table of the flow.")
    path: str | None = Field(
        None, exclude=True, description="The file the flow was read from (not a YAML key)."
    )

    _document: Any = PrivateAttr(None)

    @model_validator(mode="after")
    def _has_tables(self) -> FlowSpec:
        if not any(self.layers.values()):
            raise custom(BAD_VALUE, "the flow has no tables: add one under layers.ods", at=("layers",))
        return self

    @model_validator(mode="after")
    def _freshness_reachable(self) -> FlowSpec:
        """A freshness target below the tiering interval is missed every cycle (the lake copy lags by up to
        the interval). Checked where the flow sets both; against the project setting tiering.interval, a
        table would simply be flagged by the status."""
        for layer, tables in self.layers.items():
            for name, table in tables.items():
                target, interval = self.freshness_of(f"{layer}.{name}"), self.tiering_of(f"{layer}.{name}")
                if target is not None and interval is not None and target < interval:
                    at = (
                        ("layers", layer, name, "freshness")
                        if table.freshness is not None
                        else ("freshness",)
                    )
                    raise custom(
                        BAD_VALUE,
                        f"freshness {format_duration(target)} of {layer}.{name} is below its "
                        f"tiering interval {format_duration(interval)}: its lake copy lags by up to the "
                        "interval, so it would miss the target every cycle (raise freshness or shorten "
                        "tiering)",
                        at=at,
                    )
        return self

    @model_validator(mode="after")
    def _apply_defaults(self) -> FlowSpec:
        if self.defaults.buckets is None and not self.defaults.expect:
            return self
        layers: dict[str, dict[str, TableSpec]] = {}
        for layer, tables in self.layers.items():
            layers[layer] = {}
            for name, table in tables.items():
                update: dict[str, Any] = {}
                if self.defaults.buckets is not None and "buckets" not in table.model_fields_set:
                    update["buckets"] = self.defaults.buckets
                own = {e.name for e in table.expect}
                extra = tuple(e for e in self.defaults.expect if e.name not in own)
                if extra:
                    update["expect"] = extra + table.expect
                layers[layer][name] = table.model_copy(update=update) if update else table
        object.__setattr__(self, "layers", layers)  # frozen: same values, defaults filled in
        return self

    # -- navigation ---------------------------------------------------------------------------------
    def tables(self) -> list[tuple[str, TableSpec]]:
        """``[("ods.clicks", spec), ("dwd.clicks", spec), ...]`` in layer order, then file order."""
        return [
            (f"{layer}.{name}", spec) for layer in LAYERS for name, spec in self.layers.get(layer, {}).items()
        ]

    def table(self, qualified: str) -> TableSpec:
        layer, _, name = qualified.partition(".")
        return self.layers[layer][name]

    def trigger_of(self, qualified: str) -> float:
        """The micro-batch interval of a table (its own, else the flow's)."""
        own = self.table(qualified).trigger
        return own if own is not None else self.trigger

    def tiering_of(self, qualified: str, default: float | None = None) -> float | None:
        """The tiering interval of a table in seconds: its own, else the flow's, else ``default`` (the project
        setting ``tiering.interval``, which callers pass)."""
        own = self.table(qualified).tiering or self.tiering
        return own.interval if own is not None else default

    def freshness_of(self, qualified: str) -> float | None:
        """The freshness target of a table in seconds: its own, else the flow's, else None (no target)."""
        own = self.table(qualified).freshness
        return own if own is not None else self.freshness

    def location_of(self, yaml_path: str) -> Location:
        """Source position of a node (``layers.dwd.clicks.action``) for errors found later (plan, Spark)."""
        if self._document is None:
            return Location(self.path, path=yaml_path)
        return self._document.location_of(yaml_path)
