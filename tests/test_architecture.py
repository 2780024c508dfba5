"""The import rules and the size limits of docs/ARCHITECTURE.md, checked on the source (no imports run).

Layers, lowest first: ``advisor.core`` (the words: a leaf package that imports nothing else of the project) ←
``probes`` ← ``rules`` ← ``advisor.engine`` ← ``advisor.measure`` ← ``advisor.app`` ← ``tui``.
A module may import its own layer and those below; ``advisor.app`` reaches ``advisor.measure`` (torch)
and ``tui`` (textual) only inside functions, so the command line's fast path never loads them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("probes", "rules", "advisor", "tui")
#: layer → the layers it may import at module level
ALLOWED = {
    "advisor.core": ("advisor.core",),
    "probes": ("advisor.core", "probes"),
    "rules": ("advisor.core", "probes", "rules"),
    "advisor.engine": ("advisor.core", "probes", "rules", "advisor.engine"),
    "advisor.measure": ("advisor.core", "probes", "rules", "advisor.engine", "advisor.measure"),
    "advisor.app": ("advisor.core", "probes", "rules", "advisor.engine", "advisor.app"),
    # the training callback and context manager (issue 46): the store of runs, never the app (recommend never loads it)
    "advisor.integrations": (
        "advisor.core",
        "probes",
        "rules",
        "advisor.engine",
        "advisor.measure",
        "advisor.integrations",
    ),
    "advisor": ("advisor",),  # the package's lazy __init__ and __main__
    "tui": ("advisor.core", "probes", "rules", "advisor", "tui"),
}
#: what a layer may also import inside a function (lazily, off the fast path)
LAZY = {"advisor.app": ("advisor.measure", "tui")}
MAX_MODULE_LINES = 400
#: The one vocabulary module holds every dimension and its spec table; splitting it would split the vocabulary.
LONGER_MODULES = {"advisor/core/vocabulary.py": 600}
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str:
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if module == layer or module.startswith(layer + "."):
            return layer
    raise AssertionError(f"{module} is in no layer")


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(project module imported, inside a function) for every import of the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend((a.name, inner) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                found.append((child.module, inner))
                found.extend((f"{child.module}.{a.name}", inner) for a in child.names)
            visit(child, inner)

    visit(tree, False)
    return [(m, lazy) for m, lazy in found if m.split(".")[0] in PACKAGES]


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_layers(path: Path) -> None:
    module = _name(path)
    layer = _layer(module)
    for imported, lazy in _imports(path):
        if not _is_module(imported):
            continue  # a name imported from a module, checked as that module
        target = _layer(imported)
        allowed = ALLOWED[layer] + (LAZY.get(layer, ()) if lazy else ())
        assert any(target == a or target.startswith(a + ".") for a in allowed), (
            f"{module} ({layer}) imports {imported} ({target}){' inside a function' if lazy else ''}"
        )


def test_nothing_but_the_command_line_imports_the_wizard() -> None:
    for path in _modules():
        if _name(path).startswith("tui"):
            continue
        for imported, _lazy in _imports(path):
            if imported.startswith("tui"):
                assert _name(path) == "advisor.app.cli", f"{_name(path)} imports {imported}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_and_functions_stay_small(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    text = path.read_text(encoding="utf-8")
    limit = LONGER_MODULES.get(rel, MAX_MODULE_LINES)
    assert len(text.splitlines()) <= limit, f"{rel} has {len(text.splitlines())} lines (limit {limit})"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            assert lines <= MAX_FUNCTION_LINES, f"{rel}: {node.name} has {lines} lines"


def _spelled_values(tree: ast.AST, spelled: set[str]) -> list[tuple[int, str]]:
    """Plan values written as bare strings where code decides by them: compared (``== "zero-3"``,
    ``in ("ddp", "dp")``), passed as a plan setting (``optimizer="adamw"``), or as the keys of a table
    indexed by value (``{"adamw": 8, "sgd": 4}``). Column titles and other formats' keys are not values."""
    found: list[tuple[int, str]] = []

    def constants(node: ast.AST):
        return [
            n for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in spelled
        ]

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            found += [(c.lineno, c.value) for part in [node.left, *node.comparators] for c in constants(part)]
        elif isinstance(node, ast.keyword) and node.arg in ("precision", "optimizer", "parallelism", "offload"):
            found += [(c.lineno, c.value) for c in constants(node.value)]
        elif (
            isinstance(node, ast.Dict)
            and node.keys
            and all(isinstance(k, ast.Constant) and k.value in spelled for k in node.keys)
        ):
            found += [(k.lineno, k.value) for k in node.keys]
    return found


def test_each_vocabulary_value_is_spelled_in_one_module() -> None:
    """Outside the vocabulary, no module decides by a plan value written as a bare string."""
    from advisor.core.vocabulary import Device, Offload, Optimizer, Parallelism, Precision

    spelled = {v.value for enum in (Device, Offload, Optimizer, Parallelism, Precision) for v in enum}
    offenders = []
    for path in _modules():
        if _name(path) == "advisor.core.vocabulary":
            continue
        for line, value in _spelled_values(ast.parse(path.read_text(encoding="utf-8")), spelled):
            offenders.append(f"{path.relative_to(ROOT)}:{line}: {value!r}")
    assert not offenders, "\n".join(offenders)
