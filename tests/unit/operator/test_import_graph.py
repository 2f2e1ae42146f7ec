"""The operator's import graph, read from the source (every ``import``, at any depth: function-level
imports count, as they are how a cycle hides from import-linter), has no cycle; ``handlers/``
stays thin wiring; and no module keeps a cache keyed on ``id()``."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3] / "operator" / "accel_operator"
PACKAGE = "accel_operator"


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _resolve(name: str, modules: dict[str, pathlib.Path]) -> str | None:
    """``name`` (a dotted import target) as the most specific module of the package it names."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(path: pathlib.Path, module: str, modules: dict[str, pathlib.Path]) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for t in targets:
            if t == PACKAGE or t.startswith(PACKAGE + "."):
                resolved = _resolve(t, modules)
                if resolved is not None and resolved != module:
                    found.add(resolved)
    return found


def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: imports_of(p, m, modules) for m, p in modules.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import(tmp_path: pathlib.Path) -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    # The parser sees an import inside a function.
    src = tmp_path / "accel_operator" / "x.py"
    src.parent.mkdir()
    src.write_text("def f():\n    from accel_operator import y\n    return y\n")
    (tmp_path / "accel_operator" / "y.py").write_text("")
    mods = {"accel_operator.x": src, "accel_operator.y": tmp_path / "accel_operator" / "y.py"}
    assert imports_of(src, "accel_operator.x", mods) == {"accel_operator.y"}


def test_accel_operator_has_no_import_cycle_counting_function_level_imports() -> None:
    found = cycles(graph())
    assert found == [], f"import cycles in {PACKAGE}: {found}"


# handlers/ is kopf registration only: the engine lives in accel_operator.engine.
HANDLERS_LINE_BUDGET = 700


def test_handlers_stay_thin_wiring() -> None:
    lines = sum(len(p.read_text().splitlines()) for p in (ROOT / "handlers").rglob("*.py"))
    assert lines < HANDLERS_LINE_BUDGET, f"handlers/ holds {lines} lines (budget {HANDLERS_LINE_BUDGET})"


_ID_KEYED = re.compile(r"(?<![\w.])id\(")


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_cache_keyed_on_object_identity(path: pathlib.Path) -> None:
    """A memo keyed on ``id()`` outlives its object and answers for the next one at that address."""
    hits = [i + 1 for i, line in enumerate(path.read_text().splitlines()) if _ID_KEYED.search(line)]
    assert hits == [], f"{path.relative_to(ROOT)}: id()-keyed lookup on line(s) {hits}"
