"""One launcher (issue 34, class 1): every child process clmagic starts goes through
:func:`clmagic._launch.launch`, isolated from the user's folders and environment.

The scan fails on any other way of starting a process found in clmagic's source (a new
``subprocess.run``, ``os.system``, ``multiprocessing`` pool...); the other tests start real
children through the launcher and ask them what they got: their scheduling policy, their
environment, where they imported clmagic from.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import child_env

from clmagic import _launch

PACKAGE = Path(__file__).resolve().parent.parent / "clmagic"
LAUNCHER = "clmagic/_launch.py"
#: modules allowed to start a process some other way, each with its reason (none today: the
#: after-fork hooks of _fork.py register callbacks, they start nothing)
ALLOWED: dict[str, str] = {}

#: module → the names in it that start a process (called, or for the pools, imported)
STARTERS = {
    "subprocess": {"Popen", "run", "call", "check_call", "check_output", "getoutput",
                   "getstatusoutput"},
    "os": {"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "spawnl",
           "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe",
           "execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp", "execvpe"},
    "pty": {"fork", "spawn"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "concurrent.futures": {"ProcessPoolExecutor"},
}
#: modules whose mere import means processes (their pools and start methods)
STARTER_MODULES = {"multiprocessing", "concurrent.futures.process"}


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


def process_starts(source: str) -> list[str]:
    """``line: what`` for each way of starting a process in ``source``: a call of one of
    :data:`STARTERS` (through its module, an alias, or a name imported from it), an import of
    one of :data:`STARTER_MODULES` or of a starter name."""
    tree = ast.parse(source)
    alias: dict[str, str] = {}  # local name → module or "module.name"
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(
                    ".")[0]
                if any(a.name == m or a.name.startswith(m + ".") for m in STARTER_MODULES):
                    found.append(f"{node.lineno}: import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                alias[a.asname or a.name] = f"{node.module}.{a.name}"
                if (any(node.module == m or node.module.startswith(m + ".")
                        for m in STARTER_MODULES)
                        or a.name in STARTERS.get(node.module, set())):
                    found.append(f"{node.lineno}: from {node.module} import {a.name}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func, alias)
        module, _, attr = name.rpartition(".")
        if attr in STARTERS.get(module, set()):
            found.append(f"{node.lineno}: {name}(...)")
    return found


def _dotted(node: ast.expr, alias: dict[str, str]) -> str:
    """``a.b.c`` of a call's function, its first name read through the module's imports."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(alias.get(node.id, node.id))
    return ".".join(reversed(parts))


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=_rel)
def test_no_child_process_is_started_but_by_the_launcher(path: Path) -> None:
    if _rel(path) == LAUNCHER or _rel(path) in ALLOWED:
        return
    starts = process_starts(path.read_text(encoding="utf-8"))
    assert not starts, (f"{_rel(path)} starts a process outside clmagic._launch: "
                        + "; ".join(starts) + " (use clmagic._launch.launch)")


def test_the_scan_sees_every_way_of_starting_one() -> None:
    """The scan finds what it forbids (a scan that finds nothing passes by accident), and
    not what only names the module (its constants, its exceptions)."""
    probe = '''
import subprocess, os, pty
import subprocess as sp
import multiprocessing
from multiprocessing import get_context
from concurrent.futures import ProcessPoolExecutor
from subprocess import Popen
from os import posix_spawn
subprocess.run(["x"]); sp.check_output(["x"]); Popen(["x"]); os.system("x")
os.execv("x", []); os.spawnlp(0, "x"); os.fork(); pty.fork(); posix_spawn("x", [], {})
subprocess.PIPE; subprocess.TimeoutExpired; os.getpid()
'''
    found = {line.split(": ", 1)[1] for line in process_starts(probe)}
    assert found == {
        "import multiprocessing", "from multiprocessing import get_context",
        "from concurrent.futures import ProcessPoolExecutor", "from subprocess import Popen",
        "from os import posix_spawn", "subprocess.run(...)", "subprocess.check_output(...)",
        "subprocess.Popen(...)", "os.system(...)", "os.execv(...)", "os.spawnlp(...)",
        "os.fork(...)", "pty.fork(...)", "os.posix_spawn(...)"}


