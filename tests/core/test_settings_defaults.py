"""Settings defaults are written once, in runtime/core/settings.py; a lower layer whose parameter mirrors a
setting reads the default from there (``default("storage.segment_bytes")``) instead of writing it again."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from runtime.core.settings import SETTINGS, default
from runtime.lake.catalog import Lake
from runtime.lake.maintenance import compact
from runtime.spark.options import Place, cached_store
from runtime.spark.session import get_spark
from runtime.spark.writer import foreach_batch_writer
from runtime.storage import open_store
from runtime.storage.local import LocalTableStore
from runtime.storage.log import BucketLog
from runtime.storage.objectstore.store import ObjectTableStore

REPO = Path(__file__).resolve().parents[2]

MIRRORS = [  # (function, parameter, setting)
    (open_store, "fsync", "storage.fsync"),
    (open_store, "segment_bytes", "storage.segment_bytes"),
    (LocalTableStore, "fsync", "storage.fsync"),
    (LocalTableStore, "segment_bytes", "storage.segment_bytes"),
    (BucketLog, "fsync", "storage.fsync"),
    (BucketLog, "segment_bytes", "storage.segment_bytes"),
    (ObjectTableStore, "fsync", "storage.fsync"),
    (Lake, "max_snapshots", "tiering.max_snapshots"),
    (Lake, "compact_min_files", "tiering.compact_min_files"),
    (Lake, "retention_s", "storage.retention"),
    (Lake, "compact_target_bytes", "tiering.compact_target_bytes"),
    (compact, "target_bytes", "tiering.compact_target_bytes"),
    (get_spark, "master", "spark.master"),
    (foreach_batch_writer, "fsync", "storage.fsync"),
    (cached_store, "fsync", "storage.fsync"),
]


@pytest.mark.parametrize(
    "function, parameter, setting", MIRRORS, ids=[f"{f.__name__}.{p}" for f, p, _ in MIRRORS]
)
def test_parameters_that_mirror_a_setting_default_to_it(function, parameter, setting):
    assert inspect.signature(function).parameters[parameter].default == default(setting)


def test_a_place_without_a_setting_fsyncs_as_the_setting_says():
    assert Place("/tmp/x").fsync == default("storage.fsync")


def _distinctive(value) -> bool:
    """Defaults worth looking for elsewhere: big numbers and strings that are not plain words."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float)):
        return abs(value) >= 1000
    return isinstance(value, str) and not value.isidentifier()


def _constant(node: ast.expr):
    """The value of a constant expression (``64 * 1024 * 1024``, ``64 << 20``, ``24 * 3600.0``), else None."""
    if not all(
        isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop))
        for n in ast.walk(node)
    ):
        return None
    return eval(compile(ast.Expression(node), "<default>", "eval"))


def test_no_function_writes_a_settings_default_again():
    wanted = {s.default: s.name for s in SETTINGS if _distinctive(s.default)}
    found = []
    for package in ("runtime", "registry", "materializer"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path == REPO / "runtime" / "core" / "settings.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for default_node in node.args.defaults + [
                        d for d in node.args.kw_defaults if d is not None
                    ]:
                        value = _constant(default_node)
                        if _distinctive(value) and value in wanted:
                            found.append(
                                f"{path.relative_to(REPO)}:{default_node.lineno}: {value!r} is the default "
                                f"of {wanted[value]}"
                            )
    assert found == []
