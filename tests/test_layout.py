"""The tree keeps the architecture docs/architecture.md describes: arrows run one way (no import
cycle; adapters import only the model, the upstream interface, translate and the low-level
modules; bridge/ never imports adapters; only bridge/search/ imports its inner modules), and no
module of bridge/ or adapters/ is over 600 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("bridge", "adapters")
MAX_LINES = 600
# what a module of adapters/ may import from bridge/
ADAPTERS_MAY_IMPORT = (
    "bridge.model",
    "bridge.upstream",
    "bridge.translate",
    "bridge.net",
    "bridge.processes",
    "bridge.documents",
    "bridge.masking",
    "bridge.text",
)


def modules() -> dict[str, Path]:
    """Every module of the installed packages, by dotted name."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ours that `name` imports, at any depth of its code (a function-level import
    is an arrow too). `from a.b import c` counts as `a.b.c` when that is a module, else `a.b`."""
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in known else base)
    return {target for target in out if target.split(".")[0] in PACKAGES and target != name}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_no_module_is_over_600_lines() -> None:
    long = {
        name: n
        for name, path in modules().items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_adapters_import_only_the_model_the_interface_translate_and_low_level_modules(
    graph,
) -> None:
    wrong = {
        (name, target)
        for name, targets in graph.items()
        if name.startswith("adapters")
        for target in targets
        if target.startswith("bridge")
        and not any(target == ok or target.startswith(ok + ".") for ok in ADAPTERS_MAY_IMPORT)
    }
    assert not wrong, sorted(wrong)


def test_telemetry_imports_only_the_model(graph) -> None:
    wrong = {
        (name, target)
        for name, targets in graph.items()
        if name.startswith("bridge.telemetry")
        for target in targets
        if not target.startswith(("bridge.telemetry", "bridge.model"))
    }
    assert not wrong, sorted(wrong)


def test_bridge_never_imports_adapters(graph) -> None:
    wrong = {
        (name, target)
        for name, targets in graph.items()
        if name.startswith("bridge")
        for target in targets
        if target.startswith("adapters")
    }
    assert not wrong, sorted(wrong)


def test_only_the_search_package_imports_its_inner_modules(graph) -> None:
    wrong = {
        (name, target)
        for name, targets in graph.items()
        if not name.startswith("bridge.search")
        for target in targets
        if target.startswith("bridge.search.")
    }
    assert not wrong, sorted(wrong)


def test_no_import_cycle(graph) -> None:
    # a package's __init__ importing its own modules is how a face works, not a cycle
    edges = {
        name: {t for t in targets if t in graph and not name.startswith(t + ".")}
        for name, targets in graph.items()
    }
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(edges[node]):
            if state.get(target) == 1:
                cycles.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert not cycles, cycles
