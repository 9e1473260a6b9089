"""The package's floor plan: imports only go down the layers, never round in a cycle, nothing
imports the package root, and only the modules that draw import the drawing libraries.

Every import counts: at module level, inside a function (a lazy import is a dependency too) and
under ``if TYPE_CHECKING:`` (a type named from a layer above is an upward dependency all the
same: the two modules cannot be understood, moved or tested apart).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "clmagic"

#: the layers, top to bottom: a module may import a module of a layer below its own, or one of
#: its own folder (``show.frames`` → ``show.line``; acyclic, see below), nothing else. A layer of
#: two folders (``ipython``, ``cli``) lets neither import the other.
LAYERS: list[tuple[str, ...]] = [
    ("root",),  # clmagic/__init__.py, __main__.py: the public API, the ``python -m`` entry
    ("ipython", "cli"),  # the interfaces: the magics, the command line
    ("show",),  # every rendering, and the views registered with IPython
    ("cache",),  # looking after a cache: manage, bundles, warm, their report types
    ("process",),  # the process's compiler, the pyopencl hook
    ("trip",),  # the build trip: compiler, state, records, results, ...
    ("key",),  # what decides "same program"
    ("opencl",),  # the driver
    ("store",),  # where entries persist
    ("ground",),  # the modules below, imported by any layer
]
#: the modules beside ``__init__`` on the top floor: the ``python -m`` entry, and thin public
#: fronts that re-export a layer's API under a name of their own (``clmagic.kernel_tuner``)
ROOT_MODULES = ("__main__", "kernel_tuner")
#: the ground floor: single modules beside the folders, each importing only others of these
GROUND = ("entry", "entry_file", "config", "errors", "outcome", "_format", "_warn", "_memo",
          "_version", "_secret", "_fork", "_launch", "_valid")

#: the layers that hold data, devices, stores and the cache's own work: they draw nothing
DATA_LAYERS = ("cache", "process", "trip", "key", "opencl", "store", "ground")
#: the drawing libraries, and the only modules that import them (each with its reason)
DRAWING = {
    "pandas": {
        "clmagic.show.frames",  # the cache and history DataFrames
        "clmagic.show.sweep",  # the sweep's and the kernel facts' DataFrames
        "clmagic.show.check",  # a checked launch's findings
    },
    "ipywidgets": {"clmagic.show.widget"},  # the cache panel
    "matplotlib": {
        "clmagic.show.plot",  # plot_history
        "clmagic.show.widget",  # the panel's plot tab
        "clmagic.show.sweep",  # plot_sweep
    },
    "tqdm": {"clmagic.cli.commands",  # ``clmagic warm``'s progress bar on a terminal
             "clmagic.show.sweep",  # a sweep's progress bar (tqdm.auto: a widget in a notebook)
             "clmagic.show.progress"},  # an import's proofs (tqdm.auto too)
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))
            if "labextension" not in p.parts}


def _imported_names(path: Path, package: str) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in ``path``, anywhere in it; relative imports made
    absolute against ``package``."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.append((base, [a.name for a in node.names]))
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The clmagic modules ``name`` imports (``clmagic`` itself when it imports the root)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for base, names in _imported_names(path, package):
        if base.split(".")[0] != "clmagic":
            continue
        subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
        if subs and len(subs) == len(names):
            found.update(subs)  # ``from clmagic.show import line``: the submodule, not the package
        else:
            found.add(base)
    return {m for m in found if m in modules and m != name}


def libraries_of(path: Path) -> set[str]:
    """The top-level names of everything outside clmagic that ``path`` imports."""
    return {base.split(".")[0] for base, _ in _imported_names(path, "clmagic")
            if base and base.split(".")[0] != "clmagic"}


def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def folder_of(module: str) -> str:
    """The folder (layer unit) of a module: ``clmagic.store.sqlite.file`` → ``store``,
    ``clmagic.errors`` → ``ground``, ``clmagic`` and ``clmagic.__main__`` → ``root``."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ROOT_MODULES:
        return "root"
    if len(parts) == 2 and parts[1] in GROUND:
        return "ground"
    return parts[1]  # a folder, or a single module not on the ground floor (no layer)


