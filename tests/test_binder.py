"""A Binder build replayed without Docker: ``binder/apt.txt``'s packages installed with apt-get
(as root, as repo2docker does), a fresh virtual environment from ``binder/requirements.txt``, then
``binder/postBuild``, then every notebook run in it under the environment that ``binder/start``
sets (see README "Binder").

The image then has two POCLs: the pyopencl wheel's and the system's. On a CPU that the wheel's
LLVM does not know (AMD Zen 5: "unknown target CPU 'generic'") only the system one builds. On a
CPU where the wheel's builds too (and on any other, so the replay means the same everywhere), the
replay breaks the replayed environment's wheel POCL (its kernel header removed, so its compiler
fails) to stand for that case: the notebooks, clmagic and
pyopencl's ``create_some_context()`` must all land on the POCL that builds."""

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

APT_TXT = ROOT / "binder" / "apt.txt"
# Removed from the replayed wheel POCL when it can build here (see the module docstring)
WHEEL_HEADER = "pocl_binary_distribution/.libs/share/pocl/include/_kernel.h"


def apt_packages() -> list[str]:
    """binder/apt.txt as repo2docker reads it: one package a line, ``#`` starts a comment."""
    names = [ln.partition("#")[0].strip() for ln in APT_TXT.read_text().splitlines()]
    return [n for n in names if n]


def install_apt_txt() -> None:
    """``apt-get install --yes --no-install-recommends <apt.txt>`` as repo2docker runs it."""
    packages = apt_packages()
    missing = [p for p in packages if subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True
    ).stdout.strip() != "install ok installed"]
    if not missing:
        return
    if not shutil.which("apt-get") or os.geteuid() != 0:
        pytest.fail(f"binder/apt.txt needs {' '.join(missing)}: run as root with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run(["apt-get", "update", "-qq"], env=env)
    _run(["apt-get", "install", "--yes", "--no-install-recommends", *packages], env=env)


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
            "import os, sys, json, clmagic, pyopencl as cl\\n"
            "chosen = clmagic.get_compiler().resolve()[0]\\n"
            "theirs = clmagic.resolve_device(cl.create_some_context().devices[0])[0]\\n"
            "print(json.dumps([sys.executable, clmagic.__file__, chosen.label, "
            "sorted({d.platform_name for d in clmagic.list_devices()}), chosen.spec, "
            "theirs.spec, os.environ['PYOPENCL_CTX'], "
            "{d.spec: d.problem for d in clmagic.list_devices()}]))"))
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
    install_apt_txt()
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
    probe = [py, str(ROOT / "scripts" / "probe_pocl.py")]
    pocl_platforms = _run([py, "-c", "import pyopencl as cl; print(sum('Portable' in p.name "
                           "for p in cl.get_platforms()))"], env=env).stdout
    assert int(pocl_platforms) == 2  # the wheel's and apt.txt's
    site = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                     env=env).stdout.strip())
    header = site / WHEEL_HEADER  # stand for a CPU that the wheel's LLVM does not know
    header.rename(header.with_suffix(".off"))
    assert subprocess.run(probe, env=env, capture_output=True).returncode == 0  # one builds

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
    (executable, module, device, platforms, chosen, theirs, ctx_env, problems) = json.loads(
        first.cells[-1].outputs[0]["text"])
    for name in names:
        nb = nbformat.read(out / name, as_version=4)
        expected = OUTCOMES[name][0]  # a fresh cache: MISS first
        if name.startswith("02-") and len(platforms) == 1:
            expected = expected[:-1]  # as on Binder: no second platform to build for
        assert outcomes(nb) == expected, name
    assert device.startswith("POCL")  # CLMAGIC_DEVICE from binder/start, not a question
    broken = [spec for spec, problem in problems.items() if problem]
    # the two POCLs and Oclgrind (binder/requirements.txt: notebook 6's checker); the wheel's
    # POCL cannot build
    assert len(problems) == 3 and len(broken) == 1, problems
    assert chosen not in broken and problems[chosen] is None  # clmagic built on the other one
    assert theirs == chosen == ctx_env  # and binder/start pointed pyopencl at it too
    assert Path(executable).parent == venv / "bin"  # the kernel ran in the replayed environment
    assert "site-packages" in module and str(venv) in module  # clmagic as postBuild installed it
    assert not (repo / "notebooks" / ".ipynb_checkpoints").exists()
    # the %%clkernel highlighting extension, built by postBuild's pip install, where Lab finds it
    assert (venv / "share" / "jupyter" / "labextensions" / "clmagic" / "package.json").exists()
    assert len(list(NOTEBOOKS.glob("*.ipynb"))) == len(names)
