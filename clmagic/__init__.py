"""clmagic: ``%%clkernel`` for Jupyter, with a persistent, inspectable OpenCL binary cache.

Library use, no IPython needed::

    import clmagic
    result = clmagic.build(source, options="-O3", device="pocl")
    result.outcome, result.ms, result.kernels["saxpy"]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from ._session import Using, get_compiler, reset, use
from ._version import __version__
from .compiler import BuildResult, Compiler
from .config import Settings
from .devices import DeviceInfo, list_devices, resolve_device
from .entry import Entry, EntryMeta, Usage
from .errors import BuildError, ClmagicError, CorruptEntry, DeviceError, OptionsError
from .records import Outcome, Stats
from .store import DirectoryStore, Store, open_store

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

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

# Names loaded on first use only, so ``import clmagic`` and ``%load_ext clmagic`` stay light:
# their modules import pandas, matplotlib, ipywidgets or sqlite3, or are not on the build path.
_LAZY = {
    "cache_frame": "frames",
    "history_frame": "frames",
    "plot_history": "plot",
    "CacheWidget": "widget",
    "export_bundle": "bundle",
    "import_bundle": "bundle",
    "BundleReport": "bundle",
    "ImportReport": "bundle",
    "cache_info": "manage",
    "CacheInfo": "manage",
    "clear_cache": "manage",
    "Removed": "manage",
    "stats": "manage",
    "SQLiteStore": "store",
    "RedisStore": "store",
    "LayeredStore": "store",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def build(source: str | bytes, options: str | Iterable[str] | None = None, device: object = None,
          **kwargs: Any) -> BuildResult:
    """Build OpenCL C ``source`` through the cache; see :meth:`Compiler.build`."""
    return get_compiler().build(source, options, device, **kwargs)


def install(compiler: Compiler | None = None) -> bool:
    """Build every ``pyopencl.Program(...).build()`` from source in this process through
    clmagic's cache (``compiler``, else the process-wide one); see :mod:`clmagic.hook`.
    Returns ``False`` when it was already installed."""
    from .hook import install as _install

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
    from .saving import flush_all

    flush_all()


def unload_ipython_extension(ip: InteractiveShell) -> None:
    """``%unload_ext clmagic``: nothing to tear down; kept for symmetry."""
