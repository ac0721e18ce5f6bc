"""From files to specs, with every error located at its YAML node.

``parse_flow`` / ``parse_action`` read a file strictly (:mod:`runtime.core.yamlsource`), validate it with the
pydantic models, and turn every pydantic error into a :class:`~runtime.core.errors.TidehouseError` whose
location is the line and column of the offending node (the key itself for unknown keys) and whose YAML
path is the dotted path users see. All errors of a file are reported together.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from registry.specs.action import ActionHeader, ActionSpec
from registry.specs.base import did_you_mean
from registry.specs.filekinds import other_kind
from registry.specs.flow import FlowSpec
from registry.specs.sourceoptions import option_problems
from registry.specs.values import describe
from runtime.core.errors import ErrorCode, Location, TidehouseError, TidehouseErrors
from runtime.core.yamlsource import MAX_BYTES, Document, format_path, load_yaml, read_text

_CUSTOM_CODES = {
    "th_identifier": ErrorCode.SPEC_BAD_IDENTIFIER,
    "th_duration": ErrorCode.SPEC_BAD_DURATION,
    "th_value": ErrorCode.SPEC_BAD_VALUE,
    "th_type": ErrorCode.SPEC_WRONG_TYPE,
    "th_missing": ErrorCode.SPEC_MISSING_KEY,
    "th_primary_key": ErrorCode.PRIMARY_KEY_INVALID,
    "th_param_type": ErrorCode.PARAM_TYPE,
}
_TYPE_WORDS = {
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "list_type": "a list",
    "tuple_type": "a list",
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "float_type": "a number",
    "float_parsing": "a number",
}
_RESERVED_ACTION_KEYS = ("sql", "path", "sql_line")


# -- pydantic errors -> located errors -----------------------------------------------------------------


def _unwrap(annotation: Any) -> Any:
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin is Union or str(origin) == "types.UnionType":
            members = [a for a in get_args(annotation) if a is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The spec model that validates the node at ``loc`` (to list its keys for a 'did you mean')."""
    annotation: Any = model
    for part in loc:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            fields = {(f.alias or n): f for n, f in annotation.model_fields.items()}
            if part not in fields:
                return None
            annotation = fields[part].annotation
        elif get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]
        elif get_origin(annotation) is tuple:
            annotation = get_args(annotation)[0]
        else:
            return None
    annotation = _unwrap(annotation)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _keys_of(model: type[BaseModel]) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items() if not f.exclude]


