"""Helpers shared by the backends that keep metadata apart from the entry byte format
(SQLite, Redis, bundles): one verification path, and the fields that never get stored."""

from __future__ import annotations

from typing import Any

from ..entry import FORMAT_VERSION, Entry, check_binary, check_meta
from ..errors import CorruptEntry

__all__ = ["TRANSIENT", "stored_meta", "verified", "meta_ok", "is_hex", "valid_name",
           "FORMAT_VERSION"]

#: meta fields a store adds when it hands an entry out; never written back into a store
TRANSIENT = ("store", "hits", "last_used", "stored_bytes")


def stored_meta(entry: Entry) -> dict[str, Any]:
    """The entry's metadata without the fields a store adds (hits, last use, origin)."""
    return {k: v for k, v in entry.meta.items() if k not in TRANSIENT}


_HEX_CHARS = frozenset("0123456789abcdef")


def is_hex(name: str, length: int) -> bool:
    """``name`` is ``length`` lower-case hex digits."""
    return len(name) == length and _HEX_CHARS.issuperset(name)


def valid_name(fingerprint: str, key: str) -> bool:
    """A 16-hex-digit fingerprint and a 64-hex-digit key (what the cache ever files)."""
    return is_hex(fingerprint, 16) and is_hex(key, 64)


def verified(key: str, fingerprint: str, meta: dict[str, Any], binary: bytes) -> Entry:
    """The entry from stored metadata and binary, passed through the same checks as an entry
    file (metadata fields and types, SHA-256 and length of the binary, key and device) without
    building one; raises :class:`CorruptEntry` saying what is wrong."""
    if not isinstance(binary, (bytes, bytearray)):
        raise CorruptEntry("binary missing")
    check_meta(meta)
    check_binary(meta, binary, key, fingerprint)
    return Entry(key=key, fingerprint=fingerprint, meta=meta, binary=bytes(binary))


def meta_ok(meta: dict[str, Any]) -> bool:
    """Whether listed metadata passes :func:`~clmagic.entry.check_meta` (no binary check)."""
    try:
        check_meta(meta)
    except CorruptEntry:
        return False
    return True
