"""Stores: where entries persist. ``open_store`` picks the backend from a location string."""

from __future__ import annotations

from .base import Store
from .directory import DirectoryStore

__all__ = ["Store", "DirectoryStore", "open_store"]


def open_store(location: str | None, trust: bool = False) -> Store | None:
    """The store for ``location`` (a folder path), or ``None`` for memory only.

    A location that cannot be used gives ``None`` after one warning: the cache then lives in
    memory only, and nothing crashes. ``trust`` accepts a folder that is world-writable or
    another user's (``CLMAGIC_CACHE_TRUST=1``).
    """
    if location is None:
        return None
    return DirectoryStore.open(location, trust=trust)