def located_errors(exc: ValidationError, doc: Document, model: type[BaseModel]) -> list[TidehouseError]:
    """Turn pydantic's errors into located TidehouseErrors (one per problem, duplicates removed)."""
    out: list[TidehouseError] = []
    seen: set[tuple] = set()
    for err in exc.errors(include_url=False):
        kind, loc, ctx = err["type"], tuple(err["loc"]), err.get("ctx") or {}
        at_key = bool(loc) and loc[-1] == "[key]"
        loc = tuple(p for p in loc if p != "[key]") + tuple(ctx.get("at") or ())
        real = doc.resolve(loc)
        value = err.get("input")
        hint = None
        if kind == "missing" or (kind == "th_missing" and ctx.get("at")):
            code = ErrorCode.SPEC_MISSING_KEY
            name = loc[-1]
            shown = real if tuple(real) == tuple(loc) else real + (name,)
            message = err["msg"] if kind == "th_missing" else f"missing required key '{name}'"
            location = doc.location(real, shown=shown)
        elif kind == "extra_forbidden":
            code = ErrorCode.SPEC_UNKNOWN_KEY
            parent = _model_at(model, loc[:-1])
            message = f"unknown key '{loc[-1]}'"
            hint = did_you_mean(loc[-1], _keys_of(parent)) if parent else None
            if hint is None and parent is not None:
                hint = "known keys: " + ", ".join(_keys_of(parent))
            location = doc.location(real, key=True)
        elif kind == "literal_error":
            choices = re.findall(r"'([^']*)'", ctx.get("expected", ""))
            if at_key:
                code, message = ErrorCode.SPEC_UNKNOWN_KEY, f"unknown key '{value}'"
            else:
                code, message = ErrorCode.SPEC_BAD_VALUE, f"{value!r} is not one of {', '.join(choices)}"
            hint = did_you_mean(value, choices) or (f"one of {', '.join(choices)}" if at_key else None)
            location = doc.location(real, key=at_key)
        elif kind in _CUSTOM_CODES:
            code, message = _CUSTOM_CODES[kind], err["msg"]
            location = doc.location(real, key=at_key)
        elif kind in _TYPE_WORDS:
            code = ErrorCode.SPEC_WRONG_TYPE
            message = f"expected {_TYPE_WORDS[kind]}, got {describe(value)}"
            if kind == "string_type" and isinstance(value, (int, float, bool)):
                hint = "quote it"
            location = doc.location(real, key=at_key)
        else:
            code, message = ErrorCode.SPEC_BAD_VALUE, err["msg"]
            bounds = {
                "greater_than_equal": "at least {ge}",
                "less_than_equal": "at most {le}",
                "greater_than": "more than {gt}",
                "less_than": "less than {lt}",
            }
            if kind in bounds:
                message = f"must be {bounds[kind].format(**ctx)}, got {describe(value)}"
            location = doc.location(real, key=at_key)
        key = (code, location.path, location.line)
        if key in seen:
            continue
        seen.add(key)
        out.append(TidehouseError(code, message, location=location, hint=hint))
    # a misspelt key is reported once: as unknown (with its 'did you mean'), not also as the missing key
    misspelt = {
        (e.location.path.rsplit(".", 1)[0] if "." in (e.location.path or "") else "", e.hint.split("'")[1])
        for e in out
        if e.code is ErrorCode.SPEC_UNKNOWN_KEY and e.hint and e.hint.startswith("did you mean")
    }
    return [
        e
        for e in out
        if not (
            e.code is ErrorCode.SPEC_MISSING_KEY
            and e.location.path
            and tuple(e.location.path.rsplit(".", 1)) in misspelt
        )
    ]


def ambiguous_errors(doc: Document) -> list[TidehouseError]:
    """``no``/``yes``/``on``/``off``: YAML 1.1 booleans that YAML 1.2 reads as strings - refuse both
    readings."""
    return [
        TidehouseError(
            ErrorCode.SPEC_WRONG_TYPE,
            f"'{word}' is ambiguous (a YAML 1.1 boolean)",
            location=doc.location(path),
            hint=f"write {'true' if word.lower() in ('yes', 'on') else 'false'} for a boolean, "
            f"or quote it ('{word}') for a string",
        )
        for path, word in doc.ambiguous.items()
    ]


def _validate(
    model: type[BaseModel],
    doc: Document,
    extra: dict[str, Any] | None = None,
) -> tuple[Any, list[TidehouseError]]:
    errors = ambiguous_errors(doc)
    bad_paths = {e.location.path for e in errors}
    if not isinstance(doc.data, dict):
        errors.append(
            TidehouseError(
                ErrorCode.SPEC_WRONG_TYPE,
                f"expected a mapping at the top, got {describe(doc.data)}",
                location=doc.location(()),
            )
        )
        return None, errors
    try:
        spec = model.model_validate({**doc.data, **(extra or {})})
    except ValidationError as exc:
        spec = None
        errors += [e for e in located_errors(exc, doc, model) if e.location.path not in bad_paths]
    errors.sort(key=lambda e: (e.location.line or 0, e.location.col or 0))
    return spec, errors


# -- flows ----------------------------------------------------------------------------------------------


def load_flow_document(text: str, path: str = "<string>") -> Document:
    return load_yaml(text, path, max_bytes=MAX_BYTES)


