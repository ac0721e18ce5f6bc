"""Action specs: a reusable SQL statement with a YAML header (BRIEF §3.3).

```sql
/*---
name: count_by_key
description: Count events per key.
inputs: [events]
params:
  key: {type: string, description: the column to group by}
output: "key string, cnt bigint"
---*/
SELECT IDENTIFIER(:key) AS key, count(*) AS cnt FROM events GROUP BY 1
```
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from registry.specs.base import (
    BAD_VALUE,
    WRONG_TYPE,
    Column,
    Identifier,
    Spec,
    Text,
    custom,
    ddl_columns,
    listed_once,
)
from registry.specs.values import check_value
from runtime.core.sparktypes import Column as DdlColumn
from runtime.core.sparktypes import SparkType, SparkTypeError, parse_columns, parse_type


def _spark_type(value: Any) -> str:
    if not isinstance(value, str):
        raise custom(WRONG_TYPE, "expected a Spark SQL type string like 'bigint' or 'array<string>'")
    try:
        parse_type(value)
    except SparkTypeError as exc:
        raise custom(BAD_VALUE, f"not a Spark SQL type: {exc}") from None
    return value.strip()


def _output(value: Any) -> str | None:
    """The output contract: Spark DDL (``"a string, b bigint"``) or a list of column names."""
    if value is None:
        return None
    if isinstance(value, list):
        if not value:
            raise custom(BAD_VALUE, "the output contract lists no columns")
        for i, name in enumerate(value):
            if not isinstance(name, str):
                raise custom(WRONG_TYPE, "expected a column name", at=(i,))
        value = ", ".join(value)
    if not isinstance(value, str):
        raise custom(
            WRONG_TYPE, "expected Spark DDL like 'user_id string, cnt bigint' or a list of column names"
        )
    for column in ddl_columns(value, untyped=True, what="output column", error="not a column list"):
        if not column.nullable:
            raise custom(
                BAD_VALUE,
                f"output column {column.name!r}: NOT NULL is for source schemas only (a "
                "contract names the columns the SQL returns, and their types)",
            )
    return value.strip()


SparkTypeString = Annotated[str, BeforeValidator(_spark_type)]


class ParamSpec(Spec):
    """One parameter of an action, bound with a named parameter marker (``:name``) - never substituted."""

    type: SparkTypeString = Field(
        description="Spark SQL type of the value: string, int, bigint, double, boolean, "
        "date, timestamp, decimal(p,s), array<T>, map<K,V>, struct<...>."
    )
    default: Any = Field(
        None,
        description="Value used when a flow does not set the parameter; without a "
        "default the parameter is required.",
    )
    description: Text = Field("", description="What the parameter means, for the action reference.")

    @property
    def required(self) -> bool:
        return "default" not in self.model_fields_set

    @property
    def spark_type(self) -> SparkType:
        return parse_type(self.type)

    @model_validator(mode="after")
    def _default_fits_type(self) -> ParamSpec:
        if "default" in self.model_fields_set and self.default is not None:
            for sub, message in check_value(self.default, self.spark_type):
                raise custom(
                    "th_param_type", f"default does not fit {self.type}: {message}", at=("default",) + sub
                )
        return self


class ActionHeader(Spec):
    """The YAML header of an action file (the part between ``/*---`` and ``---*/``)."""

    name: Identifier = Field(description="Name of the action, referred to by flows as `name` or `name@N`.")
    description: Text = Field("", description="What the action does, for the action reference.")
    inputs: Annotated[tuple[Identifier, ...], listed_once("input")] = Field(
        (), description="Names of the relations the SQL reads; a flow binds each one to a source or a table."
    )
    params: dict[Identifier, ParamSpec] = Field(
        default_factory=dict, description="Parameters, bound as `:name` markers in the SQL."
    )
    output: Annotated[str | None, BeforeValidator(_output)] = Field(
        None,
        description="Optional output contract: Spark DDL ('user_id string, cnt bigint') or a list of "
        "column names. Primary keys of tables using the action must be among them.",
    )
    primary_key: tuple[Column, ...] | None = Field(
        None, description="Suggested primary key of tables produced by the action (documentation only)."
    )


class ActionSpec(ActionHeader):
    """A parsed action: its header, the SQL and where it came from."""

    sql: str = Field(description="The SQL statement after the header (a trailing ';' removed).")
    path: str | None = Field(None, description="The file the action was read from.")
    sql_line: int = Field(
        1, description="1-based line of the file where the SQL starts (to map Spark errors)."
    )

    @property
    def output_contract(self) -> tuple[DdlColumn, ...] | None:
        """The parsed output contract (a column's type is ``None`` where it names the column only), or
        ``None`` when the action declares none."""
        return None if self.output is None else parse_columns(self.output, untyped=True)

    @property
    def output_columns(self) -> tuple[str, ...] | None:
        """Column names of the output contract, or ``None`` when the action declares none."""
        contract = self.output_contract
        return None if contract is None else tuple(c.name for c in contract)

    @property
    def output_types(self) -> dict[str, SparkType | None]:
        return {c.name: c.type for c in self.output_contract or ()}

    def param_values(self, given: dict[str, Any]) -> dict[str, Any]:
        """The values to bind: the flow's values over the defaults."""
        out = {name: spec.default for name, spec in self.params.items() if not spec.required}
        out.update(given)
        return out
