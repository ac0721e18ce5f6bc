"""Generate the reference sections of docs/ from the code, so they cannot drift.

Each generated part of a page sits between ``<!-- BEGIN GENERATED: name -->`` and
``<!-- END GENERATED: name -->``; the prose around it is written by hand and kept as is. Sources:

* ``flows.md``          the flow spec models (``registry.specs.flow``: every field's type, default,
                        description)
* ``actions.md``        the action header models (``registry.specs.action``) and the shipped library
                        (``actions/``)
* ``cli.md``            the click command tree (``runtime.cli.cli``)
* ``configuration.md``  ``runtime.core.settings.SETTINGS``
* ``operations.md``     the metrics of the Prometheus endpoint (``materializer.metrics``)
* ``error-codes.md``    ``runtime.core.errors.ErrorCode`` (groups and comments read from its source)

Run ``python docs/gen.py`` to rewrite the pages; ``python docs/gen.py --check`` exits 1 if any is stale
(``tests/docs/test_generated.py`` does the same). ``python docs/gen.py --plan`` renders the shipped flows'
DAGs into architecture.md (needs Spark); ``tests/examples/test_flows.py`` checks that picture against
``tidehouse flow plan --format mermaid``.
"""

from __future__ import annotations

import inspect
import io
import re
import sys
import tokenize
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

_BLOCK = re.compile(
    r"(<!-- BEGIN GENERATED: (?P<name>[\w-]+) -->\n)(?:.*?\n)?(<!-- END GENERATED: (?P=name) -->)", re.S
)


# -- spec models -> field tables ------------------------------------------------------------------------

_VALIDATOR_WORDS = {  # BeforeValidator function -> how the value is written in YAML
    "identifier": "name",
    "column": "column",
    "duration": "duration",
    "strict_text": "string",
    "_action_ref": "action (`name` or `name@N`)",
    "_spark_type": "Spark type",
    "_ddl": "Spark DDL",
    "_output": "Spark DDL or list of columns",
    "_string_map": None,
    "_layers": None,
}


