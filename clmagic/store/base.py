"""The store contract every backend fulfils, and what they all share: writability (with the one
warning when writes go off), ``put`` in terms of ``put_many``, the name check, ``close`` and use
as a context manager, the size limit (least recently used entries are evicted when a save takes
the store past ``max_size``; each backend lists sizes and removes entries its own way) and the
lifetime statistics' counters, and trust: every entry written is sealed (its digest, and with a
team secret its signature) and every entry loaded is vetted (signature policy, and whether its
binary must be proven loadable before this process loads it)."""

from __future__ import annotations

import dataclasses
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, NamedTuple

from clmagic._format import fmt_bytes
from clmagic._warn import warn_once
from clmagic.entry import Entry, seal, signed
from clmagic.errors import CorruptEntry
from clmagic.store.lifetime import EVICT, Counters, counters_for

if TYPE_CHECKING:
    from clmagic._secret import Secret

__all__ = ["Store", "Unsigned", "is_hex", "valid_name", "Use", "FILL"]


class Unsigned(CorruptEntry):
    """An entry refused by the signature policy: unsigned where a team secret requires a
    signature, or signed with another secret (or forged)."""

_HEX_CHARS = frozenset("0123456789abcdef")


def is_hex(name: str, length: int) -> bool:
    """``name`` is ``length`` lower-case hex digits."""
    return len(name) == length and _HEX_CHARS.issuperset(name)


def valid_name(fingerprint: str, key: str) -> bool:
    """A 16-hex-digit fingerprint and a 64-hex-digit key (what the cache ever files)."""
    return is_hex(fingerprint, 16) and is_hex(key, 64)


#: an eviction brings the store down to this share of its limit (so the next saves fit)
FILL = 0.9
#: how long the size found by a scan is trusted before a save scans again (other processes
#: save too: this bounds how far they can take the store past its limit unseen)
RESCAN_S = 30.0


