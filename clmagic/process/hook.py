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
- a build asked for from inside a hooked build on the same thread (no recursion);
- a second ``build`` (other options, other devices, the same again) or a ``compile`` of a program
  the hook built: the program is first given a fresh one made from its source, so pyopencl
  builds that, as it would have without the hook (a program loaded from a binary keeps its old
  code whatever the new options).

The hook holds nothing of the caller's: no program is remembered across builds (what is, is the
store's bytes), so a context is freed when the caller lets go of it, as without clmagic.

After a hooked build the program is in the state pyopencl's own build leaves it in: where
pyopencl would have gone through its binary cache (Oclgrind, most GPUs) it deletes the program's
``_context``, so a second build raises ``AttributeError`` there as it does without clmagic. The
pyopencl internals this relies on are named once, in :mod:`clmagic.opencl.pyopencl_program`.

The driver receives pyopencl's option string unchanged (its include folder, its per-platform
options, ``PYOPENCL_BUILD_OPTIONS``); pyopencl's include folder enters the key through the
header rules (:mod:`clmagic.key.includes`). Each record names its origin: the module that called
``build`` (``pyopencl.elementwise``, ``silx.opencl.processing``, ``__main__``).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import pyopencl as cl
from pyopencl.characterize import has_src_build_cache

from clmagic._warn import warn_once
from clmagic.errors import ClmagicError
from clmagic.key.options import exact_options
from clmagic.opencl import pyopencl_program as internals
from clmagic.outcome import Outcome
from clmagic.trip.compiler import Compiler, ProgramBuild

__all__ = ["install", "uninstall", "installed", "origin_of"]

_lock = threading.Lock()
_local = threading.local()
#: pyopencl's own ``Program`` methods while the hook is in place (their names: ``_WRAPPERS``)
_originals: dict[str, Any] = {}
_compiler_of: Callable[[], Compiler] | None = None


def installed() -> bool:
    """Whether ``pyopencl.Program.build`` goes through clmagic now."""
    return bool(_originals)


def install(compiler: Compiler | Callable[[], Compiler]) -> bool:
    """Send every ``pyopencl.Program(...).build()`` from source through ``compiler`` (or the
    compiler a callable returns at each build, e.g. the process's). Returns ``False`` when the
    hook was already in place (it then uses the compiler given here), and when this pyopencl
    lacks an internal the hook relies on (said once: every build is then pyopencl's own).

    ``Program.compile`` and ``get_build_info`` are wrapped too, for the programs the hook built
    only: ``compile`` compiles the program's own source, as it would without the hook, and the
    build log is the one clmagic kept (see :mod:`clmagic.opencl.pyopencl_program`)."""
    global _compiler_of
    getter = compiler if callable(compiler) else (lambda: compiler)
    gone = internals.missing()
    if gone:
        warn_once(f"the pyopencl hook is not installed: this pyopencl has no {', '.join(gone)} "
                  f"(checked against pyopencl {internals.CHECKED_AGAINST})")
        return False
    with _lock:
        _compiler_of = getter
        if _originals:
            return False
        for name, wrap in _WRAPPERS.items():
            _originals[name] = cl.Program.__dict__[name]
            setattr(cl.Program, name, wrap(_originals[name]))
        return True


def uninstall() -> bool:
    """Give pyopencl its own ``Program`` methods back; ``False`` when the hook was not in place."""
    global _compiler_of
    with _lock:
        if not _originals:
            return False
        for name, original in _originals.items():
            setattr(cl.Program, name, original)
        _originals.clear()
        _compiler_of = None
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
        if getter is None or getattr(_local, "busy", False) or internals.renew(self):
            return original(self, options, devices, cache_dir)  # a second build: pyopencl's
        source = _from_source(self, cache_dir)
        if source is None:
            return original(self, options, devices, cache_dir)
        _local.busy = True
        try:
            t0 = time.perf_counter()
            built = _through_cache(source, options, devices, getter(), sys._getframe(1))
        except ClmagicError:  # not cacheable, or a build error: pyopencl says it its own way
            built = None
        except Exception as exc:  # a fault of the cache must never cost the caller's build
            warn_once(f"the pyopencl hook could not use the cache ({exc!r}); building without it")
            built = None
        finally:
            _local.busy = False
        if built is None:
            return original(self, options, devices, cache_dir)
        cached = built.outcome in _LOADED
        descr = "clmagic cache retrieval" if cached else "clmagic source build"
        internals.adopt(self, built.program, (descr, cached, time.perf_counter() - t0),
                        built.build_log, loaded=cached)
        message = _log_message(source.context, devices, built, cached)
        if message:
            _report(message)
        return self

    build.__clmagic_hook__ = True  # type: ignore[attr-defined]
    return build


