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


# -- docs/architecture.md names every module, and no line count ----------------------------------

ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def _sections(doc: str) -> dict[str, str]:
    """The module tree of ``doc`` (its block that starts ``clmagic/``): each section's text by
    its key (``root``, ``ipython/``, ..., ``ground``), from the lines indented by two spaces."""
    block = doc.split("```\nclmagic/", 1)[1].split("```", 1)[0]
    sections: dict[str, str] = {}
    key = ""
    for line in block.splitlines()[1:]:
        if line.startswith("  ") and not line.startswith("   "):
            key, line = line.split(None, 1)[0].rstrip(":"), line.split(None, 1)[1]
            line = line.split(":", 1)[1] if key == "ground" else line  # "ground floor:"
        sections[key] = sections.get(key, "") + " " + line.strip()
    return sections


def _named(text: str) -> dict[str, str]:
    """``name (what it does)`` at the top level of ``text``: name → what it does (a folder's
    name keeps its ``/``)."""
    import re

    named: dict[str, str] = {}
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            if depth == 0:
                found = re.search(r"([\w]+/?)\s*$", text[:i])
                name, start = (found.group(1) if found else ""), i + 1
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                named[name] = text[start:i]
    return named


def _modules_by_section() -> dict[str, set[str]]:
    """What each section must name: the modules of its folder (a subfolder as ``sub/``),
    ``root`` and ``ground`` the modules beside the folders."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_layers import GROUND

    wanted: dict[str, set[str]] = {"root": set(), "ground": set()}
    for path in MODULES:
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if len(parts) == 1:
            wanted["ground" if parts[0] in GROUND else "root"].add(parts[0])
        elif parts[-1] != "__init__" or len(parts) > 2:
            name = parts[1] + "/" if len(parts) > 2 else parts[1]
            wanted.setdefault(parts[0] + "/", set()).add(name)
    return wanted


def test_architecture_names_every_module_and_no_other():
    """docs/architecture.md's tree stays true: each module is named in its folder's section
    (a subfolder's in that folder's description), and each name there is a module that
    exists (a module moved or removed is taken out of the tree)."""
    sections = {k: _named(v) for k, v in _sections(ARCHITECTURE.read_text()).items()}
    for section, modules in _modules_by_section().items():
        named = sections.get(section, {})
        assert set(named) == modules, (
            f"docs/architecture.md, {section}: not named {sorted(modules - set(named))}, "
            f"named but not in clmagic/ {sorted(set(named) - modules)}")
    for path in MODULES:
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if len(parts) == 3 and parts[2] != "__init__":
            within = sections[parts[0] + "/"][parts[1] + "/"]
            assert parts[2] in within.replace(",", " ").replace(";", " ").split(), (
                f"docs/architecture.md does not name {_rel(path)} under {parts[1]}/")


def test_architecture_keeps_no_line_counts():
    """Line counts written by hand go stale with the next edit (13 of 75 were): the sizes are
    this file's to check, the tree says what each module is for."""
    import re

    for section, text in _sections(ARCHITECTURE.read_text()).items():
        for name, what in _named(text).items():
            assert not re.search(r"(?<![\w-])\d{2,}\b", what), (
                f"docs/architecture.md, {section} {name}: a line count? {what!r}")


def test_the_architecture_reader_sees_names_and_counts():
    """The reader above finds each top-level ``name (…)``, nested parentheses kept inside, and
    the count check sees a count (a reader that finds nothing would pass every doc)."""
    named = _named("a (x (y) z), b/ (c, the check; d), e\n (161: it)")
    assert named == {"a": "x (y) z", "b/": "c, the check; d", "e": "161: it"}
    doc = "```\nclmagic/  (…)\n  root:  a (x)\n         b (y)\n  ground floor: c (z)\n```\n"
    assert {k: _named(v) for k, v in _sections(doc).items()} == {
        "root": {"a": "x", "b": "y"}, "ground": {"c": "z"}}