class Use(NamedTuple):
    """One entry as eviction sees it: last use (last load, else the build), bytes taken, name,
    and a token that changes when the entry is rewritten (so a fresh copy is not evicted)."""

    last_used: float
    size: int
    fingerprint: str
    key: str
    token: object = None


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
    #: whether people other than this user write entries here (a team's Redis; a folder or
    #: file used through CLMAGIC_CACHE_TRUST=1): clearing it must be asked for, its binaries
    #: are proven loadable before use unless signed, and with a team secret it must be signed
    shared: bool = False
    #: with a team secret, entries must be signed even if only this user writes here (SQLite:
    #: a cache file is what gets copied between people)
    signed_only: bool = False

    def __init__(self) -> None:
        self._writable = True
        self._reason = ""
        #: the team secret (CLMAGIC_CACHE_SECRET) entries are signed and checked with
        self.secret: Secret | None = None
        #: entries refused by the signature policy in this process, by reason
        self.refused: Counter[str] = Counter()

    # -- trust ---------------------------------------------------------------------------------

    def _sealed(self, entry: Entry) -> Entry:
        """``entry`` as it is written: its metadata sealed with a digest, and signed with the
        team secret when one is set."""
        return dataclasses.replace(entry, meta=seal(entry.meta, self.secret, entry.binary))

    def _vet(self, entry: Entry) -> Entry:
        """A loaded entry, vetted. With a team secret: a bad signature is refused everywhere; an
        unsigned entry is refused where others write (:attr:`shared`, :attr:`signed_only`).
        Raises :class:`Unsigned` (counted in :attr:`refused`). The entry handed out says in
        ``foreign`` why its binary must be proven loadable first (it came from elsewhere and no
        valid signature vouches for it), else ``""``."""
        verdict = (signed(entry.meta, self.secret, entry.binary)
                   if self.secret and entry.binary is not None else None)
        if verdict is False:
            self.refused["bad signature"] += 1
            raise Unsigned("its signature does not match the team secret (CLMAGIC_CACHE_SECRET)")
        if verdict is None and self.secret and (self.shared or self.signed_only):
            self.refused["unsigned"] += 1
            raise Unsigned(f"it is not signed, and CLMAGIC_CACHE_SECRET is set: {self.kind} "
                           "entries must be signed")
        foreign = entry.meta.untrusted or (f"{self.kind} {self.location}" if self.shared else "")
        foreign = "" if verdict else foreign
        return entry if entry.foreign == foreign else dataclasses.replace(entry, foreign=foreign)

    def mark_proven(self, entry: Entry) -> None:
        """Record that ``entry``'s binary was proven loadable on this machine, so that it is not
        proven again: a private store rewrites the entry as its own. Default: nothing kept."""
        if entry.meta.untrusted and not self.shared and entry.binary is not None:
            self.put(Entry(dataclasses.replace(entry.meta, untrusted=""), binary=entry.binary))

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
    #: bytes the store may hold; a save past it evicts least recently used entries down to
    #: ``FILL`` of it. 0: no limit
    max_size: int = 0
    _known: tuple[int, float] | None = None  # (bytes, monotonic time of the scan)
    _counters: Counters | None = None
    _read_only_counters: Counters | None = None

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

    def record_hit(self, fingerprint: str, key: str, when: float | None = None) -> None:
        """Count one hit of an entry and set its last-used time (``when``, the hit's own time,
        else now: hits may be counted later, in batches), without rewriting the entry (the
        binary is never rewritten on a hit). Default: not tracked."""
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

    # -- lifetime statistics ---------------------------------------------------------------------

    @property
    def stats_folder(self) -> Path | None:
        """Where the lifetime statistics of this store are kept (``None``: not kept)."""
        return None

    @property
    def manifest_file(self) -> Path | None:
        """Where preparations are remembered across processes (:mod:`clmagic.key.manifest`):
        in the lifetime statistics' folder of a store only this user writes; ``None``
        elsewhere."""
        folder = self.stats_folder
        return None if folder is None or self.shared else folder / "manifest"

    @property
    def counters(self) -> Counters:
        """The lifetime counters of this store (see :mod:`clmagic.store.lifetime`); a store that
        cannot be written counts this session only (a read-only cache is left as it is)."""
        if not self.writable:
            if self._read_only_counters is None:
                self._read_only_counters = Counters(None)
            return self._read_only_counters
        if self._counters is None:
            self._counters = counters_for(self.stats_folder)
        return self._counters

    # -- size limit and eviction -----------------------------------------------------------------

    def usage_list(self) -> list[Use]:
        """Every entry's last use and size (for eviction). Backends answer from what they
        keep beside the entries, without reading metadata where they can."""
        return [Use(e.last_used, e.usage.stored_bytes, e.fingerprint, e.key, e.meta.created)
                for e in self.entries()]

    def remove_uses(self, victims: list[Use]) -> list[Use]:
        """Remove these entries unless rewritten since they were listed; the ones removed."""
        return [v for v in victims if self.delete(v.fingerprint, v.key)]

    def evict(self, target: int, older_than: float | None = None,
              uses: list[Use] | None = None) -> list[Use]:
        """Remove least recently used entries until the store holds at most ``target`` bytes
        (and, with ``older_than`` seconds, every entry unused that long); returns what went and
        counts it (``EVICT``) in the lifetime statistics."""
        uses = sorted(self.usage_list() if uses is None else uses,
                      key=lambda u: (u.last_used, u.key))
        total = sum(u.size for u in uses)
        cutoff = time.time() - older_than if older_than is not None else None
        victims = []
        for u in uses:  # oldest first: once one may stay, every later one may
            if total <= target and (cutoff is None or u.last_used >= cutoff):
                break
            victims.append(u)
            total -= u.size
        gone = self.remove_uses(victims) if victims else []
        for u in gone:
            self.counters.add(u.fingerprint, EVICT, 1, u.size)
        self._known = (sum(u.size for u in uses) - sum(u.size for u in gone), time.monotonic())
        return gone

    def _fits(self, entry: Entry, size: int) -> bool:
        """Whether an entry of ``size`` bytes can be stored under the limit at all (one warning
        when it cannot: the store is left as it is)."""
        if not self.max_size or size <= self.max_size:
            return True
        self._reason = (f"the entry ({fmt_bytes(size)}) is larger than the cache's size limit "
                        f"({fmt_bytes(self.max_size)})")
        warn_once(f"cache {self.location}: {self._reason}; not saved (raise "
                  "CLMAGIC_CACHE_MAX_SIZE)")
        return False

    def _saved(self, added: int) -> None:
        """After a save of ``added`` bytes: evict when the store is past its limit. The size is
        scanned once, then followed from this process's own saves, and scanned again when that
        says the limit is reached or the scan is older than ``RESCAN_S``."""
        if not self.max_size:
            return
        known = self._known
        if known is not None and time.monotonic() - known[1] < RESCAN_S \
                and known[0] + added <= self.max_size:
            self._known = (known[0] + added, known[1])
            return
        uses = self.usage_list()
        if sum(u.size for u in uses) > self.max_size:
            self.evict(int(self.max_size * FILL), uses=uses)
        else:
            self._known = (sum(u.size for u in uses), time.monotonic())