def _driver_cache_is_silent(platform_name: str) -> bool:
    """Whether pyopencl's warm path on this platform gets no build log back: NVIDIA's with its
    JIT cache on (the users' default). Measured on the H200 (driver 580, the test-suite-shaped
    workload of benchmarks/bench_suite.py): pyopencl's own runs and clmagic's first run, whose
    builds are the driver's, raise no CompilerWarning; a warm clmagic run that replayed each
    stored log once raised 66. With ``CUDA_CACHE_DISABLE=1`` the driver compiles again and
    says it again, so the stored log is reported as on other drivers."""
    return platform_name.startswith("NVIDIA") and os.environ.get("CUDA_CACHE_DISABLE") != "1"


def _report(text: str) -> None:
    """``pyopencl.compiler_output(text)``, from here: it warns ``stacklevel=3``, which names the
    hook's ``build`` (one place for every build, as pyopencl's own call names one line of
    pyopencl), not the caller's line (one place per call site: Python's default filter would
    show the warning once per call site, where pyopencl's path shows it once)."""
    cl.compiler_output(text)


def _log_message(context: cl.Context, devices: Any, built: ProgramBuild, cached: bool) -> str:
    """What pyopencl's own path would report of this build, in its words, or "": at every
    build with a log, as pyopencl does (a retrieval from its binary cache on a device without
    a source cache of its own (Oclgrind, most GPUs), else a source build (POCL, NVIDIA)), but
    for a program served from the cache where pyopencl's path gets no log back from the
    driver's own cache (NVIDIA's JIT cache: :func:`_driver_cache_is_silent`).
    ``pyopencl.compiler_output`` shows them with ``PYOPENCL_COMPILER_OUTPUT=1`` and a fixed line
    otherwise; it is called from one place here, so Python's default filter shows the fixed
    line once, as it does for pyopencl's one call site."""
    logs = [rec.build_log for rec in built.records]
    if not any(log.strip() for log in logs) or (
            cached and _driver_cache_is_silent(built.records[0].device.platform_name)):
        return ""  # the common case, decided before the devices are asked for
    devs = list(devices) if devices else list(context.devices)
    said = (75 * "=" + "\n").join(f"Build on {dev} succeeded, but said:\n\n{log}"
                                  for dev, log in zip(devs, logs, strict=False) if log.strip())
    if cached and not internals.no_cache() and not has_src_build_cache(context.devices[0]):
        return ("Built kernel retrieved from cache. Original from-source build had warnings:\n"
                + said)
    return "From-source build succeeded, but resulted in non-empty logs:\n" + said


def _compile_hooked(original: Callable[..., cl.Program]) -> Callable[..., cl.Program]:
    @functools.wraps(original)
    def compile(self: cl.Program, *args: Any, **kwargs: Any) -> cl.Program:
        internals.renew(self)  # a program the hook built compiles its source, as pyopencl's
        return original(self, *args, **kwargs)

    compile.__clmagic_hook__ = True  # type: ignore[attr-defined]
    return compile


def _build_info_hooked(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def get_build_info(self: cl.Program, *args: Any, **kwargs: Any) -> Any:
        log = internals.log_of(self, args[1]) if len(args) == 2 and not kwargs else None
        return original(self, *args, **kwargs) if log is None else log

    get_build_info.__clmagic_hook__ = True  # type: ignore[attr-defined]
    return get_build_info


def _info_hooked(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def get_info(self: cl.Program, param: Any) -> Any:
        answer = internals.info_of(self, param)
        return original(self, param) if answer is internals.ASK_DRIVER else answer

    get_info.__clmagic_hook__ = True  # type: ignore[attr-defined]
    return get_info


def _info_property(param: Any) -> Callable[[Any], property]:
    """``Program.source`` and the like read ``get_info`` as pyopencl bound it when it made them:
    each is given a property that reads the hooked ``get_info``."""
    def wrap(original: Any) -> property:
        def read(self: cl.Program) -> Any:
            return self.get_info(param)
        return property(read, doc=getattr(original, "__doc__", None))
    return wrap


#: what outcomes mean a program loaded from a stored binary
_LOADED = (Outcome.HIT, Outcome.MEMORY, Outcome.REKEYED)

_WRAPPERS: dict[str, Callable[[Any], Any]] = {
    "build": _hooked, "compile": _compile_hooked, "get_build_info": _build_info_hooked,
    "get_info": _info_hooked,
    **{name: _info_property(param) for name, param in internals.INFOS.items()}}


def _from_source(prg: cl.Program, cache_dir: Any) -> internals.Unbuilt | None:
    """A program made from source, not built yet, whose caller did not turn caching off."""
    source = internals.unbuilt(prg)
    if source is None:
        return None
    if cache_dir is None:
        cache_dir = getattr(source.context, "cache_dir", None)
    return None if cache_dir is False or internals.no_cache() else source


def _through_cache(source: internals.Unbuilt, options: Any, devices: Any, compiler: Compiler,
                   caller: FrameType | None) -> ProgramBuild:
    driver_options, include_path = internals.options_of(source.context, options)
    opts = exact_options(driver_options, [d for d in include_path if d != "."])
    return compiler.build_program(source.context, source.source, opts, devices,
                                  origin=origin_of(caller))
