"""The store contract every backend fulfils, and what they all share: writability (with the one
warning when writes go off), ``put`` in terms of ``put_many``, the name check, ``close`` and use
as a context manager."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from types import TracebackType

from ..config import warn_once
from ..entry import Entry
from ..errors import CorruptEntry

__all__ = ["Store", "is_hex", "valid_name"]

_HEX_CHARS = frozenset("0123456789abcdef")


def is_hex(name: str, length: int) -> bool:
    """``name`` is ``length`` lower-case hex digits."""
    return len(name) == length and _HEX_CHARS.issuperset(name)


def valid_name(fingerprint: str, key: str) -> bool:
    """A 16-hex-digit fingerprint and a 64-hex-digit key (what the cache ever files)."""
    return is_hex(fingerprint, 16) and is_hex(key, 64)


class Store(ABC):
    """A persistent home for entries, addressed by (device fingerprint, key).

    ``get`` raises :class:`~clmagic.errors.CorruptEntry` for an entry that fails its checks and
    returns ``None`` for an absent one. ``put`` returns whether the entry was stored; a store
    that cannot write says so once (``writable`` turns false, ``reason`` says why) and never
    raises for it. Entries handed out (``get`` and ``entries``) carry their
    :class:`~clmagic.entry.Usage`: hits, last use, stored bytes, and ``store`` = the backend.
    """

    #: short backend name: "directory", "sqlite", "redis", ...
    kind: str = "store"

    def __init__(self) -> None:
        self._writable = True
        self._reason = ""

    @property
    def writable(self) -> bool:
        """Whether entries are saved (false after a write failed, or for a read-only store)."""
        return self._writable

    @property
    def reason(self) -> str:
        """Why the last write did not happen (empty when nothing failed)."""
        return self._reason

    def _disable_writes(self, why: str, message: str | None = None) -> None:
        """Turn writes off for this process, with one warning (``message``, else a default)."""
        if self._writable:
            self._writable = False
            self._reason = why
            warn_once(message or f"cache {self.location}: writing failed ({why}); "
                      "hits are served, nothing more is saved in this process")

    def _check_name(self, fingerprint: str, key: str) -> None:
        """Refuse a name the cache never files (a path or key injection, a caller's bug)."""
        if not valid_name(fingerprint, key):
            raise ValueError(f"bad fingerprint/key {fingerprint!r}/{key!r}")

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the entries live (a folder, a file, a URL)."""

    @abstractmethod
    def get(self, fingerprint: str, key: str) -> Entry | None:
        """The verified entry with its binary and usage, or ``None``."""

    def put(self, entry: Entry) -> bool:
        """Store ``entry`` (replacing one under the same key); ``True`` when stored."""
        return self.put_many([entry]) == 1

    @abstractmethod
    def put_many(self, entries: Iterable[Entry]) -> int:
        """Store several entries (one transaction or pipeline where the backend has one);
        returns how many were stored. An entry without its binary is a ``ValueError``."""

    @abstractmethod
    def delete(self, fingerprint: str, key: str) -> bool:
        """Remove one entry; ``True`` when there was one."""

    @abstractmethod
    def entries(self, fingerprint: str | None = None) -> Iterator[Entry]:
        """Every valid entry with its usage, binaries not read, optionally of one device."""

    def find_code(self, fingerprint: str, code_key: str) -> Entry | None:
        """An entry of this device built from the same code (its ``meta.code_key`` is
        ``code_key``), verified and with its binary, or ``None``: what a REKEYED trip loads.
        Backends keep an index from code key to key; this default scans the listing."""
        if not is_hex(code_key, 64):
            return None
        for listed in self.entries(fingerprint):
            if listed.meta.code_key == code_key:
                found = self._code_target(fingerprint, code_key, listed.key)
                if found is not None:
                    return found
        return None

    def _code_target(self, fingerprint: str, code_key: str, key: object) -> Entry | None:
        """The entry ``key`` that an index names for ``code_key``, if it is there, intact and
        really of that code; ``None`` for a stale or damaged index (never an error: a rekey
        that cannot happen is a build)."""
        if not isinstance(key, str) or not valid_name(fingerprint, key):
            return None
        try:
            entry = self.get(fingerprint, key)
        except (CorruptEntry, OSError):
            return None
        if entry is None or entry.meta.code_key != code_key:
            return None
        return entry

    def record_hit(self, fingerprint: str, key: str) -> None:
        """Count one hit of an entry and set its last-used time, without rewriting the entry
        (the binary is never rewritten on a hit). Default: not tracked."""
        return None

    @abstractmethod
    def clear(self, fingerprint: str | None = None) -> tuple[int, int]:
        """Remove every entry (of one device); returns (entries removed, bytes freed)."""

    def close(self) -> None:
        """Let go of connections or handles (reopened on next use). Default: nothing held."""
        return None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.location}>"
