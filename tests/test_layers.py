"""The package's import graph: no cycles inside ``clmagic/`` and nothing imports the package root.

Every import counts, at module level or inside a function (a lazy import is a dependency too);
only imports under ``if TYPE_CHECKING:`` (for the type checker, never run) are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "clmagic"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for child in node.body for n in ast.walk(child))
    return skip


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The clmagic modules ``name`` imports (``clmagic`` itself when it imports the root)."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_nodes(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "clmagic")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] != "clmagic":
                continue
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
            if subs and len(subs) == len(node.names):
                found.update(subs)  # ``from . import devices``: the submodules, not the root
            else:
                found.add(base)
    return {m for m in found if m in modules and m != name}


def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def _cycle(g: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(g.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(g):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_cycles_inside_clmagic():
    cycle = _cycle(graph())
    assert cycle is None, " → ".join(cycle or [])


def test_nothing_imports_the_package_root():
    offenders = sorted(m for m, deps in graph().items()
                       if "clmagic" in deps and m not in ("clmagic", "clmagic.__main__"))
    assert offenders == []


@pytest.mark.parametrize("deps, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"a2"}, "a2": set(), "x": {"y"}, "y": {"x"}}, ["x", "y", "x"]),
])
def test_the_cycle_finder_finds_cycles(deps, expected):
    assert _cycle(deps) == expected


def test_the_walker_sees_lazy_imports_and_skips_type_checking(tmp_path):
    g = graph()
    assert "clmagic.show.frames" in g["clmagic.ipython.clcache"]  # imported inside a function
    assert "clmagic.trip.compiler" not in g["clmagic.show.line"]  # under TYPE_CHECKING only
