"""The hook holds nothing of the caller's and makes what pyopencl makes (issue 33): a context
freed when the caller lets go of it, twin devices kept apart, the program's info as pyopencl's,
and stderr left to other threads and their children.

Whether a context is freed is read from the driver, not from Python: the child holds one
reference of its own (``clRetainContext``) and reads ``CL_CONTEXT_REFERENCE_COUNT`` once the
caller's references are gone (``del``, ``clear_first_arg_caches()``, a collection): 1 means that
nothing else (no program clmagic kept, no save under way) holds it. Each case runs without the
hook, then with it cold (every program a MISS) and warm (every program a HIT).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import SAXPY, child_env, last_json

PRELUDE = """
import ctypes, gc, json, os, sys
import numpy as np
import pyopencl as cl
comp = None
if sys.argv[2] != "-":
    import clmagic
    comp = clmagic.Compiler(clmagic.Settings.from_env(
        {"CLMAGIC_CACHE_DIR": sys.argv[2], "CLMAGIC_DEVICE": sys.argv[1]}))
    clmagic.install(comp)
def outcomes():
    return sorted({r.outcome for r in comp.history.records}) if comp else []
"""

HOLDS = PRELUDE + """
import pyopencl.array as cla
import pyopencl.tools
from pyopencl.elementwise import ElementwiseKernel
p, d = (int(x) for x in sys.argv[1].split(":"))
dev = cl.get_platforms()[p].get_devices()[d]
lib = ctypes.CDLL(next(ln.split(None, 5)[-1].strip() for ln in open("/proc/self/maps")
                       if "libOpenCL" in ln))
lib.clGetContextInfo.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_size_t,
                                 ctypes.c_void_p, ctypes.c_void_p]
counts = []
for _ in range(3):  # one "test" each, as pyopencl's own fixture makes them
    ctx = cl.Context([dev])
    handle = ctypes.c_void_p(ctx.int_ptr)
    lib.clRetainContext(handle)
    queue = cl.CommandQueue(ctx)
    prg = cl.Program(ctx, SRC).build()
    a = cla.zeros(queue, 16, np.float32) + 1
    prg.saxpy(queue, (16,), None, np.float32(2), a.data, a.data)
    twice = ElementwiseKernel(ctx, "float *x", "x[i] = 2 * x[i]", "twice")
    twice(a)
    assert a.get()[0] == 6.0
    del ctx, queue, prg, a, twice
    pyopencl.tools.clear_first_arg_caches()
    gc.collect()
    n = ctypes.c_uint()
    lib.clGetContextInfo(handle, 0x1080, 4, ctypes.byref(n), None)
    counts.append(n.value)
    lib.clReleaseContext(handle)
print(json.dumps({"counts": counts, "outcomes": outcomes()}))
"""

INFO = PRELUDE + """
p = int(sys.argv[1].split(":")[0])
devs = cl.get_platforms()[p].get_devices()
ctx = cl.Context(devs)
seen = {}
for name, subset in (("one", devs[:1]), ("all", None)):
    prg = cl.Program(ctx, SRC).build(devices=subset)
    pi = cl.program_info
    seen[name] = {
        "source": prg.get_info(pi.SOURCE) == SRC and prg.source == SRC,
        "devices": [d.int_ptr for d in prg.get_info(pi.DEVICES)] == [d.int_ptr for d in devs]
                   and prg.devices == list(devs),
        "num_devices": prg.get_info(pi.NUM_DEVICES),
        "built": [s > 0 for s in prg.get_info(pi.BINARY_SIZES)],
        "binaries": [len(b) > 0 for b in prg.binaries],
        "names": prg.get_info(pi.KERNEL_NAMES),
    }
