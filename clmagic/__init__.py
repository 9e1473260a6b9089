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

from ._version import __version__

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ._session import Using, get_compiler, reset, use
    from .bundle import BundleReport, ImportReport, export_bundle, import_bundle
    from .compiler import BuildResult, Compiler
    from .config import Settings
    from .devices import DeviceInfo, list_devices, resolve_device
    from .entry import Entry, EntryMeta, Usage
    from .errors import BuildError, ClmagicError, CorruptEntry, DeviceError, OptionsError
    from .frames import cache_frame, history_frame
    from .manage import CacheInfo, Removed, cache_info, clear_cache, stats
    from .plot import plot_history
    from .records import Outcome, Stats
    from .store import DirectoryStore, LayeredStore, RedisStore, SQLiteStore, Store, open_store
    from .widget import CacheWidget

__all__ = [
    "build",
    "install",
    "uninstall",
    "get_compiler",
    "reset",
    "use",
    "Using",
    "Compiler",
    "BuildResult",
    "Settings",
    "DeviceInfo",
    "list_devices",
    "resolve_device",
    "Entry",
    "EntryMeta",
    "Usage",
    "Outcome",
    "cache_frame",
    "history_frame",
    "stats",
    "Stats",
    "cache_info",
    "CacheInfo",
    "clear_cache",
    "Removed",
    "plot_history",
    "CacheWidget",
    "Store",
    "DirectoryStore",
    "SQLiteStore",
    "RedisStore",
    "LayeredStore",
    "open_store",
    "export_bundle",
    "import_bundle",
    "BundleReport",
    "ImportReport",
    "ClmagicError",
    "BuildError",
    "DeviceError",
    "OptionsError",
    "CorruptEntry",
    "load_ipython_extension",
    "unload_ipython_extension",
]

# Every name is loaded on first use, so ``import clmagic`` and ``%load_ext clmagic`` stay light:
# the build path (pyopencl, hashing, the stores) is imported by the first build, pandas,
# matplotlib, ipywidgets and sqlite3 only by what draws or stores with them.
_LAZY = {
    **dict.fromkeys(("Using", "get_compiler", "reset", "use"), "_session"),
    **dict.fromkeys(("BuildResult", "Compiler"), "compiler"),
    "Settings": "config",
    **dict.fromkeys(("DeviceInfo", "list_devices", "resolve_device"), "devices"),
    **dict.fromkeys(("Entry", "EntryMeta", "Usage"), "entry"),
    **dict.fromkeys(("BuildError", "ClmagicError", "CorruptEntry", "DeviceError",
                     "OptionsError"), "errors"),
    **dict.fromkeys(("Outcome", "Stats"), "records"),
    **dict.fromkeys(("Store", "DirectoryStore", "SQLiteStore", "RedisStore", "LayeredStore",
                     "open_store"), "store"),
    **dict.fromkeys(("cache_frame", "history_frame"), "frames"),
    "plot_history": "plot",
    "CacheWidget": "widget",
    **dict.fromkeys(("export_bundle", "import_bundle", "BundleReport", "ImportReport"),
                    "bundle"),
    **dict.fromkeys(("cache_info", "CacheInfo", "clear_cache", "Removed", "stats"), "manage"),
}


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    elif not name.startswith("__"):  # a submodule not imported yet: ``clmagic.devices``
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
    from ._session import get_compiler

    return get_compiler().build(source, options, device, **kwargs)


def install(compiler: Compiler | None = None) -> bool:
    """Build every ``pyopencl.Program(...).build()`` from source in this process through
    clmagic's cache (``compiler``, else the process-wide one); see :mod:`clmagic.hook`.
    Returns ``False`` when it was already installed."""
    from .hook import install as _install

    from ._session import get_compiler

    return _install(compiler if compiler is not None else get_compiler)


def uninstall() -> bool:
    """Give pyopencl its own ``Program.build`` back; ``False`` when nothing was installed."""
    from .hook import uninstall as _uninstall

    return _uninstall()


def load_ipython_extension(ip: InteractiveShell) -> None:
    """``%load_ext clmagic``: register the magics (configurable with ``%config CLMagics``)."""
    from .magics import CLMagics

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
    saving = sys.modules.get(f"{__name__}.saving")  # nothing to wait for before a first build
    if saving is not None:
        saving.flush_all()


def unload_ipython_extension(ip: InteractiveShell) -> None:
    """``%unload_ext clmagic``: nothing to tear down; kept for symmetry."""