PROBE = '''
import json, os, sys
if __name__ == "__main__":
    import clmagic
    print(json.dumps({
        "policy": os.sched_getscheduler(0) if hasattr(os, "sched_getscheduler") else None,
        "nice": os.nice(0), "clmagic": clmagic.__file__, "probe": __file__,
        "path": sys.path, "isolated": sys.flags.isolated, "argv": sys.argv[1:],
        "env": {k: os.environ.get(k) for k in ("POCL_DEVICES", "OCL_ICD_VENDORS",
                                               "CLMAGIC_CACHE_DIR", "PYTHONPATH")}}))
'''


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module ``clmagic_launch_probe`` that this process imports from a folder of its own
    (as a checkout on ``PYTHONPATH`` would be), pinned for children like clmagic: a child
    started by the launcher runs it and prints what it got, as JSON."""
    folder = tmp_path / "pinned"
    folder.mkdir()
    (folder / "clmagic_launch_probe.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(folder))
    import clmagic_launch_probe  # noqa: F401 - imported here, so pinned for the child

    monkeypatch.setattr(_launch, "NEEDED", (*_launch.NEEDED, "clmagic_launch_probe"))
    yield folder / "clmagic_launch_probe.py"
    sys.modules.pop("clmagic_launch_probe", None)


def _ask(args: list[str] | None = None, **kwargs: object) -> dict[str, object]:
    proc = _launch.launch("clmagic_launch_probe", args or [], stdout=subprocess.PIPE, **kwargs)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0
    return json.loads(out)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="no SCHED_IDLE on this platform")
@pytest.mark.parametrize("idle", [True, False])
def test_an_idle_child_runs_under_sched_idle(idle: bool, probe: Path) -> None:
    """``idle=True``: the child's own code already runs under SCHED_IDLE; otherwise under
    this process's policy."""
    out = _ask(idle=idle)
    assert out["policy"] == (os.SCHED_IDLE if idle else os.sched_getscheduler(0))


def test_a_child_runs_the_parents_modules_with_the_environment_but_python_s_own(
        probe: Path, tmp_path: Path) -> None:
    """The child imports clmagic (and the probe) from where this process did, gets the
    OpenCL and clmagic variables, and nothing from ``PYTHONPATH`` or its working folder;
    its arguments are its own (one that looks like an option included)."""
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    env = child_env(POCL_DEVICES="cpu", OCL_ICD_VENDORS="/nowhere",
                    CLMAGIC_CACHE_DIR=str(tmp_path / "c"),
                    PYTHONPATH=f"{hostile}:{os.environ.get('PYTHONPATH', '')}")
    out = _ask(["--", "-x", ""], env=env, cwd=str(hostile))
    import clmagic

    assert out["clmagic"] == clmagic.__file__ and out["probe"] == str(probe)
    assert out["isolated"] == 1 and out["argv"] == ["--", "-x", ""]
    assert out["env"] == {"POCL_DEVICES": "cpu", "OCL_ICD_VENDORS": "/nowhere",
                          "CLMAGIC_CACHE_DIR": str(tmp_path / "c"),
                          "PYTHONPATH": env["PYTHONPATH"]}  # passed on, not used
    assert "" not in out["path"] and "." not in out["path"]
    assert not any(str(p).startswith(str(hostile)) for p in out["path"])


def test_child_path_names_the_folders_modules_came_from() -> None:
    """The pins are read from the modules' files: clmagic's folder is the one above the
    package this test imported, whatever ``sys.path`` says."""
    import clmagic

    pins = _launch.child_path()
    assert pins["clmagic"] == str(Path(clmagic.__file__).resolve().parent.parent) or (
        pins["clmagic"] == os.path.dirname(os.path.dirname(os.path.abspath(clmagic.__file__))))
    assert set(pins) <= set(_launch.NEEDED) and "" not in pins.values()
