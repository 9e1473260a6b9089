"""clmagic: ``%%clkernel`` for Jupyter, with a persistent, inspectable OpenCL binary cache.

Library use, no IPython needed::

    import clmagic
    result = clmagic.build(source, options="-O3", device="pocl")
    result.outcome, result.ms, result.kernels["saxpy"]
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from clmagic._version import __version__

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from clmagic.cache.bundle import BundleReport, ImportReport, export_bundle, import_bundle
    from clmagic.cache.checker.findings import CheckReport, Finding
    from clmagic.cache.checker.run import check_kernel
    from clmagic.cache.manage import CacheInfo, Removed, cache_info, clear_cache, stats
    from clmagic.config import Settings
    from clmagic.entry import Entry, EntryMeta, Usage
    from clmagic.errors import BuildError, ClmagicError, CorruptEntry, DeviceError, OptionsError
    from clmagic.opencl.devices import DeviceInfo, list_devices, resolve_device
    from clmagic.opencl.facts import ArgFacts, KernelFacts
    from clmagic.opencl.timing import Timing, time_kernel
    from clmagic.outcome import Outcome
    from clmagic.process.session import Using, get_compiler, reset, use
    from clmagic.show.check import check_frame
    from clmagic.show.frames import cache_frame, history_frame
    from clmagic.show.plot import plot_history
    from clmagic.show.sweep import kernels_frame, plot_sweep, sweep
    from clmagic.show.widget import CacheWidget
    from clmagic.store import (
        DirectoryStore,
        LayeredStore,
        RedisStore,
        SQLiteStore,
        Store,
        open_store,
    )
    from clmagic.trip.compiler import BuildResult, Compiler
    from clmagic.trip.records import Stats

# The public names, each with the module that defines it: the one list (``__all__`` is drawn from
# it, and ``tests/test_public.py`` checks the imports above, which are for the type checker only,
# name the same modules). Every name is loaded on first use, so ``import clmagic`` and
# ``%load_ext clmagic`` stay light: the build path (pyopencl, hashing, the stores) is imported by
# the first build, pandas, matplotlib, ipywidgets and sqlite3 only by what draws or stores with
# them.
_LAZY = {
    **dict.fromkeys(("Using", "get_compiler", "reset", "use"), "process.session"),
    **dict.fromkeys(("BuildResult", "Compiler"), "trip.compiler"),
    "Settings": "config",
    **dict.fromkeys(("DeviceInfo", "list_devices", "resolve_device"), "opencl.devices"),
    **dict.fromkeys(("Entry", "EntryMeta", "Usage"), "entry"),
    **dict.fromkeys(("BuildError", "ClmagicError", "CorruptEntry", "DeviceError",
                     "OptionsError"), "errors"),
    "Outcome": "outcome",
    "Stats": "trip.records",
    **dict.fromkeys(("Store", "DirectoryStore", "SQLiteStore", "RedisStore", "LayeredStore",
                     "open_store"), "store"),
    **dict.fromkeys(("cache_frame", "history_frame"), "show.frames"),
    "plot_history": "show.plot",
    "CacheWidget": "show.widget",
    **dict.fromkeys(("KernelFacts", "ArgFacts"), "opencl.facts"),
    **dict.fromkeys(("time_kernel", "Timing"), "opencl.timing"),
    **dict.fromkeys(("sweep", "plot_sweep", "kernels_frame"), "show.sweep"),
    **dict.fromkeys(("export_bundle", "import_bundle", "BundleReport", "ImportReport"),
                    "cache.bundle"),
    **dict.fromkeys(("cache_info", "CacheInfo", "clear_cache", "Removed", "stats"),
                    "cache.manage"),
    "check_kernel": "cache.checker.run",
    **dict.fromkeys(("CheckReport", "Finding"), "cache.checker.findings"),
    "check_frame": "show.check",
}
#: the functions defined here
_HERE = ("build", "install", "uninstall", "load_ipython_extension", "unload_ipython_extension")
__all__ = [*_HERE, *_LAZY]


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    elif not name.startswith("__"):  # a subpackage not imported yet: ``clmagic.opencl``
        try:
            value = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def build(source: str | bytes, options: str | Iterable[str] | None = None, device: object = None,
          **kwargs: Any) -> BuildResult:
    """Build OpenCL C ``source`` through the cache; see :meth:`Compiler.build`."""
    from clmagic.process.session import get_compiler

    return get_compiler().build(source, options, device, **kwargs)


def install(compiler: Compiler | None = None) -> bool:
    """Build every ``pyopencl.Program(...).build()`` from source in this process through
    clmagic's cache (``compiler``, else the process-wide one); see :mod:`clmagic.process.hook`.
    Returns ``False`` when it was already installed."""
    from clmagic.process.hook import install as _install
    from clmagic.process.session import get_compiler

    return _install(compiler if compiler is not None else get_compiler)


def uninstall() -> bool:
    """Give pyopencl its own ``Program.build`` back; ``False`` when nothing was installed."""
    from clmagic.process.hook import uninstall as _uninstall

    return _uninstall()


def load_ipython_extension(ip: InteractiveShell) -> None:
    """``%load_ext clmagic``: register the magics (configurable with ``%config CLMagics``);
    making them gives the shell's formatters the views of clmagic's results and reports
    (:func:`clmagic.show.views.register`)."""
    from clmagic.ipython.magics import CLMagics

    magics = CLMagics(shell=ip)
    ip.register_magics(magics)
    # saves run in the background while the user reads the result; a cell waits for those
    # of the cells before it, so whatever it reads of the store (files, SQL) is complete
    if _flush_before_cell not in ip.events.callbacks["pre_run_cell"]:
        ip.events.register("pre_run_cell", _flush_before_cell)
    # IPython's list is inferred from ``[self]`` as a list of shells; it holds any Configurable
    configurables = cast("list[object]", ip.configurables)
    if magics not in configurables:
        configurables.append(magics)


def _flush_before_cell(info: object = None) -> None:
    # None before the first build: nothing to wait for
    saving = sys.modules.get(f"{__name__}.trip.background")
    if saving is not None:
        saving.flush_all()


def unload_ipython_extension(ip: InteractiveShell) -> None:
    """``%unload_ext clmagic``: nothing to tear down; kept for symmetry."""


def _show_in_ipython() -> None:
    """In a running IPython, give its formatters the views of clmagic's results and reports, so
    ``clmagic.build(...)`` as a cell's value shows its line without ``%load_ext clmagic``. The
    data types import no renderer; the views are registered by type name, so this imports
    nothing of the build trip (only :mod:`clmagic.show.views`, a table of names)."""
    ipython = sys.modules.get("IPython")  # not imported: not in IPython, nothing to do
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None:
        from clmagic.show.views import register

        register(shell)


_show_in_ipython()
