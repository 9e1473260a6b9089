"""The hook warns as pyopencl's own path does, build by build (issue 33): the same
``CompilerWarning``s, warm or cold.

A test-suite-shaped child (a new context per "test", the same programs built in each, one of
them with a ``#warning``, built from two call sites: a ``cl.Program`` here and an
``ElementwiseKernel`` in pyopencl) counts pyopencl's ``CompilerWarning``s two ways: every
warning raised (``simplefilter("always")``) and the warnings Python's default filter shows.
The counts are compared, never timed: pyopencl's default path with POCL's cache warm against the
hook with clmagic's cache warm (every program a HIT), and the first run through the hook (MISS).
"""

from __future__ import annotations

import subprocess
import sys

from conftest import child_env, last_json

CONTEXTS = 4
WARNS = "#warning a warning of the test\n__kernel void k(__global int *a) { a[0] = 3; }\n"
CHILD = """
import json, sys, warnings
import numpy as np
import pyopencl as cl
import pyopencl.array as cla
from pyopencl.elementwise import ElementwiseKernel

mode, contexts, spec = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if sys.argv[4] != "-":
    import clmagic
    comp = clmagic.Compiler(clmagic.Settings.from_env(
        {"CLMAGIC_CACHE_DIR": sys.argv[4], "CLMAGIC_DEVICE": spec}))
    clmagic.install(comp)
p, d = (int(x) for x in spec.split(":"))
dev = cl.get_platforms()[p].get_devices()[d]
shown = []
warnings.resetwarnings()
warnings.simplefilter("always" if mode == "always" else "default")
warnings.showwarning = lambda msg, cat, *a, **k: shown.append(cat.__name__)
ok = True
for _ in range(contexts):  # one "test" each
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx)
    prg = cl.Program(ctx, WARNS).build()
    a = cla.zeros(queue, 4, np.int32)
    prg.k(queue, (1,), None, a.data)
    twice = ElementwiseKernel(ctx, "int *x", "x[i] = 2 * x[i] + 1", "twice",
                              preamble="#warning a warning of the preamble")
    twice(a)
    ok = ok and a.get().tolist() == [7, 1, 1, 1]
outcomes = []
if sys.argv[4] != "-":
    outcomes = sorted({r.outcome for r in comp.history.records})
print(json.dumps({"compiler": shown.count("CompilerWarning"), "ok": ok,
                  "outcomes": outcomes}))
"""


def _count(mode: str, pocl: str, cache: str) -> dict:
    """The child's counts: ``cache`` is clmagic's folder for the hook, ``-`` for no hook."""
    env = child_env(PYOPENCL_COMPILER_OUTPUT="0")
    env.pop("PYTHONWARNINGS", None)
    proc = subprocess.run([sys.executable, "-c", f"WARNS = {WARNS!r}\n" + CHILD, mode,
                           str(CONTEXTS), pocl, cache], env=env, capture_output=True, text=True,
                          timeout=240)
    return last_json(proc)


def test_the_hook_warns_as_pyopencl_does_at_every_build(pocl, cache_dir):
    _count("always", pocl, "-")  # POCL's own cache warm for pyopencl's path
    for mode in ("always", "default"):
        folder = str(cache_dir / mode)
        plain = _count(mode, pocl, "-")
        cold = _count(mode, pocl, folder)
        warm = _count(mode, pocl, folder)
        assert plain["ok"] and cold["ok"] and warm["ok"]
        assert "MISS" in cold["outcomes"] and set(warm["outcomes"]) <= {"HIT", "MEMORY"}
        assert plain["compiler"] >= 1  # the sources do warn on pyopencl's path
        # POCL's own cache hands the log back on pyopencl's warm path: so does every HIT
        assert warm["compiler"] == cold["compiler"] == plain["compiler"], (mode, plain, cold,
                                                                           warm)
        if mode == "always":  # one a build: two programs in each context
            assert plain["compiler"] == 2 * CONTEXTS