def flow_from_document(doc: Document, *, stored: bool = False) -> FlowSpec:
    """Validate a loaded document as a flow; raises all errors found. The source options are checked
    (:mod:`registry.specs.sourceoptions`) except in a ``stored`` version: one registered before that check
    keeps its meaning."""
    data = doc.data
    if isinstance(data, dict) and "path" in data:
        raise TidehouseError(
            ErrorCode.SPEC_UNKNOWN_KEY, "unknown key 'path'", location=doc.location(("path",), key=True)
        )
    spec, errors = _validate(FlowSpec, doc, {"path": None if doc.file.startswith("<") else doc.file})
    if spec is not None and not stored:
        errors += [
            TidehouseError(
                code, message, location=doc.location(("sources", name, "options", key), key=True), hint=hint
            )
            for name, source in spec.sources.items()
            for key, code, message, hint in option_problems(source.format, source.options)
        ]
    TidehouseErrors.raise_if_any(errors)
    spec._document = doc
    return spec


def parse_flow_text(text: str, path: str = "<string>", *, stored: bool = False) -> FlowSpec:
    """Parse a flow from YAML text; ``path`` is only used in error locations (and, for text that is no flow,
    to name an action or test file given as one: :mod:`registry.specs.filekinds`). ``stored``: a registered
    version (see :func:`flow_from_document`)."""
    try:
        return flow_from_document(load_flow_document(text, path), stored=stored)
    except TidehouseError as exc:
        raise other_kind(path, "flow") or exc from None


def parse_flow(path: str | Path) -> FlowSpec:
    """Parse a flow file (at most 1 MiB)."""
    return parse_flow_text(read_text(path), str(path))


# -- actions --------------------------------------------------------------------------------------------


