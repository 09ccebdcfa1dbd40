"""The house's shape, read from the imports (docs/explanation/architecture.md): few top-level
modules, no import circle, and an engine that imports no pass."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "scalify"
PASSES = ("scalify.canon", "scalify.forms", "scalify.externs", "scalify.report")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Each module of scalify/ and the scalify modules it imports (absolute imports: the
    package writes no relative ones)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    found: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.level == 0, f"{path}: a relative import"
                for alias in node.names:
                    dotted = f"{node.module}.{alias.name}"
                    targets.add(dotted if dotted in modules else node.module)
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
        found[name] = {t for t in targets if t in modules and t != name}
    return found


def test_scalify_has_at_most_twelve_top_level_modules() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 12, top


def test_the_engine_imports_no_pass() -> None:
    for module, targets in _imports().items():
        if module.startswith("scalify.engine"):
            passes = sorted(t for t in targets if t.startswith(PASSES))
            assert not passes, f"{module} imports {passes}"


def test_no_import_circle_at_module_level() -> None:
    """Imports at the top of a module only: a function's own import, made when it runs,
    is how a lower layer may call up without a circle."""
    graph = {m: set() for m in _imports()}
    for name in graph:
        path = PACKAGE.parent / (name.replace(".", "/") + ".py")
        if not path.exists():
            path = PACKAGE.parent / name.replace(".", "/") / "__init__.py"
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    dotted = f"{node.module}.{alias.name}"
                    target = dotted if dotted in graph else node.module
                    if target in graph and target != name and not _is_parent(target, name):
                        graph[name].add(target)
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                raise AssertionError(" -> ".join([*path, module, target]))
            if target not in state:
                visit(target, [*path, module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


def _is_parent(package: str, module: str) -> bool:
    return module.startswith(package + ".")
