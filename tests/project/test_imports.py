"""The package's import graph has no cycles (lazy imports inside functions included), and the
flows use the core through a narrow surface."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _graph(package: str) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        graph[module] = {m for m in _imports(path) if m.split(".")[0] == package}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep) :] + [dep]
            if dep in graph and dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_core_package_has_no_import_cycle():
    assert _cycle(_graph("hetriever")) is None


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_ingest_flow_calls_the_one_ingest_and_few_names_of_the_index_stage():
    """The flow is a thin caller of hetriever/index/ingest.py: no indexing internals."""
    tree = ast.parse((ROOT / "flows" / "ingest.py").read_text(encoding="utf-8"))
    names = [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and node.module is not None
        and (node.module == "hetriever.index" or node.module.startswith("hetriever.index."))
        for alias in node.names
    ]
    assert {module for module, _ in names} <= {"hetriever.index", "hetriever.index.ingest"}, names
    assert 1 <= len(names) <= 3, names
