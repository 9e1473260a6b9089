"""The package's house rules, read from its syntax trees: no module over 400 lines, no function
over 60, and no reaching into another object's private attributes.

A module or function past its size has grown more than one concern and is split, not allowed
here. A private attribute (``obj._x``) is its owner's to change without notice: code that
reads another object's breaks when that owner changes, so each such reach is a bug waiting.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "clmagic"
MODULES = sorted(PACKAGE.rglob("*.py"))

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60

#: the one module that names pyopencl's internals (``Program._prg``, ``_cl._Program``, ...),
#: each with its reason there, so that no other module has to
PRIVATE_ALLOWED_MODULES = {"clmagic/opencl/pyopencl_program.py"}
#: documented public API whose name only starts with an underscore (to keep it apart from
#: names a user defines): receiver → attributes
DOCUMENTED_UNDERSCORE = {
    "sys": {"_getframe"},  # docs.python.org/3/library/sys.html#sys._getframe
    "os": {"_exit"},  # docs.python.org/3/library/os.html#os._exit
}
#: namedtuple's documented methods and attributes, on any receiver
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_field_defaults", "_make"}
#: known reaches, each kept on purpose (module → expressions, as reported), with its reason
KNOWN_REACHES = {
    # os.environ's own dict read with encoded keys: 2 µs for the watched variables against
    # 40 µs through os.environ.get (and os.environb.get), on every get_compiler() call;
    # the module falls back to os.environ.get where the attribute is absent
    "clmagic/process/session.py": {"getattr(os.environ, '_data', None)"},
}
#: the built-ins that reach an attribute by its name
_BY_NAME = {"getattr", "setattr", "hasattr", "delattr"}


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _made_by(function: ast.AST, own: set[str]) -> set[str]:
    """``own`` and the locals of ``function`` made by one of ``own`` (``store = cls(path)`` in
    a classmethod: the class's own new instance)."""
    made = set(own)
    for node in ast.walk(function):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name) and node.value.func.id in made):
            made |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return made


class _Reaches(ast.NodeVisitor):
    """Collects ``line: expression`` for each private attribute of an object that is not the
    module's own: the module's own are ``self`` and ``cls``, the classes it defines
    (``Secret._to_child`` beside ``class Secret``), and what those make in the function."""

    def __init__(self, classes: set[str]) -> None:
        self.own = [{"self", "cls"} | classes]
        self.found: list[str] = []

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.own.append(_made_by(node, self.own[-1]))
        self.generic_visit(node)
        self.own.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def _reach(self, node: ast.AST, receiver: ast.expr, attr: str) -> None:
        allowed = attr in NAMEDTUPLE_API or isinstance(receiver, ast.Name) and (
            receiver.id in self.own[-1] or attr in DOCUMENTED_UNDERSCORE.get(receiver.id, set()))
        if _is_private(attr) and not allowed:
            self.found.append(f"{getattr(node, 'lineno', 0)}: {ast.unparse(node)}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._reach(node, node.value, node.attr)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        """``getattr(obj, "_x")`` (and setattr, hasattr, delattr) is the same reach."""
        if (isinstance(node.func, ast.Name) and node.func.id in _BY_NAME and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            self._reach(node, node.args[0], node.args[1].value)
        self.generic_visit(node)


def _private_reaches(path: Path) -> list[str]:
    """``line: expression`` for each private attribute of another object in ``path``."""
    tree = _tree(path)
    reaches = _Reaches({n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)})
    reaches.visit(tree)
    return reaches.found


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_module_is_at_most_400_lines(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{_rel(path)} has {lines} lines: split it by concern"


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_functions_are_at_most_60_lines(path: Path) -> None:
    long = [f"{n.name} (line {n.lineno}): {n.end_lineno - n.lineno + 1} lines"
            for n in ast.walk(_tree(path))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno
            and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{_rel(path)}: " + "; ".join(long)


@pytest.mark.parametrize("path", [p for p in MODULES if _rel(p) not in PRIVATE_ALLOWED_MODULES],
                         ids=_rel)
def test_no_private_attribute_of_another_object(path: Path) -> None:
    known = KNOWN_REACHES.get(_rel(path), set())
    reaches = [r for r in _private_reaches(path) if r.split(": ", 1)[1] not in known]
    assert not reaches, (f"{_rel(path)} reaches into private attributes: " + "; ".join(reaches)
                         + " (give the owner a public name for what is needed)")


def test_the_checks_see_offenders(tmp_path: Path) -> None:
    """The checks above find what they forbid (a check that finds nothing can pass by
    accident): reaches into other objects, beside allowed ones, and a long function."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import sys\n"
        "class Own:\n"
        "    @classmethod\n"
        "    def make(cls, other):\n"
        "        mine = cls()\n"
        "        return self._a, mine._b, Own._c, sys._getframe(), other._d, other._replace()\n"
        "    def g(self, other):\n"
        "        return getattr(other, '_f'), getattr(self, '_g'), mine._h\n"
        "def h(parser):\n"
        "    mine = 1\n"
        "    return parser._option_string_actions, mine._e\n"
        "def long():\n" + "    x = 1\n" * MAX_FUNCTION_LINES, encoding="utf-8")
    assert _private_reaches(probe) == [
        "6: other._d", "8: getattr(other, '_f')", "8: mine._h",
        "11: parser._option_string_actions", "11: mine._e"]
    long = [n.name for n in ast.walk(_tree(probe)) if isinstance(n, ast.FunctionDef)
            and n.end_lineno and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == ["long"]