def rank_of(folder: str) -> int:
    """The layer's place, 0 at the top; a folder no layer names has none (``KeyError``)."""
    for rank, folders in enumerate(LAYERS):
        if folder in folders:
            return rank
    raise KeyError(folder)


def upward(g: dict[str, set[str]]) -> list[str]:
    """Every import that does not go down a layer nor stay in its own folder."""
    bad = []
    for a, deps in sorted(g.items()):
        for b in sorted(deps):
            fa, fb = folder_of(a), folder_of(b)
            if fa != fb and rank_of(fb) <= rank_of(fa):
                bad.append(f"{a} ({fa}) → {b} ({fb})")
    return bad


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


def test_every_module_is_in_a_layer():
    """A new folder or a new module beside the folders is placed in the plan on purpose."""
    unplaced = []
    for m in graph():
        try:
            rank_of(folder_of(m))
        except KeyError:
            unplaced.append(m)
    assert unplaced == [], "add it to LAYERS or GROUND: " + ", ".join(unplaced)


def test_imports_only_go_down_the_layers():
    assert upward(graph()) == []


def test_no_import_cycles_inside_clmagic():
    cycle = _cycle(graph())
    assert cycle is None, " → ".join(cycle or [])


def test_nothing_imports_the_package_root():
    offenders = sorted(m for m, deps in graph().items() if "clmagic" in deps)
    assert offenders == []


def test_data_device_store_and_cache_modules_import_no_renderer():
    """No layer below show/ imports show/ or a drawing library, anywhere in a module (a data
    type gets its view registered from show/, see clmagic/show/views.py)."""
    modules = _modules()
    g = graph()
    found = []
    for m, path in sorted(modules.items()):
        if folder_of(m) not in DATA_LAYERS:
            continue
        found += [f"{m} → {d}" for d in sorted(g[m]) if folder_of(d) == "show"]
        found += [f"{m} → {lib}" for lib in sorted(libraries_of(path) & set(DRAWING))]
    assert found == []


def test_only_the_modules_that_draw_import_the_drawing_libraries():
    """Exactly the modules named in DRAWING (a stale allowance fails too)."""
    modules = _modules()
    users = {lib: {m for m, path in modules.items() if lib in libraries_of(path)}
             for lib in DRAWING}
    assert users == DRAWING


@pytest.mark.parametrize("deps, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"a2"}, "a2": set(), "x": {"y"}, "y": {"x"}}, ["x", "y", "x"]),
])
def test_the_cycle_finder_finds_cycles(deps, expected):
    assert _cycle(deps) == expected


@pytest.mark.parametrize("a, b, allowed", [
    ("clmagic.show.frames", "clmagic.trip.records", True),  # down
    ("clmagic.show.frames", "clmagic.show.line", True),  # sideways in one folder
    ("clmagic.store.sqlite.store", "clmagic.store.base", True),  # a subfolder is its folder's
    ("clmagic", "clmagic.ipython.magics", True),  # the root sits on top
    ("clmagic.errors", "clmagic._format", True),  # inside the ground floor
    ("clmagic.trip.results", "clmagic.show.line", False),  # up
    ("clmagic.ipython.magics", "clmagic.cli.main", False),  # across one layer's two folders
    ("clmagic.store.base", "clmagic.opencl.devices", False),
    ("clmagic.errors", "clmagic.show.line", False),
    ("clmagic.cli.main", "clmagic", False),  # the root is above everything
])
def test_the_layer_check_tells_down_from_up(a, b, allowed):
    assert (upward({a: {b}, b: set()}) == []) == allowed


def test_the_walker_sees_lazy_and_type_checking_imports():
    g = graph()
    assert "clmagic.show.frames" in g["clmagic.ipython.clcache"]  # imported inside a function
    assert "clmagic.trip.results" in g["clmagic.show.line"]  # under TYPE_CHECKING only
    assert "clmagic.show.views" in g["clmagic.show"]  # a package's own imports
    assert "pandas" in libraries_of(PACKAGE / "show" / "frames.py")  # inside functions
