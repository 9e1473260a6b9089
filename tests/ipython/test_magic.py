"""%%clkernel through a real IPython InteractiveShell."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest
from conftest import SAXPY, last_json, outcome_line, run, run_child

#: what ``%load_ext clmagic`` must not import: drawing, stores, the driver, hashing, and every
#: clmagic module that only a cell or ``%clcache`` needs
HEAVY = ("pandas", "ipywidgets", "matplotlib", "tqdm", "sqlite3", "_sqlite3", "redis", "pyopencl",
         "numpy", "hashlib", "_hashlib", "difflib", "pytools")
#: the clmagic modules registering the magics needs (nothing else of clmagic): the errors (with
#: the plain formats a build log is shown in), the magic line, the typed fronts of IPython's
#: decorators, and the table of views by type name (``show.views``, which imports none of the
#: types nor their renderers)
AT_LOAD = ["clmagic", "clmagic._format", "clmagic._version", "clmagic.errors", "clmagic.ipython",
           "clmagic.ipython.line", "clmagic.ipython.magics", "clmagic.ipython.pager",
           "clmagic.ipython.typed", "clmagic.show", "clmagic.show.views"]


@pytest.mark.parametrize("store", ["folder", "cache.db", "redis://127.0.0.1:9/0"])
def test_load_ext_imports_only_what_registering_the_magics_needs(store, tmp_path):
    """``%load_ext clmagic`` in a fresh process adds the magics and nothing heavy to
    ``sys.modules`` (whatever store is configured: none is opened); the first cell then imports
    what it runs, and works."""
    where = store if store.startswith("redis") else str(tmp_path / store)
    proc = run_child(
        "import json, sys\n"  # noqa: UP031 (%: the script's own braces stay as they are)
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell.instance()\n"
        "before = set(sys.modules)\n"
        "ip.run_line_magic('load_ext', 'clmagic')\n"
        "new = sorted(set(sys.modules) - before)\n"
        "out = {'clmagic': [m for m in new if m.split('.')[0] == 'clmagic'],"
        " 'heavy': [m for m in new if m.split('.')[0] in %r],"
        " 'magic': 'clkernel' in ip.magics_manager.magics['cell'],"
        " 'config': any(type(c).__name__ == 'CLMagics' for c in ip.configurables)}\n"
        "if not %r:\n"
        "    r = ip.run_cell('%%%%clkernel --quiet\\n' + %r)\n"
        "    out['cell'] = r.success and type(ip.user_ns.get('saxpy')).__name__ == 'Kernel'\n"
        "print(json.dumps(out))" % (HEAVY, store.startswith("redis"), SAXPY),
        CLMAGIC_CACHE_DIR=where,
    )
    expected = {"clmagic": AT_LOAD, "heavy": [], "magic": True, "config": True}
    if not store.startswith("redis"):
        expected["cell"] = True
    assert last_json(proc) == expected


def test_opts_as_written_miss_then_memory_and_kernels_bound(shell):
    res, cap = run(shell, "--opts -O3 -cl-mad-enable")
    assert res.success, res.error_in_exec
    line = outcome_line(cap)
    assert line.startswith("MISS") and "saxpy, scale" in line and "built in" in line
    assert "-O3 -cl-mad-enable → -cl-mad-enable" in line
    assert line.endswith(("saving", "saved"))  # the save runs in the background
    ns = shell.user_ns
    assert isinstance(ns["saxpy"], cl.Kernel) and isinstance(ns["scale"], cl.Kernel)
    assert isinstance(ns["cl_ctx"], cl.Context) and isinstance(ns["cl_queue"], cl.CommandQueue)
    first = ns["saxpy"]
    res, cap = run(shell, "--opts -O3 -cl-mad-enable")
    line = outcome_line(cap)
    assert line.startswith("MEMORY") and "build was" in line
    assert shell.user_ns["saxpy"] is first

    x = np.arange(32, dtype=np.float32)
    y = np.ones_like(x)
    mf = cl.mem_flags
    xb = cl.Buffer(ns["cl_ctx"], mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    yb = cl.Buffer(ns["cl_ctx"], mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=y)
    ns["saxpy"](ns["cl_queue"], x.shape, None, np.float32(2), xb, yb)
    cl.enqueue_copy(ns["cl_queue"], y, yb)
    assert np.allclose(y, 2 * x + 1)


def test_disk_hit_in_a_new_compiler_shows_original_build_time(shell, compiler, settings):
    import clmagic
    from clmagic.ipython.magics import CLMagics

    run(shell, "")
    shell.register_magics(CLMagics(shell=shell, compiler=clmagic.Compiler(settings)))
    res, cap = run(shell, "")
    line = outcome_line(cap)
    assert line.startswith("HIT") and "loaded in" in line and "build was" in line


def test_name_binds_program_and_no_cache_stores_nothing(shell, cache_dir):
    res, cap = run(shell, "--name prog --no-cache")
    assert res.success
    assert isinstance(shell.user_ns["prog"], cl.Program)
    assert outcome_line(cap).startswith("BUILD") and "cache bypassed" in outcome_line(cap)
    assert not list(cache_dir.rglob("*.clbin"))


def test_quiet_prints_nothing(shell):
    res, cap = run(shell, "--quiet")
    assert res.success and not cap.outputs and not cap.stdout.strip()
    shell.run_line_magic("config", "CLMagics.quiet = True")
    try:
        res, cap = run(shell, "")
        assert res.success and not cap.outputs
    finally:
        shell.run_line_magic("config", "CLMagics.quiet = False")


def test_device_switch_to_oclgrind(shell, oclgrind):
    res, cap = run(shell, f"--device {oclgrind}")
    assert res.success and "Oclgrind" in outcome_line(cap)
    assert shell.user_ns["cl_ctx"].devices[0].platform.name == "Oclgrind"


def test_user_context_on_the_same_device_is_reused(shell, pocl):
    import clmagic

    dev = clmagic.resolve_device(pocl)[1]
    ctx = cl.Context([dev])
    shell.user_ns["ctx"] = ctx
    res, cap = run(shell, "")
    assert res.success
    assert shell.user_ns["cl_ctx"] is ctx or shell.user_ns["cl_ctx"] == ctx
    assert shell.user_ns["saxpy"].context == ctx


BAD_SOURCE = """\
__kernel void broken(__global float *a)
{
    a[0] = ;
}
"""


def test_build_failure_shows_the_log_on_cell_lines_without_traceback(shell, cache_dir):
    res, cap = run(shell, "", BAD_SOURCE)
    assert not res.success
    out = cap.stdout + cap.stderr
    assert "line 4:" in out and "expected expression" in out  # cell line 4 = source line 3
    assert "Traceback" not in out and "File \"" not in out
    assert not list(cache_dir.rglob("*.clbin"))


@pytest.mark.parametrize(
    "line, cell, message",
    [
        ("", "   \n", "empty cell"),
        ("--bogus", SAXPY, "unrecognized arguments"),
        ("--device no-such-device", SAXPY, "no OpenCL device matches"),
        ("--device 7:3", SAXPY, "no OpenCL device 7:3"),
        ("--opts", SAXPY, "--opts needs build options"),
        ("--opts -D", SAXPY, "-D needs a value"),
    ],
)
def test_bad_input_is_one_line_error(shell, line, cell, message):
    before = set(shell.user_ns)
    res, cap = run(shell, line, cell)
    assert not res.success
    out = (cap.stdout + cap.stderr).strip()
    assert message in out and "Traceback" not in out
    assert len(out.splitlines()) == 1, out
    assert set(shell.user_ns) - before <= {"_", "__", "___"} or "saxpy" not in shell.user_ns


def test_no_opencl_platform_says_how_to_install_pocl(tmp_path):
    """A copy of pyopencl whose bundled ICD list is emptied and no system ICDs: no platform."""
    import shutil

    import pyopencl

    shutil.copytree(Path(pyopencl.__file__).parent, tmp_path / "pyopencl")
    for icd in (tmp_path / "pyopencl" / ".libs").glob("*.icd"):
        icd.unlink()
    (tmp_path / "vendors").mkdir()
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n") + (
        "import clmagic\n"
        "try:\n    clmagic.build('__kernel void k() {}')\n"
        "except clmagic.DeviceError as e:\n    print('ERR', e)\n"
    )
    proc = run_child(code, OCL_ICD_VENDORS=str(tmp_path / "vendors"))
    assert proc.stdout.startswith("ERR no OpenCL platform found"), proc.stdout + proc.stderr
    assert "pyopencl[pocl]" in proc.stdout
