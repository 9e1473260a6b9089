"""Stores: where entries persist. ``open_store`` picks the backend from a location string:
a path ending in ``.db``/``.sqlite``/``.sqlite3`` → :class:`SQLiteStore`, ``redis://`` or
``rediss://`` → :class:`RedisStore`, any other path → :class:`DirectoryStore`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from clmagic.config import REDIS_SCHEMES
from clmagic.config import SQLITE_SUFFIXES as SUFFIXES
from clmagic.store.base import Store
from clmagic.store.directory.store import DirectoryStore

if TYPE_CHECKING:
    from clmagic.config import Settings
    from clmagic.store.layered import LayeredStore
    from clmagic.store.redis import RedisStore
    from clmagic.store.sqlite.store import SQLiteStore

__all__ = ["Store", "DirectoryStore", "SQLiteStore", "LayeredStore", "RedisStore", "open_store",
           "store_for", "SUFFIXES"]

# backends other than the directory are imported when first used (sqlite3, redis cost start-up)
_LAZY = {"SQLiteStore": "sqlite.store", "RedisStore": "redis", "LayeredStore": "layered"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_store(location: str | None, ttl: int | None = None, trust: bool = False,
               max_size: int = 0) -> Store | None:
    """The store for ``location``, or ``None`` for memory only.

    A location that cannot be used gives ``None`` after one warning: the cache then lives in
    memory only, and nothing crashes. ``ttl`` (seconds) applies to Redis stores; ``trust``
    accepts a folder or file that is world-writable or another user's (``CLMAGIC_CACHE_TRUST=1``);
    ``max_size`` (bytes, 0 = none) bounds a directory or SQLite store (a Redis server's limit is
    its own ``maxmemory`` with ``maxmemory-policy allkeys-lru``).
    """
    if location is None:
        return None
    if location.startswith(REDIS_SCHEMES):
        from clmagic.store.redis import RedisStore

        return RedisStore.open(location, ttl=ttl)
    store: Store | None
    if location.lower().endswith(SUFFIXES):
        from clmagic.store.sqlite.store import SQLiteStore

        store = SQLiteStore.open(location, trust=trust)
    else:
        store = DirectoryStore.open(location, trust=trust)
    if store is not None:
        store.max_size = max_size
    return store


def store_for(settings: Settings) -> Store | None:
    """The store the settings ask for: the cache location, with the ``CLMAGIC_REMOTE`` store
    behind it when one is set (:class:`LayeredStore`)."""
    local = open_store(settings.cache, ttl=settings.remote_ttl, trust=settings.trust,
                       max_size=settings.max_size)
    remote = open_store(settings.remote, ttl=settings.remote_ttl) if settings.remote else None
    for store in (local, remote):
        if store is not None:
            store.secret = settings.secret
    if local is None or remote is None:
        return local or remote
    from clmagic.store.layered import LayeredStore

    return LayeredStore(local, remote)
