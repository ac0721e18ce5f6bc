"""One exception root for the whole project, with stable codes.

Every error a user can cause is a :class:`TidehouseError` with a code from :class:`ErrorCode`. Tests assert
the code and the location, never the prose. Third-party errors (Spark's AnalysisException, pyiceberg's
CommitFailedException, YAML errors, OS errors) are wrapped at the boundary with ``raise ... from exc`` so the
cause is kept for ``--debug``.

Exit codes: user errors (bad input, bad configuration, refused operations) exit 2; internal errors exit 1.
The library never calls ``sys.exit``: the CLI maps errors to exit codes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any


class ErrorCode(str, Enum):
    """Stable error codes. The value is what users see and what tests assert."""

    # configuration and project
    CONFIG_INVALID = "TH100"
    CONFIG_MISSING_ENV = "TH101"
    HOME_LOCKED = "TH102"

    # YAML and specs (registry)
    YAML_SYNTAX = "TH200"
    YAML_DUPLICATE_KEY = "TH201"
    YAML_EMPTY = "TH202"
    YAML_NOT_TEXT = "TH203"
    YAML_TOO_LARGE = "TH204"
    YAML_TOO_DEEP = "TH205"
    SPEC_UNKNOWN_KEY = "TH210"
    SPEC_WRONG_TYPE = "TH211"
    SPEC_MISSING_KEY = "TH212"
    SPEC_BAD_VALUE = "TH213"
    SPEC_BAD_DURATION = "TH214"
    SPEC_BAD_IDENTIFIER = "TH215"
    ACTION_HEADER = "TH220"
    ACTION_UNKNOWN = "TH221"
    ACTION_VERSION_UNKNOWN = "TH222"
    ACTION_SQL_INVALID = "TH223"
    ACTION_DUPLICATE = "TH224"  # two files in one registration define the same action
    INPUT_MISSING = "TH230"
    INPUT_EXTRA = "TH231"
    INPUT_UNKNOWN_TABLE = "TH232"
    PARAM_UNKNOWN = "TH233"
    PARAM_MISSING = "TH234"
    PARAM_TYPE = "TH235"
    PARAM_UNUSED = "TH236"  # an action declares a parameter its SQL never uses
    INPUT_UNUSED = "TH237"  # an action declares an input its SQL never names
    LAYER_VIOLATION = "TH240"
    FLOW_CYCLE = "TH241"
    TABLE_DUPLICATE = "TH242"
    PRIMARY_KEY_INVALID = "TH243"
    SHAPE_UNSUPPORTED = "TH244"
    FLOW_UNKNOWN = "TH250"
    FLOW_VERSION_UNKNOWN = "TH251"
    REGISTRY_UNAVAILABLE = "TH252"  # the registry database cannot be reached or used
    SELECTOR_INVALID = "TH253"  # a --select / --full-refresh selector is malformed or selects nothing

    # storage
    TABLE_UNKNOWN = "TH300"
    TABLE_EXISTS = "TH301"
    SCHEMA_INCOMPATIBLE = "TH302"
    STORAGE_CORRUPT = "TH303"
    STORAGE_IO = "TH304"
    STORAGE_LOCKED = "TH305"
    WRITE_INVALID = "TH306"
    TABLE_INVALID = "TH307"
    STORAGE_RANGE = "TH308"

    # spark bridge and materializer
    SPARK_START = "TH400"
    SPARK_TYPE_UNSUPPORTED = "TH401"
    QUERY_FAILED = "TH402"
    FLOW_RUNNING = "TH403"
    SOURCE_INVALID = "TH404"
    PLAN_CHANGED = "TH405"  # a table's SQL/schema changed since its data was built: needs --full-refresh

    # lake and tiering
    LAKE_CATALOG = "TH500"
    LAKE_COMMIT_CONFLICT = "TH501"
    TIERING_FAILED = "TH502"
    QUERY_INVALID = "TH510"

    INTERNAL = "TH900"

    @property
    def exit_code(self) -> int:
        return 1 if self in (ErrorCode.INTERNAL, ErrorCode.QUERY_FAILED, ErrorCode.TIERING_FAILED) else 2


@dataclass(frozen=True)
class Location:
    """Where something came from: a file, a 1-based line and column, and the YAML path inside it."""

    file: str | None = None
    line: int | None = None
    col: int | None = None
    path: str | None = None  # dotted YAML path, e.g. "layers.dwd.clicks.action"

    def prefix(self) -> str:
        parts = []
        if self.file:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
                if self.col is not None:
                    where += f":{self.col}"
            parts.append(where)
        if self.path:
            parts.append(self.path)
        return ": ".join(parts)

    def with_path(self, path: str | None) -> Location:
        return Location(self.file, self.line, self.col, path)


class TidehouseError(Exception):
    """Root of every error this project raises on purpose."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        location: Location | None = None,
        hint: str | None = None,
        params: dict[str, Any] | None = None,
    ) -> None:
        self.code = code
        self.message = message
        self.location = location
        self.hint = hint
        self.params = dict(params or {})
        super().__init__(self.render())

    @property
    def exit_code(self) -> int:
        return self.code.exit_code

    def render(self) -> str:
        prefix = self.location.prefix() if self.location else ""
        text = f"{prefix}: {self.message}" if prefix else self.message
        if self.hint:
            text += f" ({self.hint})"
        return f"{text} [{self.code.value}]"

    def to_dict(self) -> dict[str, Any]:
        loc = self.location
        return {
            "code": self.code.value,
            "message": self.message,
            "hint": self.hint,
            "file": loc.file if loc else None,
            "line": loc.line if loc else None,
            "col": loc.col if loc else None,
            "path": loc.path if loc else None,
        }


class TidehouseErrors(TidehouseError):
    """Several user errors reported together (a validator reports all it finds, not only the first)."""

    def __init__(self, errors: Sequence[TidehouseError]) -> None:
        if not errors:
            raise ValueError("TidehouseErrors needs at least one error")
        self.errors = list(errors)
        first = self.errors[0]
        super().__init__(first.code, first.message, location=first.location, hint=first.hint)

    @property
    def exit_code(self) -> int:
        return max(e.exit_code for e in self.errors)

    def render(self) -> str:  # one line per error
        return "\n".join(e.render() for e in getattr(self, "errors", []))

    @staticmethod
    def listed(exc: TidehouseError) -> list[TidehouseError]:
        """The errors ``exc`` reports: each of several, or itself alone."""
        return list(exc.errors) if isinstance(exc, TidehouseErrors) else [exc]

    @classmethod
    def raise_if_any(cls, errors: Iterable[TidehouseError]) -> None:
        errors = list(errors)
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise cls(errors)