print(json.dumps({"seen": seen, "outcomes": outcomes()}))
"""


def _child(code: str, spec: str, cache: str, **env: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", f"SRC = {SAXPY!r}\n" + code, spec, cache],
                          env=child_env(**env), capture_output=True, text=True, timeout=240)
    return last_json(proc)


@pytest.mark.parametrize("which", ["pocl", "oclgrind"])
def test_a_context_is_freed_when_the_caller_lets_go_as_without_the_hook(which, request,
                                                                          cache_dir):
    spec = request.getfixturevalue(which)
    plain = _child(HOLDS, spec, "-")
    cold = _child(HOLDS, spec, str(cache_dir))
    warm = _child(HOLDS, spec, str(cache_dir))
    assert plain["counts"] == [1, 1, 1], plain  # pyopencl lets go of each one
    assert cold["counts"] == plain["counts"] and warm["counts"] == plain["counts"], (cold, warm)
    assert "MISS" in cold["outcomes"] and warm["outcomes"] == ["HIT"], (cold, warm)


def test_a_hooked_program_answers_as_pyopencls_own(pocl, cache_dir):
    """A program built for part of a two-device context, then for all of it: its source, its
    devices (the context's), which devices have a binary, its kernel names; cold and warm."""
    env = {"POCL_DEVICES": "pthread basic"}
    plain = _child(INFO, pocl, "-", **env)
    cold = _child(INFO, pocl, str(cache_dir), **env)
    warm = _child(INFO, pocl, str(cache_dir), **env)
    assert plain["seen"]["one"]["num_devices"] == 2 and plain["seen"]["one"]["source"]
    assert cold["seen"] == plain["seen"], (plain, cold)
    assert warm["seen"] == plain["seen"], (plain, warm)
    assert warm["outcomes"] == ["HIT"], warm


TWINS = """
import json, sys, numpy as np, pyopencl as cl, clmagic
p = int(sys.argv[1].split(":")[0])
c = clmagic.Compiler(clmagic.Settings.from_env({"CLMAGIC_CACHE_DIR": sys.argv[2]}))
out = []
for d in (0, 1, 0):
    r = c.build(SRC, device=f"{p}:{d}")
    x = np.arange(8, dtype=np.float32); y = np.ones_like(x)
    mf = cl.mem_flags
    xb = cl.Buffer(r.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    yb = cl.Buffer(r.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=y)
    r.kernels["saxpy"](r.queue, x.shape, None, np.float32(2), xb, yb)
    cl.enqueue_copy(r.queue, y, yb)
    want = cl.get_platforms()[p].get_devices()[d]
    out.append({"device": r.queue.device == want, "context": r.context.devices == [want],
                "ok": bool(np.allclose(y, 2 * x + 1)), "outcome": r.outcome,
                "key": r.key, "ctx": r.context.int_ptr})
print(json.dumps(out))
"""


def test_twin_devices_get_contexts_of_their_own_and_share_entries(pocl, cache_dir):
    """Two identical devices (one fingerprint): each build runs on the device asked for, in a
    context of that device; the cache entry (keyed by fingerprint) is shared."""
    out = _child(TWINS, pocl, str(cache_dir), POCL_DEVICES="pthread pthread")
    assert all(o["device"] and o["context"] and o["ok"] for o in out), out
    assert out[0]["ctx"] != out[1]["ctx"] and out[0]["ctx"] == out[2]["ctx"]
    assert len({o["key"] for o in out}) == 1 and out[1]["outcome"] in ("HIT", "MISS")


STDERR = """
import json, os, subprocess, sys, threading, time
import clmagic
from clmagic.opencl import driver
hooked = sys.argv[2] == "hook"
child = []
def start_child():
    while os.fstat(2).st_ino == before and not hooked and not done:
        time.sleep(0.0005)
    child.append(subprocess.Popen([sys.executable, "-c",
        "import sys, time; time.sleep(1); print('the child speaks late', file=sys.stderr)"]))
before = os.fstat(2).st_ino
done = False
t = threading.Thread(target=start_child)
t.start()
during = []
if hooked:
    import pyopencl as cl
    clmagic.install()
    p, d = (int(x) for x in sys.argv[1].split(":"))
    ctx = cl.Context([cl.get_platforms()[p].get_devices()[d]])
    orig = driver.from_source
    def watched(*a, **k):
        during.append(os.fstat(2).st_ino == before)
        return orig(*a, **k)
    driver.from_source = watched
    cl.Program(ctx, SRC.replace("saxpy", "saxpy2")).build()
else:
    clmagic.Compiler().build(SRC.replace("saxpy", "saxpy3"), device=sys.argv[1], use_cache=False)
done = True
t.join()
child[0].wait()
print(json.dumps({"redirected": os.fstat(2).st_ino != before, "during": during}), flush=True)
"""


@pytest.mark.parametrize("how", ["cell", "hook"])
def test_a_child_started_during_a_build_keeps_its_stderr(how, pocl, cache_dir):
    """A cell's build sends fd 2 through a pipe (the driver's chatter kept out of the cell) whose
    reader forwards the rest until the last writer is gone: a child another thread starts during
    the build still reaches the real stderr after it. The hook leaves fd 2 alone."""
    proc = subprocess.run([sys.executable, "-c", f"SRC = {SAXPY!r}\n" + STDERR, pocl, how],
                          env=child_env(CLMAGIC_CACHE_DIR=str(cache_dir)), capture_output=True,
                          text=True, timeout=240)
    out = last_json(proc)
    assert "the child speaks late" in proc.stderr, proc.stderr
    assert out["redirected"] is False
    if how == "hook":
        assert out["during"] == [True]  # fd 2 was the process's own during the hook's build
