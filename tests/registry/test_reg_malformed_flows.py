"""A table of malformed flows: each must fail with its error code, at its line, with its YAML path.

The expected line is the one marked ``#<`` in the case's text (or given explicitly when the text has no
lines, e.g. binary input). Every case also checks that the file name is in the location and that no
error escapes as anything but a TidehouseError.
"""

from __future__ import annotations

import pytest

from registry.service import Registry
from runtime.core.errors import ErrorCode as E
from runtime.core.errors import TidehouseError
from tests.registry._reg_helpers import BASE_FLOW, OTHER_FLOW, dedent, errors_of, marked_line, write_actions

HEAD = """flow: shop
sources:
  clicks: {format: json, path: data/clicks, schema: "user_id string, price double, event_type string"}
"""


def flow(layers: str, head: str = HEAD) -> str:
    """A flow with the standard head and the given ``layers:`` body (already indented by 2)."""
    return head + "layers:\n" + dedent(layers).replace("\n", "\n  ").rstrip(" ").join(["  ", ""])


ODS = "ods:\n  clicks: {action: ingest, inputs: {raw: clicks}}\n"

CASES = [
    # -- YAML itself ----------------------------------------------------------------------------------
    ("yaml-unclosed-flow-seq", "flow: shop\nlayers: [\n", E.YAML_SYNTAX, None, 3),
    ("yaml-bad-indent", "flow: shop\nlayers:\n  ods:\n    a: 1\n   b: 2 #<\n", E.YAML_SYNTAX, None, None),
    ("yaml-tab-indent", "flow: shop\nlayers:\n\tods: {} #<\n", E.YAML_SYNTAX, None, None),
    ("yaml-two-documents", "flow: a\n--- #<\nflow: b\n", E.YAML_SYNTAX, None, None),
    (
        "yaml-unknown-tag",
        "flow: !!python/object:os.system shop #<\nlayers: {}\n",
        E.YAML_SYNTAX,
        "flow",
        None,
    ),
    ("duplicate-top-key", HEAD + "flow: again #<\nlayers: {}\n", E.YAML_DUPLICATE_KEY, "flow", None),
    (
        "duplicate-table",
        flow(ODS + "dwd:\n  clean: {action: clean}\n  clean: {action: clean} #<\n"),
        E.YAML_DUPLICATE_KEY,
        "layers.dwd.clean",
        None,
    ),
    ("empty-file", "", E.YAML_EMPTY, None, 1),
    ("only-comments", "# nothing here\n\n", E.YAML_EMPTY, None, 1),
    ("null-document", "~\n", E.YAML_EMPTY, None, 1),
    ("binary-nul", b"flow: shop\n\x00\x01\x02garbage", E.YAML_NOT_TEXT, None, 2),
    ("binary-not-utf8", b"flow: shop\ndescription: \xff\xfe\xfa\n", E.YAML_NOT_TEXT, None, 2),
    (
        "ten-megabytes",
        b"flow: shop\n" + b"# padding padding padding\n" * 400_000,
        E.YAML_TOO_LARGE,
        None,
        None,
    ),
    ("deeply-nested", "flow: shop #<\nlayers: " + "[" * 200 + "]" * 200 + "\n", E.YAML_TOO_DEEP, None, 2),
    (
        "alias-bomb",
        (
            "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
            "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
            "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
        ),
        E.YAML_TOO_LARGE,
        None,
        None,
    ),
    # -- shape: keys and types ------------------------------------------------------------------------
    ("top-level-list", "- flow: shop #<\n", E.SPEC_WRONG_TYPE, None, None),
    ("unknown-top-key", HEAD + "trigerr: 1s #<\nlayers:\n  " + ODS, E.SPEC_UNKNOWN_KEY, "trigerr", None),
    (
        "unknown-table-key",
        flow(ODS + "dwd:\n  clean: {action: clean, inputs: {events: ods.clicks}, buckts: 2} #<\n"),
        E.SPEC_UNKNOWN_KEY,
        "layers.dwd.clean.buckts",
        None,
    ),
    (
        "unknown-source-key",
        "flow: shop\nsources:\n  clicks: {format: rate, paht: x} #<\nlayers:\n  " + ODS,
        E.SPEC_UNKNOWN_KEY,
        "sources.clicks.paht",
        None,
    ),
    (
        "unknown-layer",
        flow(ODS + "dwx: #<\n  clean: {action: clean}\n"),
        E.SPEC_UNKNOWN_KEY,
        "layers.dwx",
        None,
    ),
    ("missing-flow-key", "layers: #<\n  " + ODS, E.SPEC_MISSING_KEY, "flow", 1),
    (
        "missing-action",
        flow(ODS + "dwd:\n  clean: {inputs: {events: ods.clicks}} #<\n"),
        E.SPEC_MISSING_KEY,
        "layers.dwd.clean.action",
        None,
    ),
    ("no-tables", HEAD + "layers: {} #<\n", E.SPEC_BAD_VALUE, "layers", None),
    (
        "json-source-without-schema",
        "flow: shop\nsources:\n  clicks: {format: json, path: x} #<\nlayers:\n  " + ODS,
        E.SPEC_MISSING_KEY,
        "sources.clicks.schema",
        None,
    ),
    (
        "buckets-string",
        flow(ODS + "dwd:\n  clean: {action: clean, inputs: {events: ods.clicks}, buckets: '4'} #<\n"),
        E.SPEC_WRONG_TYPE,
        "layers.dwd.clean.buckets",
        None,
    ),
    (
        "buckets-float",
        flow(ODS + "dwd:\n  clean:\n    action: clean\n    buckets: 2.5 #<\n"),
        E.SPEC_WRONG_TYPE,
        "layers.dwd.clean.buckets",
        None,
    ),
    (
        "buckets-zero",
        flow(ODS + "dwd:\n  clean:\n    action: clean\n    buckets: 0 #<\n"),
        E.SPEC_BAD_VALUE,
        "layers.dwd.clean.buckets",
        None,
    ),
    (
        "primary-key-not-list",
        flow(ODS + "dwd:\n  clean:\n    action: clean\n    primary_key: user_id #<\n"),
        E.SPEC_WRONG_TYPE,
        "layers.dwd.clean.primary_key",
        None,
    ),
    (
        "description-number",
        HEAD + "description: 5 #<\nlayers:\n  " + ODS,
        E.SPEC_WRONG_TYPE,
        "description",
        None,
    ),
    (
        "yaml11-boolean-no",
        HEAD + "description: no #<\nlayers:\n  " + ODS,
        E.SPEC_WRONG_TYPE,
        "description",
        None,
    ),
    (
        "yaml11-boolean-on-option",
        "flow: shop\nsources:\n  clicks:\n    format: rate\n    options: {x: on} #<\nlayers:\n  " + ODS,
        E.SPEC_WRONG_TYPE,
        "sources.clicks.options.x",
        None,
    ),
    ("layers-is-list", HEAD + "layers: [ods] #<\n", E.SPEC_WRONG_TYPE, "layers", None),
    (
        "merge-engine-unknown",
        flow(
            ODS + "dwd:\n  clean:\n    action: clean\n    primary_key: [id]\n    merge_engine: last_rwo #<\n"
        ),
        E.SPEC_BAD_VALUE,
        "layers.dwd.clean.merge_engine",
        None,
    ),
    (
        "aggregations-without-aggregate",
        flow(
            ODS + "dwd:\n  clean:\n    action: clean\n    primary_key: [id]\n    aggregations: {n: sum} #<\n"
        ),
        E.SPEC_BAD_VALUE,
        "layers.dwd.clean.aggregations",
        None,
    ),
    (
        "expect-bad-violation",
        flow(
            ODS + "dwd:\n  clean:\n    action: clean\n    expect:\n"
            "      - {name: pos, condition: price > 0, on_violation: warn} #<\n"
        ),
        E.SPEC_BAD_VALUE,
        "layers.dwd.clean.expect[0].on_violation",
        None,
    ),
    (
        "source-schema-bad-type",
        "flow: shop\nsources:\n  clicks: {format: json, path: x, schema: 'id strng'} #<\nlayers:\n  " + ODS,
        E.SPEC_BAD_VALUE,
        "sources.clicks.schema",
        None,
    ),
    (
        "source-schema-not-without-null",
        "flow: shop\nsources:\n  clicks: {format: json, path: x, "
        "schema: 'id string NOT, b int'} #<\nlayers:\n  " + ODS,
        E.SPEC_BAD_VALUE,
        "sources.clicks.schema",
        None,
    ),
    # -- durations and names --------------------------------------------------------------------------
    (
        "duration-unit",
        HEAD + "trigger: 5 parsecs #<\nlayers:\n  " + ODS,
        E.SPEC_BAD_DURATION,
        "trigger",
        None,
    ),
    ("duration-negative", HEAD + "trigger: -1s #<\nlayers:\n  " + ODS, E.SPEC_BAD_DURATION, "trigger", None),
    ("duration-nan", HEAD + "trigger: .nan #<\nlayers:\n  " + ODS, E.SPEC_BAD_DURATION, "trigger", None),
    (
        "duration-zero-tiering",
        HEAD + "tiering: {interval: 0s} #<\nlayers:\n  " + ODS,
        E.SPEC_BAD_DURATION,
        "tiering.interval",
        None,
    ),
    (
        "duration-table-trigger",
        flow(ODS + "dwd:\n  clean:\n    action: clean\n    trigger: 1 minute #<\n"),
        E.SPEC_BAD_DURATION,
        "layers.dwd.clean.trigger",
        None,
    ),
    ("flow-name-upper", "flow: Shop #<\nlayers:\n  " + ODS, E.SPEC_BAD_IDENTIFIER, "flow", None),
    (
        "table-name-dash",
        flow(ODS + "dwd:\n  clean-up: {action: clean} #<\n"),
        E.SPEC_BAD_IDENTIFIER,
        "layers.dwd.clean-up",
        None,
    ),
    (
        "source-name-digit",
        "flow: shop\nsources:\n  1clicks: {format: rate} #<\nlayers:\n  " + ODS,
        E.SPEC_BAD_IDENTIFIER,
        "sources.1clicks",
        None,
    ),
    (
        "system-column-in-key",
        flow(ODS + "dwd:\n  clean:\n    action: clean\n    primary_key: [__offset] #<\n"),
        E.SPEC_BAD_IDENTIFIER,
        "layers.dwd.clean.primary_key[0]",
        None,
    ),
    (
        "action-ref-malformed",
        flow(ODS + "dwd:\n  clean: {action: 'clean@v2'} #<\n"),
        E.SPEC_BAD_IDENTIFIER,
        "layers.dwd.clean.action",
        None,
    ),
    # -- against the registry -------------------------------------------------------------------------
    (
        "unknown-action",
        flow(ODS + "dwd:\n  clean: {action: clen, inputs: {events: ods.clicks}} #<\n"),
        E.ACTION_UNKNOWN,
        "layers.dwd.clean.action",
        None,
    ),
    (
        "unknown-version",
        flow(ODS + "dwd:\n  clean: {action: clean@9, inputs: {events: ods.clicks}} #<\n"),
        E.ACTION_VERSION_UNKNOWN,
        "layers.dwd.clean.action",
        None,
    ),
    (
        "missing-input",
        flow(ODS + "dwd:\n  clean: {action: clean, inputs: {}} #<\n"),
        E.INPUT_MISSING,
        "layers.dwd.clean.inputs.events",
        None,
    ),
    (
        "missing-inputs-key",
        flow(ODS + "dwd:\n  clean: {action: join2} #<\n"),
        E.INPUT_MISSING,
        "layers.dwd.clean.inputs.left",
        None,
    ),
    (
        "extra-input",
        flow(
            ODS + "dwd:\n  clean:\n    action: clean\n    inputs:\n      events: ods.clicks\n"
            "      evnts2: ods.clicks #<\n"
        ),
        E.INPUT_EXTRA,
        "layers.dwd.clean.inputs.evnts2",
        None,
    ),
    (
        "unknown-table",
        flow(ODS + "dwd:\n  clean: {action: clean, inputs: {events: ods.clikcs}} #<\n"),
        E.INPUT_UNKNOWN_TABLE,
        "layers.dwd.clean.inputs.events",
        None,
    ),
    (
        "unknown-source",
        flow("ods:\n  clicks: {action: ingest, inputs: {raw: clikcs}} #<\n"),
        E.INPUT_UNKNOWN_TABLE,
        "layers.ods.clicks.inputs.raw",
        None,
    ),
    (
        "ods-reads-table",
        flow(ODS + "  again: {action: ingest, inputs: {raw: ods.clicks}} #<\n"),
        E.LAYER_VIOLATION,
        "layers.ods.again.inputs.raw",
        None,
    ),
    (
        "dwd-reads-source",
        flow(ODS + "dwd:\n  clean: {action: clean, inputs: {events: clicks}} #<\n"),
        E.LAYER_VIOLATION,
        "layers.dwd.clean.inputs.events",
        None,
    ),
    (
        "reads-later-layer",
        flow(
            ODS + "dwd:\n  clean: {action: clean, inputs: {events: dws.counts}} #<\n"
            "dws:\n  counts: {action: count_by_key, inputs: {events: ods.clicks},"
            " params: {key: user_id}}\n"
        ),
        E.LAYER_VIOLATION,
        "layers.dwd.clean.inputs.events",
        None,
    ),
    (
        "cycle-two-tables",
        flow(
            ODS + "dwd:\n  a: {action: clean, inputs: {events: dwd.b}}\n"
            "  b: {action: clean, inputs: {events: dwd.a}} #<\n"
        ),
        E.FLOW_CYCLE,
        "layers.dwd.b.inputs.events",
        None,
    ),
    (
        "cycle-self",
        flow(ODS + "dwd:\n  a: {action: clean, inputs: {events: dwd.a}} #<\n"),
        E.FLOW_CYCLE,
        "layers.dwd.a.inputs.events",
        None,
    ),
    (
        "table-of-other-flow",
        flow(ODS + "dwd:\n  shared: {action: clean, inputs: {events: ods.clicks}} #<\n"),
        E.TABLE_DUPLICATE,
        "layers.dwd.shared",
        None,
    ),
    (
        "unknown-param",
        flow(
            ODS + "dwd:\n  clean: {action: clean, inputs: {events: ods.clicks}, "
            "params: {min_prize: 1.0}} #<\n"
        ),
        E.PARAM_UNKNOWN,
        "layers.dwd.clean.params.min_prize",
        None,
    ),
    (
        "missing-param",
        flow(ODS + "dws:\n  counts: {action: count_by_key, inputs: {events: ods.clicks}} #<\n"),
        E.PARAM_MISSING,
        "layers.dws.counts.params.key",
        None,
    ),
    (
        "param-wrong-type",
        flow(
            ODS + "dwd:\n  clean:\n    action: clean\n    inputs: {events: ods.clicks}\n"
            "    params:\n      min_price: cheap #<\n"
        ),
        E.PARAM_TYPE,
        "layers.dwd.clean.params.min_price",
        None,
    ),
    (
        "param-array-element",
        flow(
            ODS + "dwd:\n  clean:\n    action: clean\n    inputs: {events: ods.clicks}\n"
            "    params:\n      valid_types:\n        - click\n        - 5 #<\n"
        ),
        E.PARAM_TYPE,
        "layers.dwd.clean.params.valid_types[1]",
        None,
    ),
    (
        "param-null",
        flow(
            ODS + "dws:\n  counts:\n    action: count_by_key\n    inputs: {events: ods.clicks}\n"
            "    params:\n      key: #<\n"
        ),
        E.PARAM_TYPE,
        "layers.dws.counts.params.key",
        None,
    ),
    (
        "param-int-overflow",
        flow(
            ODS + "dwd:\n  t:\n    action: typed\n    inputs: {a: ods.clicks}\n"
            "    params: {n: 99999999999} #<\n"
        ),
        E.PARAM_TYPE,
        "layers.dwd.t.params.n",
        None,
    ),
    (
        "param-bad-date",
        flow(
            ODS + "dwd:\n  t:\n    action: typed\n    inputs: {a: ods.clicks}\n"
            "    params: {day: '2024-13-01'} #<\n"
        ),
        E.PARAM_TYPE,
        "layers.dwd.t.params.day",
        None,
    ),
    (
        "param-map-value",
        flow(
            ODS + "dwd:\n  t:\n    action: typed\n    inputs: {a: ods.clicks}\n"
            "    params:\n      weights: {a: 1.5, b: heavy} #<\n"
        ),
        E.PARAM_TYPE,
        "layers.dwd.t.params.weights.b",
        None,
    ),
    (
        "param-bool-as-string",
        flow(
            ODS + "dwd:\n  t:\n    action: typed\n    inputs: {a: ods.clicks}\n"
            "    params: {flag: 'true'} #<\n"
        ),
        E.PARAM_TYPE,
        "layers.dwd.t.params.flag",
        None,
    ),
    (
        "pk-not-in-output",
        flow(
            ODS + "dws:\n  counts:\n    action: count_by_key\n    inputs: {events: ods.clicks}\n"
            "    params: {key: user_id}\n    primary_key: [usr_id] #<\n"
        ),
        E.PRIMARY_KEY_INVALID,
        "layers.dws.counts.primary_key[0]",
        None,
    ),
    (
        "merge-engine-without-pk",
        flow(ODS + "dwd:\n  clean:\n    action: clean\n    merge_engine: first_row #<\n"),
        E.PRIMARY_KEY_INVALID,
        "layers.dwd.clean.merge_engine",
        None,
    ),
    (
        "bucket-key-outside-pk",
        flow(ODS + "dwd:\n  clean:\n    action: clean\n    primary_key: [a, b]\n    bucket_key: [c] #<\n"),
        E.PRIMARY_KEY_INVALID,
        "layers.dwd.clean.bucket_key[0]",
        None,
    ),
]


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    root = tmp_path_factory.mktemp("reg")
    reg = Registry.open(f"sqlite:///{root / 'registry.db'}")
    reg.register_actions([write_actions(root / "actions")])
    other = root / "other.yaml"
    other.write_text(OTHER_FLOW)
    reg.register_flow(other)
    yield reg
    reg.close()


def test_base_flow_is_valid(registry, tmp_path):
    path = tmp_path / "shop.yaml"
    path.write_text(BASE_FLOW)
    spec = registry.validate_flow(path)
    assert [q for q, _ in spec.tables()] == ["ods.clicks", "dwd.clean", "dws.counts"]


def test_the_table_is_big_enough():
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case_id,content,code,yaml_path,line", CASES, ids=[c[0] for c in CASES])
def test_malformed_flow(registry, tmp_path, case_id, content, code, yaml_path, line):
    path = tmp_path / f"{case_id}.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
        line = line or marked_line(content)
    with pytest.raises(TidehouseError) as info:
        registry.validate_flow(path)
    errors = errors_of(info.value)
    found = [
        (e.code, e.location.path if e.location else None, e.location.line if e.location else None)
        for e in errors
    ]
    assert all(e.location and e.location.file == str(path) for e in errors), found
    matching = [e for e in errors if e.code is code and e.location.path == yaml_path]
    assert matching, f"expected {code.name} at {yaml_path!r}, got {found}"
    if line is not None:
        assert matching[0].location.line == line, f"expected line {line}, got {found}"
    assert all(e.exit_code == 2 for e in errors)
    assert f"[{code.value}]" in info.value.render()
