"""A Binder build replayed without Docker: a fresh virtual environment from
``binder/requirements.txt``, then ``binder/postBuild``, then every notebook run in it under the
environment that ``binder/start`` sets (as repo2docker does; see README "Binder")."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT
from test_notebooks import NOTEBOOKS, OUTCOMES, outcomes

pytestmark = pytest.mark.slow

# What a repo2docker image has beside binder/requirements.txt: the Jupyter side, which the
# replay needs to run kernels (ipykernel) and notebooks (nbclient).
JUPYTER_SIDE = ["ipykernel", "nbclient"]

# Runs inside the replayed environment: each notebook in a new kernel, saved run; the first one
# gets a last cell that reports which Python, clmagic and device the kernel used.
RUNNER = """
import sys, nbformat
from nbclient import NotebookClient
out = sys.argv[1]
for i, path in enumerate(sys.argv[2:]):
    nb = nbformat.read(path, as_version=4)
    if i == 0:
        nb.cells.append(nbformat.v4.new_code_cell(
            "import sys, json, clmagic; print(json.dumps([sys.executable, clmagic.__file__, "
            "clmagic.get_compiler().resolve()[0].label, "
            "sorted({d.platform_name for d in clmagic.list_devices()})]))"))
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": out}}).execute()
    nbformat.write(nb, f"{out}/{path.rsplit('/', 1)[-1]}")
"""

COPY = ["pyproject.toml", "README.md", "clmagic", "binder", "notebooks", "labextension"]
# not committed: caches, and the JupyterLab extension's npm install and builds (postBuild's pip
# install builds it from labextension/ with Node.js, which repo2docker images have)
UNCOMMITTED = ("__pycache__", ".ipynb_checkpoints", "node_modules", "lib", "labextension")


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    shown = " ".join(c if len(c) < 200 else "<script>" for c in cmd)
    assert proc.returncode == 0, f"{shown}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


def test_binder_replay_runs_every_notebook(tmp_path):
    repo, venv, home, out = (tmp_path / d for d in ("repo", "venv", "home", "out"))
    for d in (repo, home, out):
        d.mkdir()
    for name in COPY:  # the repository as Binder clones it (what is committed, no .venv)
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, repo / name, ignore=shutil.ignore_patterns(*UNCOMMITTED))
        else:
            shutil.copy2(src, repo / name)

    # A clean environment: nothing of ours on PYTHONPATH, no clmagic/pyopencl settings.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CLMAGIC_", "PYOPENCL_", "POCL_", "PYTHON", "JUPYTER", "VIRTUAL"))}
    env.update(HOME=str(home), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", str(venv)], env=env)
    py = str(venv / "bin" / "python")
    _run([py, "-m", "pip", "install", "-q", "-r", str(repo / "binder" / "requirements.txt"),
          *JUPYTER_SIDE], env=env)
    _run([str(repo / "binder" / "postBuild")], env=env, cwd=repo)

    # binder/start sets the student's environment, then execs its arguments.
    started = _run([str(repo / "binder" / "start"), py, "-c",
                    "import json, os; print(json.dumps(dict(os.environ)))"], env=env, cwd=repo)
    student = json.loads(started.stdout)
    assert student["CLMAGIC_DEVICE"] and student["PYOPENCL_CTX"]
    assert student["CLMAGIC_CACHE_DIR"].startswith(str(home))  # fresh: a new home

    names = sorted(OUTCOMES)
    _run([py, "-c", RUNNER, str(out), *(str(repo / "notebooks" / n) for n in names)],
         env=student, cwd=out)

    first = nbformat.read(out / names[0], as_version=4)
    executable, module, device, platforms = json.loads(first.cells[-1].outputs[0]["text"])
    for name in names:
        nb = nbformat.read(out / name, as_version=4)
        expected = OUTCOMES[name][0]  # a fresh cache: MISS first
        if name.startswith("02-") and len(platforms) == 1:
            expected = expected[:-1]  # as on Binder: no second platform to build for
        assert outcomes(nb) == expected, name
    assert device.startswith("POCL")  # CLMAGIC_DEVICE from binder/start, not a question
    assert Path(executable).parent == venv / "bin"  # the kernel ran in the replayed environment
    assert "site-packages" in module and str(venv) in module  # clmagic as postBuild installed it
    assert not (repo / "notebooks" / ".ipynb_checkpoints").exists()
    # the %%clkernel highlighting extension, built by postBuild's pip install, where Lab finds it
    assert (venv / "share" / "jupyter" / "labextensions" / "clmagic" / "package.json").exists()
    assert len(list(NOTEBOOKS.glob("*.ipynb"))) == len(names)
