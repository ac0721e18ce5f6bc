"""The layer order (docs/architecture.md): no module imports from a layer above its own.

core (errors, settings, config, durations, places, strict YAML, Spark type grammar)
  → storage | registry                (siblings: neither imports the other)
  → lake                              (Iceberg: tiering, union reads)
  → spark                             (the Spark bridge: its data source reads the lake for union reads)
  → materializer
  → façade (runtime.project)
  → scaffold                          (init's templates, the demo: they drive the façade)
  → cli

Every ``import`` is checked, also the ones inside functions (a function-local import is still an arrow).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("runtime", "registry", "materializer")

# (rank, name, module prefixes); a module belongs to the longest matching prefix
LAYERS = (
    (0, "core", ("runtime", "runtime.core")),
    (1, "storage", ("runtime.storage",)),
    (1, "registry", ("registry",)),
    (2, "lake", ("runtime.lake",)),
    (3, "spark", ("runtime.spark",)),
    (4, "materializer", ("materializer",)),
    (5, "façade", ("runtime.project",)),
    (6, "scaffold", ("runtime.scaffold",)),
    (7, "cli", ("runtime.cli",)),
)


def layer_of(module: str) -> tuple[int, str]:
    best = None
    for rank, name, prefixes in LAYERS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[2]
            ):
                best = (rank, name, len(prefix))
    assert best is not None, f"{module} belongs to no layer: add it to LAYERS and docs/architecture.md"
    return best[0], best[1]


def module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, imported module) of every import statement in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out.append((node.lineno, base))
            out += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]  # `from pkg import mod`
    return out


def upward_imports(root: Path = REPO) -> list[str]:
    problems = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            module = module_name(path, root)
            rank, name = layer_of(module)
            for line, target in imports(path, module):
                if target.split(".")[0] not in PACKAGES or not _is_module(target, root):
                    continue
                t_rank, t_name = layer_of(target)
                if t_rank > rank or (t_rank == rank and t_name != name):
                    problems.append(f"{path.relative_to(root)}:{line}: {name} imports {target} ({t_name})")
    return problems


def _is_module(target: str, root: Path) -> bool:
    """Whether ``target`` names a module or package of the project (not a class or function in one)."""
    path = root.joinpath(*target.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_no_module_imports_from_a_layer_above_its_own():
    assert upward_imports() == []


def test_the_layer_check_fails_on_an_upward_import(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "runtime" / "core").mkdir()
    (tmp_path / "runtime" / "core" / "__init__.py").write_text("")
    (tmp_path / "runtime" / "storage").mkdir()
    (tmp_path / "runtime" / "storage" / "__init__.py").write_text("")
    (tmp_path / "materializer" / "runner.py").write_text("x = 1\n")
    (tmp_path / "registry" / "ok.py").write_text("from runtime.core import errors\n")
    (tmp_path / "runtime" / "core" / "bad.py").write_text("def f():\n    from materializer import runner\n")
    (tmp_path / "registry" / "sibling.py").write_text("import runtime.storage\n")
    problems = sorted(upward_imports(tmp_path))
    assert problems == [
        "registry/sibling.py:1: registry imports runtime.storage (storage)",
        "runtime/core/bad.py:2: core imports materializer (materializer)",
        "runtime/core/bad.py:2: core imports materializer.runner (materializer)",
    ]


FACADE_USERS = ("runtime.cli", "runtime.scaffold")
FACADE_ALLOWED = ("runtime.core", "runtime.project", "runtime.cli", "runtime.scaffold", "runtime")


def test_the_cli_and_the_demo_call_only_the_facade():
    """Above the façade, nothing reaches around it: the CLI and the scaffold (init, demo) import the façade,
    the core and each other — not the registry, the materializer, the lake, the store or the Spark bridge."""
    problems = []
    for package in FACADE_USERS:
        for path in sorted(REPO.joinpath(*package.split(".")).rglob("*.py")):
            for line, target in imports(path, module_name(path)):
                if (
                    target.split(".")[0] in PACKAGES
                    and _is_module(target, REPO)
                    and not any(
                        target == allowed or target.startswith(allowed + ".")
                        for allowed in FACADE_ALLOWED[:-1]
                    )
                ):
                    problems.append(f"{path.relative_to(REPO)}:{line}: imports {target}")
    assert problems == []


@pytest.mark.parametrize(
    "module, layer",
    [
        ("runtime.core.errors", "core"),
        ("runtime", "core"),
        ("runtime.lake.union", "lake"),
        ("runtime.project", "façade"),
    ],
)
def test_every_module_has_a_layer(module, layer):
    assert layer_of(module)[1] == layer