def type_name(annotation: Any, links: dict[type, str]) -> str:
    """A YAML-user's name for a pydantic field annotation."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        base, *meta = args
        for m in meta:
            func = getattr(m, "func", None)
            word = _VALIDATOR_WORDS.get(getattr(func, "__name__", ""), "")
            if word:
                return word
        return type_name(base, links)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        shown = " or ".join(type_name(a, links) for a in members)
        return shown + (" or null" if len(members) < len(args) else "")
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (tuple, list):
        return f"list of {type_name(args[0], links)}"
    if origin is dict:
        return f"mapping {type_name(args[0], links)} → {type_name(args[1], links)}"
    if annotation in links:
        return f"[{annotation.__name__}](#{links[annotation]})"
    return {
        str: "string",
        int: "integer",
        float: "number",
        bool: "boolean",
        Any: "any",
        typing.Any: "any",
    }.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(field) -> str:
    from pydantic_core import PydanticUndefined

    if field.is_required():
        return "**required**"
    value = field.default
    if field.default_factory is not None:
        value = field.default_factory()
    if value is PydanticUndefined or value in ((), {}, [], "", None):
        return "—"
    if hasattr(value, "model_dump"):
        dumped = value.model_dump(exclude_defaults=True)
        if not dumped:
            return "—"
        return "`{" + ", ".join(f"{k}: {_plain(v)}" for k, v in dumped.items()) + "}`"
    if isinstance(value, float):
        from runtime.core.durations import format_duration

        annotation = (
            typing.Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
        )
        return f"`{format_duration(value)}`" if _is_duration(annotation) else f"`{value:g}`"
    return f"`{value}`"


def _is_duration(annotation: Any) -> bool:
    if typing.get_origin(annotation) is typing.Annotated:
        return any(
            getattr(getattr(m, "func", None), "__name__", "") == "duration"
            for m in typing.get_args(annotation)[1:]
        )
    return any(_is_duration(a) for a in typing.get_args(annotation))


def _plain(value: Any) -> str:
    from runtime.core.durations import format_duration

    return format_duration(value) if isinstance(value, float) else str(value)


def model_table(model, links: dict[type, str]) -> str:
    rows = ["| key | type | default | description |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        key = field.alias or name
        desc = (field.description or "").replace("|", "\\|").replace("\n", " ")
        annotation = (
            typing.Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
        )
        rows.append(f"| `{key}` | {type_name(annotation, links)} | {_default(field)} | {desc} |")
    return "\n".join(rows)


def models_section(models: list[type]) -> str:
    links = {m: m.__name__.lower() for m in models}
    parts = []
    for model in models:
        doc = inspect.getdoc(model) or ""
        parts.append(
            f'### {model.__name__}\n<a id="{links[model]}"></a>\n\n{doc.splitlines()[0] if doc else ""}\n\n'
            f"{model_table(model, links)}"
        )
    return "\n\n".join(parts)


def flow_fields() -> str:
    from registry.specs.flow import DefaultsSpec, ExpectSpec, FlowSpec, SourceSpec, TableSpec, TieringSpec

    return models_section([FlowSpec, SourceSpec, TableSpec, TieringSpec, ExpectSpec, DefaultsSpec])


def action_fields() -> str:
    from registry.specs.action import ActionHeader, ParamSpec

    return models_section([ActionHeader, ParamSpec])


def action_test_fields() -> str:
    from registry.specs.actiontest import ActionTestSpec, CaseInputSpec, CaseSpec

    return models_section([ActionTestSpec, CaseSpec, CaseInputSpec])


def action_library() -> str:
    """One section per shipped action: description, inputs, parameters (from the headers)."""
    from registry.specs import parse_action

    parts = ["| action | inputs | what it does |", "|---|---|---|"]
    details = []
    for path in sorted((REPO / "actions").glob("*.sql")):
        spec = parse_action(path)
        first = " ".join(spec.description.split())
        parts.append(
            f"| [`{spec.name}`](#action-{spec.name.replace('_', '-')}) | "
            f"{', '.join(spec.inputs)} | {_first_sentence(first)} |"
        )
        body = [
            f'### {spec.name}\n<a id="action-{spec.name.replace("_", "-")}"></a>\n',
            f"{first}\n",
            f"*File:* `actions/{path.name}` · *inputs:* {', '.join(f'`{i}`' for i in spec.inputs)}",
        ]
        if spec.output:
            body.append(f" · *output:* `{spec.output}`")
        body.append("\n")
        if spec.params:
            body += ["\n| param | type | default | description |", "|---|---|---|---|"]
            for pname, p in spec.params.items():
                default = "**required**" if p.required else f"`{_yaml_inline(p.default)}`"
                body.append(f"| `{pname}` | `{p.type}` | {default} | {p.description} |")
        details.append("\n".join(body).rstrip())
    return "\n".join(parts) + "\n\n" + "\n\n".join(details)


def _first_sentence(text: str) -> str:
    return re.split(r"(?<=[a-z0-9)`])\.\s+(?=[A-Z`])", text)[0].rstrip(".") + "."


def _yaml_inline(value: Any) -> str:
    import json

    return json.dumps(value) if not isinstance(value, str) else value


# -- the CLI ----------------------------------------------------------------------------------------------


def cli_reference() -> str:
    import click

    from runtime.cli import cli

    out: list[str] = []

    def walk(cmd: click.Command, path: list[str], parent: click.Context | None) -> None:
        ctx = click.Context(cmd, info_name=path[-1], parent=parent)
        if path != ["tidehouse"]:
            out.append(f"### `{' '.join(path)}`\n")
        out.append("```\n" + " ".join(path + cmd.collect_usage_pieces(ctx)) + "\n```\n")
        help_text = inspect.cleandoc(cmd.help or "")
        if help_text:
            out.append(help_text.replace("\b\n", "") + "\n")
        rows = []
        for param in cmd.get_params(ctx):
            if isinstance(param, click.Option):
                if param.hidden or "--help" in param.opts:
                    continue
                names = ", ".join(f"`{o}`" for o in param.opts + param.secondary_opts)
                kind = "flag" if param.is_flag else _param_type(param)
                default = param.default if not callable(param.default) else None
                if type(default).__name__ == "Sentinel":  # click's UNSET
                    default = None
                shown = f"`{default}`" if default not in (None, False, (), "") else "—"
                rows.append(f"| {names} | {kind} | {shown} | {(param.help or '').replace('|', '/')} |")
            elif isinstance(param, click.Argument):
                default = param.default
                unset = type(default).__name__ == "Sentinel" or default in (None, (), "")
                shown = "required" if param.required else ("—" if unset else f"`{default}`")
                rows.append(
                    f"| `{param.human_readable_name.replace('|', '/')}` (argument) | {_param_type(param)} | "
                    f"{shown} | |"
                )
        if rows:
            out.append(
                "| option | type | default | description |\n|---|---|---|---|\n" + "\n".join(rows) + "\n"
            )
        if isinstance(cmd, click.Group):
            for name in sorted(cmd.commands):
                walk(cmd.commands[name], path + [name], ctx)

    walk(cli, ["tidehouse"], None)
    return "\n".join(out).rstrip()


def _param_type(param) -> str:
    import click

    t = param.type
    if isinstance(t, click.Choice):
        return " \\| ".join(f"`{c}`" for c in t.choices)
    name = getattr(t, "name", str(t)).lower()
    if param.nargs == -1 or getattr(param, "multiple", False):
        name += " …"
    return name


# -- configuration and error codes --------------------------------------------------------------------------


def settings_reference() -> str:
    from runtime.core.durations import format_duration
    from runtime.core.settings import DURATION_PARSES, SETTINGS

    rows = ["| setting | default | description |", "|---|---|---|"]
    for s in SETTINGS:
        default = s.default
        if default is None:
            shown = "—"
        elif s.parse in DURATION_PARSES:
            shown = f"`{format_duration(default)}`"
        elif isinstance(default, bool):
            shown = f"`{str(default).lower()}`"
        else:
            shown = f"`{default}`"
        secret = " *(secret: masked by `tidehouse info`)*" if s.secret else ""
        rows.append(f"| `{s.name}` | {shown} | {s.description}{secret} |")
    return "\n".join(rows)


MEANINGS = {  # a one-line meaning per code; an inline comment in runtime/core/errors.py takes precedence
    "CONFIG_INVALID": "tidehouse.yaml is not valid (unknown setting, wrong value), or `init` found a project",
    "CONFIG_MISSING_ENV": "a `${VAR}` in tidehouse.yaml names an unset environment variable",
    "HOME_LOCKED": "another process holds the home directory",
    "YAML_SYNTAX": "the file is not valid YAML",
    "YAML_DUPLICATE_KEY": "a mapping repeats a key (PyYAML would silently keep the last one)",
    "YAML_EMPTY": "the file is empty",
    "YAML_NOT_TEXT": "the file is not UTF-8 text",
    "YAML_TOO_LARGE": "the file is larger than the loader accepts",
    "YAML_TOO_DEEP": "the document nests too deeply",
    "SPEC_UNKNOWN_KEY": "a key the spec does not have (with a did-you-mean)",
    "SPEC_WRONG_TYPE": "a value of the wrong type (a number where a string is expected, ...)",
    "SPEC_MISSING_KEY": "a required key is missing",
    "SPEC_BAD_VALUE": "a value outside what the key accepts",
    "SPEC_BAD_DURATION": "not a duration like `500ms`, `5s`, `1m`",
    "SPEC_BAD_IDENTIFIER": "not a valid name (lower-case letters, digits, `_`; no leading `__`)",
    "ACTION_HEADER": "an action file without a valid `/*--- ... ---*/` header",
    "ACTION_UNKNOWN": "a flow names an action that is not registered",
    "ACTION_VERSION_UNKNOWN": "`name@N` names a version that does not exist",
    "ACTION_SQL_INVALID": (
        "Spark cannot parse or analyse the action's SQL (Spark's message, at the action file)"
    ),
    "INPUT_MISSING": "a table does not bind an input its action reads",
    "INPUT_EXTRA": "a table binds an input its action does not declare",
    "INPUT_UNKNOWN_TABLE": "an input is bound to a source or table that does not exist",
    "PARAM_UNKNOWN": "a parameter the action does not declare",
    "PARAM_MISSING": "a required parameter (no default) is not set",
    "PARAM_TYPE": "a parameter value does not fit the parameter's Spark type",
    "PARAM_UNUSED": "an action declares a parameter its SQL never uses (a new or edited action)",
    "INPUT_UNUSED": "an action declares an input its SQL never names (a new or edited action)",
    "LAYER_VIOLATION": "a table reads a later layer, or a non-ODS table reads a source",
    "FLOW_CYCLE": "tables read each other in a cycle (the cycle is printed `a --> b --> a`), or flows"
    " read each other's tables before any of them ran (neither can start)",
    "TABLE_DUPLICATE": "two tables (in this flow or another registered flow) have the same name",
    "PRIMARY_KEY_INVALID": "a primary key, bucket key or merge engine setting that does not fit the table",
    "SHAPE_UNSUPPORTED": (
        "the SQL cannot be kept equal to its batch result for this kind of table (says what to do)"
    ),
    "FLOW_UNKNOWN": "no registered flow has that name",
    "FLOW_VERSION_UNKNOWN": "the flow has no such version",
    "TABLE_UNKNOWN": "no hot table has that name",
    "TABLE_EXISTS": "the table exists already",
    "SCHEMA_INCOMPATIBLE": "a schema change that cannot be applied to an existing table (both schemas named)",
    "STORAGE_CORRUPT": "hot storage files fail their checksums",
    "STORAGE_IO": "reading or writing the hot storage failed",
    "STORAGE_LOCKED": "another process holds a hot table's lock",
    "WRITE_INVALID": "data written to a hot table does not fit it",
    "TABLE_INVALID": "a table definition the hot storage refuses",
    "STORAGE_RANGE": "a read below the earliest kept offset (segments already deleted after tiering)",
    "SPARK_START": "Spark could not start (Java missing, bad `spark.master`, ...)",
    "SPARK_TYPE_UNSUPPORTED": "a Spark type the hot storage cannot hold",
    "QUERY_FAILED": "a streaming query failed at run time (internal: exit 1)",
    "FLOW_RUNNING": "the flow is already running in another process",
    "SOURCE_INVALID": "a source cannot be read (path, format, options)",
    "LAKE_CATALOG": "the Iceberg catalog cannot be opened or used",
    "LAKE_COMMIT_CONFLICT": "a concurrent commit to the same Iceberg table",
    "TIERING_FAILED": "a tiering cycle failed (internal: exit 1; the next cycle retries)",
    "QUERY_INVALID": "`tidehouse query` SQL that is empty, does not parse, names unknown tables, ends "
    "without rows (nothing it changes lasts) or "
    "returns rows before its last statement",
    "INTERNAL": "a bug: please report it with the output of `--debug`",
}


def error_codes() -> str:
    """ErrorCode members grouped under the comments of its source, with their inline comments."""
    from runtime.core.errors import ErrorCode

    source = inspect.getsource(ErrorCode)
    groups: list[tuple[str, list[tuple[str, str]]]] = []
    comments: dict[str, str] = {}
    current = "general"
    line_of: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and tok.line.strip().startswith("#"):
            current = tok.string.lstrip("# ").strip()
        elif (
            tok.type == tokenize.NAME
            and tok.string.isupper()
            and tok.start[1] == 4
            and tok.start[0] not in line_of
        ):
            line_of[tok.start[0]] = tok.string
            if not groups or groups[-1][0] != current:
                groups.append((current, []))
            groups[-1][1].append((tok.string, ""))
        elif tok.type == tokenize.COMMENT and tok.start[0] in line_of:
            comments[line_of[tok.start[0]]] = tok.string.lstrip("# ").strip()
    out = []
    for title, members in groups:
        out.append(f"### {title[0].upper() + title[1:]}\n")
        out.append("| code | name | exit | note |\n|---|---|---|---|")
        for name, _ in members:
            code = ErrorCode[name]
            meaning = comments.get(name) or MEANINGS.get(name, "")
            out.append(f"| `{code.value}` | `{name}` | {code.exit_code} | {meaning} |")
        out.append("")
    return "\n".join(out).rstrip()


def metrics_reference() -> str:
    from materializer.metrics import metric_names

    rows = ["| metric | type | labels | what it measures |", "|---|---|---|---|"]
    for name, kind, labels, help_text in metric_names():
        rows.append(f"| `{name}` | {kind} | {labels} | {help_text.replace('|', '/')} |")
    return "\n".join(rows)


# -- pages --------------------------------------------------------------------------------------------------

GENERATORS: dict[str, dict[str, Callable[[], str]]] = {
    "flows.md": {"flow-fields": flow_fields},
    "actions.md": {
        "action-fields": action_fields,
        "action-test-fields": action_test_fields,
        "action-library": action_library,
    },
    "cli.md": {"cli": cli_reference},
    "configuration.md": {"settings": settings_reference},
    "operations.md": {"metrics": metrics_reference},
    "error-codes.md": {"error-codes": error_codes},
}


def render(page: str, text: str) -> str:
    """``text`` with every generated block of ``page`` replaced by fresh output."""
    blocks = GENERATORS[page]
    seen = set()

    def replace(match: re.Match) -> str:
        name = match.group("name")
        if name not in blocks:
            raise SystemExit(f"docs/{page}: unknown generated block {name!r}")
        seen.add(name)
        return match.group(1) + blocks[name]().rstrip("\n") + "\n" + match.group(3)

    result = _BLOCK.sub(replace, text)
    missing = set(blocks) - seen
    if missing:
        raise SystemExit(f"docs/{page}: missing generated block(s) {sorted(missing)}")
    return result


def stale_pages() -> dict[str, str]:
    """page -> fresh text, for every page whose generated blocks are out of date."""
    out = {}
    for page in GENERATORS:
        current = (DOCS / page).read_text(encoding="utf-8")
        fresh = render(page, current)
        if fresh != current:
            out[page] = fresh
    return out


# -- flow pictures (need Spark: `python docs/gen.py --plan`) -------------------------------------------------

PLAN_PAGE = "architecture.md"
_PLAN_BLOCK = re.compile(
    r"(<!-- BEGIN PLAN: (?P<name>\w+) -->\n)(?:.*?\n)?(<!-- END PLAN: (?P=name) -->)", re.S
)


def with_plans(text: str, mermaid: dict[str, str]) -> str:
    """``text`` with each ``BEGIN PLAN: flow`` block holding that flow's mermaid plan."""

    def replace(match: re.Match) -> str:
        name = match.group("name")
        if name not in mermaid:
            return match.group(0)
        return f"{match.group(1)}```mermaid\n{mermaid[name].strip()}\n```\n{match.group(3)}"

    return _PLAN_BLOCK.sub(replace, text)


def plan_mermaid(flows: list[str]) -> dict[str, str]:
    """``tidehouse flow plan flows/<name>.yaml --format mermaid`` for each flow (a scratch home)."""
    import tempfile

    from runtime.project import Project

    with tempfile.TemporaryDirectory() as home:
        project = Project.open(home=home, project_dir=REPO)
        try:
            return {name: project.plan(str(REPO / "flows" / f"{name}.yaml")).to_mermaid() for name in flows}
        finally:
            project.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--plan" in args:
        page = DOCS / PLAN_PAGE
        names = re.findall(r"<!-- BEGIN PLAN: (\w+) -->", page.read_text(encoding="utf-8"))
        page.write_text(with_plans(page.read_text(encoding="utf-8"), plan_mermaid(names)), encoding="utf-8")
        print(f"wrote the plans of {', '.join(names)} into docs/{PLAN_PAGE}")
    stale = stale_pages()
    if "--check" in args:
        for page in stale:
            print(f"docs/{page} is stale: run python docs/gen.py")
        return 1 if stale else 0
    for page, text in stale.items():
        (DOCS / page).write_text(text, encoding="utf-8")
        print(f"wrote docs/{page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
