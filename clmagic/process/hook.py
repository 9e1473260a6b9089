"""Every pyopencl program through clmagic's cache: :func:`install` / :func:`uninstall`.

``install()`` puts a function in place of ``pyopencl.Program.build``. A program made from source
(``pyopencl.Program(ctx, src).build(...)``: pyopencl.array, elementwise, reduction, scan,
silx, pyFAI, your own code) is then built through the compiler's key, store and records, and
handed back as the same ``pyopencl.Program``, its ``_prg`` built: kernels, ``all_kernels()``,
``get_info`` and ``get_build_info`` work as before. What is left to pyopencl's own ``build``:

- programs made from binaries, IL/SPIR-V or an existing ``_Program`` (already created);
- ``cache_dir=False`` (argument or ``context.cache_dir``) and ``PYOPENCL_NO_CACHE``: the caller
  asked for no binary cache;
- whatever clmagic cannot key or compile (bytes that are not UTF-8, a source of only comments,
  devices it does not know, an unexpected fault of the cache: that one with a warning);
- a build error: pyopencl's build then runs again, so the caller gets pyopencl's own exception
  with the same log (a failing build costs two compilations, a working one none more);
- a build asked for from inside a hooked build on the same thread (no recursion).

The driver receives pyopencl's option string unchanged (its include folder, its per-platform
options, ``PYOPENCL_BUILD_OPTIONS``); pyopencl's include folder enters the key through the
header rules (:mod:`clmagic.key.includes`). Each record names its origin: the module that called
``build`` (``pyopencl.elementwise``, ``silx.opencl.processing``, ``__main__``).
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import pyopencl as cl

from clmagic.trip.compiler import Compiler, ProgramBuild
from clmagic._warn import warn_once
from clmagic.errors import ClmagicError
from clmagic.key.options import exact_options
from clmagic.outcome import Outcome

__all__ = ["install", "uninstall", "installed", "origin_of"]

_lock = threading.Lock()
_local = threading.local()
_original: Callable[..., Any] | None = None
_compiler_of: Callable[[], Compiler] | None = None


def installed() -> bool:
    """Whether ``pyopencl.Program.build`` goes through clmagic now."""
    return _original is not None


def install(compiler: Compiler | Callable[[], Compiler]) -> bool:
    """Send every ``pyopencl.Program(...).build()`` from source through ``compiler`` (or the
    compiler a callable returns at each build, e.g. the process's). Returns ``False`` when the
    hook was already in place (it then uses the compiler given here)."""
    global _original, _compiler_of
    getter = compiler if callable(compiler) else (lambda: compiler)
    with _lock:
        _compiler_of = getter
        if _original is not None:
            return False
        _original = cl.Program.__dict__["build"]
        cl.Program.build = _hooked(_original)  # type: ignore[method-assign]
        return True


def uninstall() -> bool:
    """Give pyopencl its own ``Program.build`` back; ``False`` when the hook was not in place."""
    global _original, _compiler_of
    with _lock:
        if _original is None:
            return False
        cl.Program.build = _original  # type: ignore[method-assign]
        _original = _compiler_of = None
        return True


def origin_of(frame: FrameType | None) -> str:
    """The module that asked for a build: the first frame, from ``frame`` outwards, that is not
    pyopencl's ``Program`` itself (``pyopencl/__init__``) or clmagic."""
    while frame is not None:
        name = frame.f_globals.get("__name__") or "?"
        if name != "pyopencl" and name != "clmagic" and not name.startswith("clmagic."):
            return name
        frame = frame.f_back
    return "?"


def _hooked(original: Callable[..., cl.Program]) -> Callable[..., cl.Program]:
    @functools.wraps(original)
    def build(self: cl.Program, options: Any = None, devices: Any = None,
              cache_dir: Any = None) -> cl.Program:
        getter = _compiler_of
        if getter is None or getattr(_local, "busy", False) or not _from_source(self, cache_dir):
            return original(self, options, devices, cache_dir)
        _local.busy = True
        try:
            t0 = time.perf_counter()
            built = _through_cache(self, options, devices, getter(), sys._getframe(1))
        except ClmagicError:  # not cacheable, or a build error: pyopencl says it its own way
            built = None
        except Exception as exc:  # a fault of the cache must never cost the caller's build
            warn_once(f"the pyopencl hook could not use the cache ({exc!r}); building without it")
            built = None
        finally:
            _local.busy = False
        if built is None:
            return original(self, options, devices, cache_dir)
        self._prg = built.program._get_prg()
        cached = built.outcome in (Outcome.HIT, Outcome.MEMORY)
        descr = "clmagic cache retrieval" if cached else "clmagic source build"
        self._build_duration_info = (descr, cached, time.perf_counter() - t0)
        if built.build_log:
            cl.compiler_output("Build succeeded, but resulted in non-empty logs:\n"
                               + built.build_log)
        return self

    build.__clmagic_hook__ = True  # type: ignore[attr-defined]
    return build


def _from_source(prg: cl.Program, cache_dir: Any) -> bool:
    """A program made from source, not built yet, whose caller did not turn caching off (with
    pyopencl's private attributes as this pyopencl has them; any other: not ours to build)."""
    try:
        if prg._prg is not None or not hasattr(prg, "_source"):
            return False
        if cache_dir is None:
            cache_dir = getattr(prg._context, "cache_dir", None)
    except AttributeError:
        return False
    return cache_dir is not False and not getattr(cl, "_PYOPENCL_NO_CACHE", False)


def _through_cache(prg: cl.Program, options: Any, devices: Any, compiler: Compiler,
                   caller: FrameType | None) -> ProgramBuild:
    ctx = prg._context
    options_bytes, include_path = prg._process_build_options(ctx, options)
    opts = exact_options(options_bytes.decode("utf-8"), [d for d in include_path if d != "."])
    return compiler.build_program(ctx, prg._source, opts, devices, origin=origin_of(caller))