def split_action(text: str, path: str) -> tuple[str, int, str, int]:
    """``(header_yaml, header_first_line, sql, sql_line)`` of an action file; lines are 1-based."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and (not lines[i].strip() or lines[i].lstrip().startswith("--")):
        i += 1
    if i == len(lines):
        raise TidehouseError(ErrorCode.YAML_EMPTY, "the action file is empty", location=Location(path, 1))
    if lines[i].strip() != "/*---":
        raise TidehouseError(
            ErrorCode.ACTION_HEADER,
            "an action starts with a YAML header between '/*---' and '---*/' lines",
            location=Location(path, i + 1, 1),
            hint="see docs for the action format",
        )
    for j in range(i + 1, len(lines)):
        if lines[j].lstrip().startswith("---*/"):
            break
    else:
        raise TidehouseError(
            ErrorCode.ACTION_HEADER,
            "the header opened here is never closed with '---*/'",
            location=Location(path, i + 1, 1),
        )
    header = "\n".join(lines[i + 1 : j])
    rest = [lines[j].lstrip()[len("---*/") :]] + lines[j + 1 :]
    sql_line = j + 1
    while rest and not rest[0].strip():
        rest.pop(0)
        sql_line += 1
    sql = "\n".join(rest).strip(" \t\n")
    while sql.endswith(";"):
        sql = sql[:-1].rstrip()
    return header, i + 2, sql, sql_line


_MARKER = re.compile(r"(?<![\w:]):([A-Za-z_]\w*)")
_SKIP = re.compile(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.)*\"|`(?:[^`]|``)*`|--[^\n]*|/\*.*?\*/", re.DOTALL)


def parameter_markers(sql: str) -> list[tuple[str, int, int]]:
    """Named parameter markers (``:name``) in SQL, outside strings and comments: ``(name, line, col)``."""
    blanked = _SKIP.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), sql)
    out = []
    for m in _MARKER.finditer(blanked):
        line = blanked.count("\n", 0, m.start()) + 1
        col = m.start() - (blanked.rfind("\n", 0, m.start()) + 1) + 1
        out.append((m.group(1), line, col))
    return out


_TEXT = re.compile(r"'(?:[^'\\]|\\.|'')*'|--[^\n]*|/\*.*?\*/", re.DOTALL)  # string literals, comments
_WORD = re.compile(r"[A-Za-z_]\w*")


def sql_words(sql: str) -> set[str]:
    """The words of SQL outside string literals and comments, lower-cased (quoted identifiers count)."""
    return {w.lower() for w in _WORD.findall(_TEXT.sub(" ", sql))}


def parse_action_text(text: str, path: str = "<string>", *, stored: bool = False) -> ActionSpec:
    """Parse an action (``/*--- yaml ---*/`` + SQL); ``path`` is only used in error locations (and, for a
    file without the header, to name a flow or test file given as an action). A parameter the SQL never uses
    is an error (a flow's value for it would change nothing), and so is an input the SQL never names, except
    in a ``stored`` version: one registered before those checks keeps its meaning."""
    try:
        header, first_line, sql, sql_line = split_action(text, path)
    except TidehouseError as exc:
        raise other_kind(path, "action") or exc from None
    if not header.strip():
        raise TidehouseError(
            ErrorCode.ACTION_HEADER,
            "the header is empty: it needs at least 'name'",
            location=Location(path, first_line - 1, 1),
        )
    doc = load_yaml(header, path, line_offset=first_line - 1)
    errors: list[TidehouseError] = []
    if isinstance(doc.data, dict):
        for key in _RESERVED_ACTION_KEYS:
            if key in doc.data:
                errors.append(
                    TidehouseError(
                        ErrorCode.SPEC_UNKNOWN_KEY,
                        f"unknown key '{key}'",
                        location=doc.location((key,), key=True),
                        hint="the SQL goes after the '---*/' line",
                    )
                )
        data = {k: v for k, v in doc.data.items() if k not in _RESERVED_ACTION_KEYS}
        doc = Document(data, doc.file, doc.values, doc.keys, doc.ambiguous)
    header_spec, header_errors = _validate(ActionHeader, doc)
    errors += header_errors
    if not sql:
        errors.append(
            TidehouseError(
                ErrorCode.ACTION_HEADER, "no SQL after the header", location=Location(path, sql_line - 1, 1)
            )
        )
    elif header_spec is not None:
        markers = parameter_markers(sql)
        used = {name for name, _, _ in markers}
        for name in [] if stored else [n for n in header_spec.params if n not in used]:
            errors.append(
                TidehouseError(
                    ErrorCode.PARAM_UNUSED,
                    f"parameter '{name}' is declared but the SQL never uses :{name}",
                    location=doc.location(("params", name), key=True),
                    hint=f"use it in the SQL (:{name}, or IDENTIFIER(:{name}) for a name) or remove it: a "
                    "flow's value for it would change nothing",
                )
            )
        words = sql_words(sql)
        unread = [] if stored or "identifier" in words else header_spec.inputs  # IDENTIFIER(:p): any name
        for i, name in enumerate(unread):
            if name.lower() not in words:
                errors.append(
                    TidehouseError(
                        ErrorCode.INPUT_UNUSED,
                        f"input '{name}' is declared but the SQL never names it",
                        location=doc.location(("inputs", i)),
                        hint=f"read it in the SQL (FROM {name}) or remove it: a flow would have to bind it, "
                        "and its table would wait for a table it never reads",
                    )
                )
        for name, line, col in markers:
            if name not in header_spec.params:
                errors.append(
                    TidehouseError(
                        ErrorCode.PARAM_UNKNOWN,
                        f"the SQL uses :{name} but the header declares no parameter '{name}'",
                        location=Location(path, sql_line + line - 1, col, "params"),
                        hint=did_you_mean(name, header_spec.params)
                        or f"declare it under params: {name}: {{type: ...}}",
                    )
                )
    TidehouseErrors.raise_if_any(errors)
    return ActionSpec(
        **dict(header_spec), sql=sql, path=None if path.startswith("<") else path, sql_line=sql_line
    )


def parse_action(path: str | Path) -> ActionSpec:
    """Parse an action file (at most 1 MiB)."""
    return parse_action_text(read_text(path), str(path))


__all__ = [
    "format_path",
    "located_errors",
    "parameter_markers",
    "parse_action",
    "parse_action_text",
    "parse_flow",
    "parse_flow_text",
    "split_action",
]
