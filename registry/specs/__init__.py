"""Spec models and their parsing: what users write, checked strictly, with every error located.

``registry.specs`` is the import path other packages use; the models live in one module per family
(:mod:`.action`, :mod:`.flow`), the YAML loader in :mod:`runtime.core.yamlsource`.
"""

from registry.specs.action import ActionHeader, ActionSpec, ParamSpec
from registry.specs.base import Spec, did_you_mean
from registry.specs.flow import (
    LAYERS,
    DefaultsSpec,
    ExpectSpec,
    FlowSpec,
    SourceSpec,
    TableSpec,
    TieringSpec,
)
from registry.specs.loading import parse_action, parse_action_text, parse_flow, parse_flow_text
from registry.specs.values import check_value
from runtime.core.sparktypes import SparkType, SparkTypeError, parse_columns, parse_type

__all__ = [
    "LAYERS",
    "ActionHeader",
    "ActionSpec",
    "DefaultsSpec",
    "ExpectSpec",
    "FlowSpec",
    "ParamSpec",
    "SourceSpec",
    "SparkType",
    "SparkTypeError",
    "Spec",
    "TableSpec",
    "TieringSpec",
    "check_value",
    "did_you_mean",
    "parse_action",
    "parse_action_text",
    "parse_columns",
    "parse_flow",
    "parse_flow_text",
    "parse_type",
]
