"""A pytest plugin for ``bench_pyopencl_suite.py``: splits a run of pyopencl's own test files into
phases, without importing clmagic (a plain run stays plain).

Loaded with ``-p suite_phases`` (``benchmarks/`` on ``PYTHONPATH``). At ``pytest_configure`` it
wraps the context factory of pyopencl's test fixture (``pyopencl.tools._ContextFactory``: it
lets go of earlier tests' objects, ``clear_first_arg_caches()`` and a collection, then makes the
test's context; a nanobind class's ``__init__`` cannot be wrapped) and whatever
``pyopencl.Program.build`` is then (under ``clmagic run`` the hook is in place already), and
writes to ``$SUITE_PHASES_OUT`` at the end: the run's wall time from configure to unconfigure,
the time spent making contexts (the factory's whole call) and inside ``Program.build``, and how
many of each.

With ``SUITE_PHASES_COUNT=1`` (a counting pass, not timed) it also says, at each new context
(after the factory's collection), how many contexts made earlier in the run are still alive: it
holds one reference of its own to each context (``clRetainContext``) and reads
``CL_CONTEXT_REFERENCE_COUNT``; a context whose only reference is that one is dead for everybody
else, and is let go there.
"""

from __future__ import annotations

import ctypes
import json
import os
import time
from typing import Any

import pyopencl as cl

_CL_CONTEXT_REFERENCE_COUNT = 0x1080
_phases: dict[str, Any] = {"context_s": 0.0, "contexts": 0, "build_s": 0.0, "builds": 0,
                           "alive": []}
_held: list[int] = []  # counting pass: context handles with a reference of ours
_lib: ctypes.CDLL | None = None


def _loader() -> ctypes.CDLL:
    """The OpenCL ICD loader pyopencl loaded (read from this process's memory map)."""
    global _lib
    if _lib is None:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            path = next(ln.split(None, 5)[-1].strip() for ln in fh if "libOpenCL" in ln)
        lib = ctypes.CDLL(path)
        lib.clGetContextInfo.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_size_t,
                                         ctypes.c_void_p, ctypes.c_void_p]
        lib.clRetainContext.argtypes = [ctypes.c_void_p]
        lib.clReleaseContext.argtypes = [ctypes.c_void_p]
        _lib = lib
    return _lib


def _count_alive() -> int:
    """How many held contexts someone besides this plugin still holds (the others let go)."""
    lib, alive, kept = _loader(), 0, []
    for handle in _held:
        count = ctypes.c_uint()
        lib.clGetContextInfo(handle, _CL_CONTEXT_REFERENCE_COUNT, ctypes.sizeof(count),
                             ctypes.byref(count), None)
        if count.value > 1:
            alive += 1
            kept.append(handle)
        else:
            lib.clReleaseContext(handle)
    _held[:] = kept
    return alive


def _wrap_context(counting: bool) -> None:
    import gc

    import pyopencl.tools as tools

    original = tools._ContextFactory.__call__

    def __call__(self: Any) -> cl.Context:
        if counting:  # what the factory does first, then the count
            tools.clear_first_arg_caches()
            gc.collect()
            _phases["alive"].append(_count_alive())
        t = time.perf_counter()
        ctx = original(self)
        _phases["context_s"] += time.perf_counter() - t
        _phases["contexts"] += 1
        if counting:
            _loader().clRetainContext(ctx.int_ptr)
            _held.append(ctx.int_ptr)
        return ctx

    tools._ContextFactory.__call__ = __call__  # type: ignore[method-assign]


def _wrap_build() -> None:
    original = cl.Program.build

    def build(self: cl.Program, *args: Any, **kwargs: Any) -> cl.Program:
        t = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            _phases["build_s"] += time.perf_counter() - t
            _phases["builds"] += 1

    cl.Program.build = build  # type: ignore[method-assign]


def pytest_configure(config: Any) -> None:
    _wrap_context(os.environ.get("SUITE_PHASES_COUNT") == "1")
    _wrap_build()
    _phases["t0"] = time.perf_counter()


def pytest_unconfigure(config: Any) -> None:
    _phases["wall_s"] = time.perf_counter() - _phases.pop("t0")
    out = os.environ.get("SUITE_PHASES_OUT")
    if out:
        with open(out, "w", encoding="utf-8") as fh:
            json.dump(_phases, fh)
