"""The process's compiler: one per process, made from the environment on first use, so that
no module needs the package root to reach it.

Generations: the compiler is replaced when the variables that choose where and how it caches
change (``%env CLMAGIC_CACHE_DIR=…`` or ``os.environ`` in a running kernel), on :func:`reset`,
and its store when :func:`use` picks another. A new generation serves nothing from the old one's
memory; the session's history goes on (except after :func:`reset`, which starts over).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clmagic.config import Settings
    from clmagic.store import Store
    from clmagic.trip.compiler import Compiler

__all__ = ["get_compiler", "reset", "or_default", "use", "Using", "WATCHED"]

#: the variables whose change starts a new generation (read on every use: a few µs)
WATCHED = ("CLMAGIC_CACHE_DIR", "CLMAGIC_REMOTE", "CLMAGIC_REMOTE_TTL", "CLMAGIC_CACHE_TRUST",
           "CLMAGIC_RECORD", "CLMAGIC_CACHE_DEBUG", "CLMAGIC_DEVICE", "PYOPENCL_CTX",
           "CLMAGIC_CACHE_MAX_SIZE", "CLMAGIC_MEMORY_MAX",
           "CLMAGIC_HISTORY_MAX")

_compiler: Compiler | None = None
_seen: tuple[object, ...] = ()
# os.environ's own store, read with its encoded keys: 1.6 µs for the eight variables against
# 18 µs through os.environ.get (which encodes and decodes each); the plain way where absent
_DATA: dict[object, object] | None = getattr(os.environ, "_data", None)
_ENCODE = getattr(os.environ, "encodekey", None)
_KEYS = tuple(_ENCODE(name) for name in WATCHED) if _DATA is not None and _ENCODE else ()


def _environment() -> tuple[object, ...]:
    if _KEYS and _DATA is not None:
        return tuple(map(_DATA.get, _KEYS))
    return tuple(os.environ.get(name) for name in WATCHED)


def get_compiler() -> Compiler:
    """The process-wide compiler: made from the environment on first use, and made again
    (a new generation, the history kept) when a variable of :data:`WATCHED` has changed."""
    global _compiler, _seen
    now = _environment()
    if _compiler is None or now != _seen:
        from clmagic.trip.compiler import Compiler

        old, _compiler, _seen = _compiler, Compiler(), now
        if old is not None:
            _compiler.history.carry(old.history)
            if old.store is not None:
                old.store.close()
    return _compiler


def or_default(compiler: Compiler | None) -> Compiler:
    """``compiler``, or the process-wide one when it is ``None`` (what every library function
    with an optional ``compiler`` argument uses)."""
    return compiler if compiler is not None else get_compiler()


def reset(settings: Settings | None = None) -> Compiler:
    """Start over: a new process-wide compiler (settings from the environment unless given),
    with an empty history; the magics use it from their next cell."""
    from clmagic.trip.compiler import Compiler

    global _compiler, _seen
    _compiler, _seen = Compiler(settings), _environment()
    return _compiler


@dataclass(frozen=True)
class Using:
    """Which store the compiler uses now (what :func:`use` answers)."""

    kind: str
    location: str
    store: Store | None = dataclasses.field(repr=False, compare=False, default=None)

    def __str__(self) -> str:
        if self.store is None:
            return "clmagic: now caching in memory only (no store)"
        return f"clmagic: now using the {self.kind} cache at {self.location}"

    __repr__ = __str__


def use(location: str | os.PathLike[str] | None, compiler: Compiler | None = None) -> Using:
    """Switch the compiler (the process-wide one unless given) to the store at ``location``,
    read as ``CLMAGIC_CACHE_DIR`` is (a folder, a ``.db`` file, a ``redis://`` URL, ``off`` or
    ``None`` for memory only; ``CLMAGIC_REMOTE`` still goes behind it). A new generation:
    nothing in memory is served afterwards. Returns which store is in use now."""
    from clmagic.config import Settings
    from clmagic.store import store_for

    c = or_default(compiler)
    raw = "off" if location is None else os.fspath(location)
    chosen = Settings.from_env({"CLMAGIC_CACHE_DIR": raw})
    settings = dataclasses.replace(c.settings, cache=chosen.cache)
    store = store_for(settings)
    old = c.store
    c.settings, c.store = settings, store
    if old is not None and old is not store:
        old.close()
    if store is None:
        return Using("none", "memory only")
    return Using(store.kind, store.location, store)
