"""Hostile folders and environments against each kind of child clmagic starts (issue 34, class
1): a ``json.py`` (and ``numpy.py``, ``pyopencl.py``, ``runpy.py``, ``clmagic.py``) in the
user's working folder, a ``sitecustomize.py``/``usercustomize.py`` on ``PYTHONPATH`` and a
``PYTHONSTARTUP`` file never run in the readout helper, the vet child, the demo's processes or
the workers of ``warm`` and sweeps, and each gives the right result.

Every planted module leaves a marker (its name and the pid of the process that ran it) before
it does harm; the user's own process may run the ``PYTHONPATH`` ones (that is the user's
choice), no other process may. The planted ``json.py`` does what the issue's did: it becomes the
real ``json`` but turns ``a[0] = 1`` into ``a[0] = 666`` in what it decodes, so a readout
helper that imported it would store a different program under the key.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import child_env

MARK = '''import os
open(os.path.join(os.environ["CLMAGIC_TEST_MARKS"], "{name}-%d" % os.getpid()), "w").close()
'''
#: the issue's json.py: marks, becomes the real json, and changes the kernel it decodes
EVIL_JSON = MARK.format(name="json") + '''
import importlib.machinery, importlib.util, sys
_here = os.path.dirname(os.path.abspath(__file__))
_path = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_spec = importlib.machinery.PathFinder.find_spec("json", _path)
_real = importlib.util.module_from_spec(_spec)
sys.modules["json"] = _real
_spec.loader.exec_module(_real)
_loads = _real.loads
def _evil(s, *a, **k):
    v = _loads(s, *a, **k)
    return [x.replace("a[0] = 1;", "a[0] = 666;") if isinstance(x, str) else x
            for x in v] if isinstance(v, list) else v
_real.loads = _evil
'''
KERNEL = "__kernel void k(__global int *a) { a[0] = 1; }\n"

#: what the parent scripts share: build KERNEL and say what a[0] became
PRELUDE = '''
import json, os, sys
import numpy as np
import pyopencl as cl
import clmagic
def value(r):
    a = np.zeros(1, np.int32)
    buf = cl.Buffer(r.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
    r.kernels["k"](r.queue, (1,), None, buf)
    cl.enqueue_copy(r.queue, a, buf)
    return int(a[0])
def say(**what):
    print(json.dumps(dict(what, pid=os.getpid())), flush=True)
'''


@pytest.fixture
def hostile(tmp_path: Path) -> dict[str, object]:
    """A working folder full of shadows, a PYTHONPATH folder with customisers, a startup file,
    and where the markers go."""
    work, site, marks = tmp_path / "work", tmp_path / "site", tmp_path / "marks"
    for folder in (work, site, marks):
        folder.mkdir()
    (work / "json.py").write_text(EVIL_JSON)
    for name in ("numpy", "pyopencl", "runpy", "clmagic"):
        (work / f"{name}.py").write_text(MARK.format(name=name) + "raise ImportError('shadow')\n")
    for name in ("sitecustomize", "usercustomize"):
        (site / f"{name}.py").write_text(MARK.format(name=name))
    (tmp_path / "startup.py").write_text(MARK.format(name="startup"))
    env = child_env(CLMAGIC_TEST_MARKS=str(marks), PYTHONSTARTUP=str(tmp_path / "startup.py"))
    # (no empty entry: that would put the working folder on the user's own path too)
    env["PYTHONPATH"] = ":".join(p for p in [str(site), *env["PYTHONPATH"].split(":")] if p)
    return {"work": work, "marks": marks, "env": env, "scripts": tmp_path}


def _run(hostile: dict[str, object], script: str, **env: str) -> list[dict[str, object]]:
    """Run ``PRELUDE + script`` from a file outside the hostile folder, in that folder (as a
    notebook's kernel runs in the user's folder); each JSON line it printed."""
    scripts = Path(str(hostile["scripts"]))
    path = scripts / f"script{len(list(scripts.glob('script*.py')))}.py"
    path.write_text(PRELUDE + script)
    proc = subprocess.run([sys.executable, str(path)], cwd=str(hostile["work"]),
                          env={**hostile["env"], **env},  # type: ignore[dict-item]
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def _foreign_marks(hostile: dict[str, object], parents: list[int]) -> list[str]:
    """The markers left by a process other than the user's own (``parents``)."""
    return sorted(m.name for m in Path(str(hostile["marks"])).iterdir()
                  if int(m.name.rsplit("-", 1)[1]) not in parents)


def test_readout_helper_imports_nothing_of_the_users(hostile, tmp_path, pocl):
    """The issue's case: a MISS's binary read out by the helper in the user's folder, then a
    HIT in the next process computes 1, not 666; no planted module ran in the helper."""
    env = dict(CLMAGIC_CACHE_DIR=str(tmp_path / "cache"), CLMAGIC_DEVICE=pocl,
               CLMAGIC_READOUT_HELPER="1", SRC=KERNEL)
    first = _run(hostile, '''
from clmagic.opencl import readout
r = clmagic.build(os.environ["SRC"])
say(outcome=r.outcome, saved=r.saved, helper=readout.helper_pid(), value=value(r))
''', **env)[0]
    assert first["outcome"] == "MISS" and first["saved"] is True and first["value"] == 1
    assert first["helper"] is not None  # the binary came from the helper
    second = _run(hostile, '''
r = clmagic.build(os.environ["SRC"])
say(outcome=r.outcome, value=value(r))
''', **env)[0]
    assert second == {**second, "outcome": "HIT", "value": 1}
    assert _foreign_marks(hostile, [first["pid"], second["pid"]]) == []


