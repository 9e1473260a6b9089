"""A local store with a shared remote one behind it (``CLMAGIC_REMOTE``).

A local miss asks the remote; a remote hit is copied into the local store; a fresh build is
written to both. Entries say which layer served them in ``usage.store`` (listing: ``local+remote``
for an entry both hold).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from pathlib import Path

from clmagic._warn import warn_once
from clmagic.entry import Entry
from clmagic.errors import CorruptEntry
from clmagic.store.base import Store, Use
from clmagic.store.lifetime import Counters

__all__ = ["LayeredStore"]


class LayeredStore(Store):
    """``local`` in front of ``remote``. ``delete`` and ``clear`` act on both layers."""

    kind = "layered"

    def __init__(self, local: Store, remote: Store):
        super().__init__()
        self.local = local
        self.remote = remote
        self._from_remote: set[tuple[str, str]] = set()

    @property
    def location(self) -> str:
        return f"{self.local.location} + {self.remote.location}"

    # the size limit, its eviction and the lifetime statistics are the local layer's (the
    # remote's are its server's: ``maxmemory``)
    @property
    def max_size(self) -> int:
        return self.local.max_size

    @max_size.setter
    def max_size(self, value: int) -> None:
        self.local.max_size = value

    @property
    def counters(self) -> Counters:
        return self.local.counters

    @property
    def stats_folder(self) -> Path | None:
        return self.local.stats_folder

    def usage_list(self) -> list[Use]:
        return self.local.usage_list()

    def remove_uses(self, victims: list[Use]) -> list[Use]:
        return self.local.remove_uses(victims)

    def evict(self, target: int, older_than: float | None = None,
              uses: list[Use] | None = None) -> list[Use]:
        return self.local.evict(target, older_than, uses)

    @property
    def writable(self) -> bool:
        return self.local.writable or self.remote.writable

    @property
    def reason(self) -> str:
        parts = [f"{s.kind}: {s.reason}" for s in (self.local, self.remote) if s.reason]
        return "; ".join(parts)

    def get(self, fingerprint: str, key: str) -> Entry | None:
        try:
            entry = self.local.get(fingerprint, key)
        except CorruptEntry as exc:
            warn_once(f"local cache entry {key[:12]} is damaged ({exc}); asking the remote")
            self.local.delete(fingerprint, key)
            entry = None
        if entry is not None:
            return entry
        entry = self.remote.get(fingerprint, key)  # CorruptEntry here goes to the caller
        if entry is None:
            return None
        self._copy(entry)
        return entry

    def _copy(self, entry: Entry) -> None:
        """Keep a remote entry in the local store, marked as from elsewhere until its binary is
        proven loadable here (unless a valid team signature vouched for it)."""
        meta = entry.meta
        if entry.foreign and not meta.untrusted:
            meta = dataclasses.replace(meta, untrusted=entry.foreign)
        self.local.put(Entry(meta, binary=entry.binary))
        self._from_remote.add((entry.fingerprint, entry.key))

    def mark_proven(self, entry: Entry) -> None:
        """The local copy becomes this machine's own: not proven again."""
        if entry.binary is not None:
            self.local.put(Entry(dataclasses.replace(entry.meta, untrusted=""),
                                 binary=entry.binary))

    def find_code(self, fingerprint: str, code_key: str) -> Entry | None:
        """The local entry of that code, else the remote's (copied into the local store)."""
        entry = self.local.find_code(fingerprint, code_key)
        if entry is not None:
            return entry
        entry = self.remote.find_code(fingerprint, code_key)
        if entry is None:
            return None
        self._copy(entry)
        return entry

    def put_many(self, entries: Iterable[Entry]) -> int:
        batch = list(entries)
        return max(self.local.put_many(batch), self.remote.put_many(batch))

    def close(self) -> None:
        self.local.close()
        self.remote.close()

    def record_hit(self, fingerprint: str, key: str, when: float | None = None) -> None:
        self.local.record_hit(fingerprint, key, when)
        if (fingerprint, key) in self._from_remote:  # the team's count: once per process
            self._from_remote.discard((fingerprint, key))
            self.remote.record_hit(fingerprint, key, when)

    def delete(self, fingerprint: str, key: str) -> bool:
        local = self.local.delete(fingerprint, key)
        remote = self.remote.delete(fingerprint, key)
        return local or remote

    def entries(self, fingerprint: str | None = None) -> Iterator[Entry]:
        seen = {(e.fingerprint, e.key): e for e in self.local.entries(fingerprint)}
        both = f"{self.local.kind}+{self.remote.kind}"
        for e in self.remote.entries(fingerprint):
            mine = seen.get((e.fingerprint, e.key))
            if mine is None:
                yield e
            else:
                seen[(e.fingerprint, e.key)] = mine.with_usage(store=both)
        yield from seen.values()

    def clear(self, fingerprint: str | None = None) -> tuple[int, int]:
        held = {(e.fingerprint, e.key) for e in self.entries(fingerprint)}
        _, local_bytes = self.local.clear(fingerprint)
        _, remote_bytes = self.remote.clear(fingerprint)
        self._from_remote.clear()
        return len(held), local_bytes + remote_bytes
