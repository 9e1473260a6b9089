"""The store contract every backend fulfils."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator

from ..entry import Entry

__all__ = ["Store"]


class Store(ABC):
    """A persistent home for entries, addressed by (device fingerprint, key).

    ``get`` raises :class:`~clmagic.errors.CorruptEntry` for an entry that fails its checks and
    returns ``None`` for an absent one. ``put`` returns whether the entry was stored; a store
    that cannot write says so once (``writable`` turns false, ``reason`` says why) and never
    raises for it.
    """

    #: short backend name: "directory", "sqlite", "redis", ...
    kind: str = "store"
    writable: bool = True
    reason: str = ""

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the entries live (a folder, a file, a URL)."""

    @abstractmethod
    def get(self, fingerprint: str, key: str) -> Entry | None:
        """The verified entry with its binary, or ``None``."""

    @abstractmethod
    def put(self, entry: Entry) -> bool:
        """Store ``entry`` (replacing one under the same key); ``True`` when stored."""

    def put_many(self, entries: Iterable[Entry]) -> int:
        """Store several entries (one transaction or pipeline where the backend has one);
        returns how many were stored."""
        return sum(self.put(e) for e in entries)

    @abstractmethod
    def delete(self, fingerprint: str, key: str) -> bool:
        """Remove one entry; ``True`` when there was one."""

    @abstractmethod
    def entries(self, fingerprint: str | None = None) -> Iterator[Entry]:
        """Metadata of every valid entry (binaries not read), optionally of one device.

        Backends that track use add ``meta["hits"]`` (int), ``meta["last_used"]`` (epoch
        seconds) and ``meta["stored_bytes"]`` (bytes the entry takes in the store).
        """

    def record_hit(self, fingerprint: str, key: str) -> None:
        """Count one hit of an entry and set its last-used time, without rewriting the entry
        (the binary is never rewritten on a hit). Default: not tracked."""
        return None

    @abstractmethod
    def clear(self, fingerprint: str | None = None) -> tuple[int, int]:
        """Remove every entry (of one device); returns (entries removed, bytes freed)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.location}>"