def test_the_issues_json_py_does_not_change_what_is_stored(tmp_path, pocl):
    """The issue's own case, alone: only the ``json.py`` in the working folder. A helper that
    imported it would build ``a[0] = 666`` and store it under the key of ``a[0] = 1`` (the
    next process's HIT computed 666); the helper runs the real json, and the HIT computes 1."""
    work, marks = tmp_path / "work", tmp_path / "marks"
    work.mkdir()
    marks.mkdir()
    (work / "json.py").write_text(EVIL_JSON)
    hostile = {"work": work, "marks": marks, "scripts": tmp_path,
               "env": child_env(CLMAGIC_TEST_MARKS=str(marks))}
    env = dict(CLMAGIC_CACHE_DIR=str(tmp_path / "cache"), CLMAGIC_DEVICE=pocl,
               CLMAGIC_READOUT_HELPER="1", SRC=KERNEL)
    script = '''
from clmagic.opencl import readout
r = clmagic.build(os.environ["SRC"])
r.saved
say(outcome=r.outcome, value=value(r), helper=readout.helper_pid())
'''
    first, second = _run(hostile, script, **env)[0], _run(hostile, script, **env)[0]
    assert first["outcome"] == "MISS" and first["helper"] is not None
    assert second["outcome"] == "HIT" and second["value"] == 1
    assert _foreign_marks(hostile, [first["pid"], second["pid"]]) == []


def test_vet_child_imports_nothing_of_the_users(hostile, tmp_path, pocl):
    """An imported bundle's entry is proven in the vet child before it is used: the child
    runs none of the planted modules, and the HIT computes 1."""
    out = _run(hostile, '''
from clmagic.store import DirectoryStore
a, b = os.environ["A"], os.environ["B"]
first = clmagic.Compiler(store=DirectoryStore(a))
assert first.build(os.environ["SRC"]).saved
clmagic.export_bundle(b + ".db", store=first.store)
clmagic.import_bundle(b + ".db", store=DirectoryStore(b))
r = clmagic.Compiler(store=DirectoryStore(b)).build(os.environ["SRC"])
say(outcome=r.outcome, note=r.note, value=value(r))
''', A=str(tmp_path / "a"), B=str(tmp_path / "b"), SRC=KERNEL, CLMAGIC_DEVICE=pocl,
        CLMAGIC_READOUT_HELPER="0")[0]
    assert out["outcome"] == "HIT" and out["value"] == 1, out
    assert _foreign_marks(hostile, [out["pid"]]) == []


def test_demo_children_import_nothing_of_the_users(hostile, tmp_path, pocl):
    """``clmagic demo`` (two processes: MISS then HIT) from the hostile folder."""
    out = _run(hostile, '''
from clmagic.cli.main import main
say(code=main(["demo", "--device", os.environ["CLMAGIC_DEVICE"]]))
''', CLMAGIC_DEVICE=pocl)
    assert out[-1]["code"] == 0
    assert _foreign_marks(hostile, [out[-1]["pid"]]) == []


def test_warm_and_sweep_workers_import_nothing_of_the_users(hostile, tmp_path, pocl):
    """``warm`` and a sweep with two workers each: every build done by a worker that ran
    none of the planted modules; the sweep's variants compute their own value."""
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    for n in range(3):
        (kernels / f"k{n}.cl").write_text(KERNEL.replace("1;", f"{n + 10};"))
    out = _run(hostile, '''
from clmagic.cache.warm import warm
report = warm([os.environ["KERNELS"]], jobs=2)
say(built=len(report.built), failed=report.failed)
from clmagic.cache.sweep import sweep_run
run = sweep_run(os.environ["SRC"].replace("= 1;", "= V;"), {"V": [3, 4, 5]}, jobs=2,
                run=lambda r: float(value(r)))
say(sweep=[(v.outcome, v.error, v.median_us) for v in run.variants])
''', KERNELS=str(kernels), SRC=KERNEL, CLMAGIC_CACHE_DIR=str(tmp_path / "cache"),
        CLMAGIC_DEVICE=pocl)
    assert out[0]["built"] == 3 and out[0]["failed"] == []
    assert out[1]["sweep"] == [["MISS", "", 3.0], ["MISS", "", 4.0], ["MISS", "", 5.0]]
    assert _foreign_marks(hostile, [out[0]["pid"]]) == []


def test_the_planted_modules_do_run_where_python_looks(hostile):
    """The hostile folder is hostile: a plain ``python -m`` child in it runs the planted
    ``json.py``, and one with its ``PYTHONPATH`` runs the customiser (so the tests above
    would see one that a clmagic child ran)."""
    env = {**hostile["env"]}  # type: ignore[dict-item]
    subprocess.run([sys.executable, "-m", "json.tool", "--help"], cwd=str(hostile["work"]),
                   env=env, capture_output=True, timeout=60)
    names = {m.name.rsplit("-", 1)[0] for m in Path(str(hostile["marks"])).iterdir()}
    assert {"json", "sitecustomize"} <= names
