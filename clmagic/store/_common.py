"""Helpers shared by the backends that keep metadata apart from the entry byte format
(SQLite, Redis, bundles): one verification path, and the fields that never get stored."""

from __future__ import annotations

from typing import Any

from ..entry import _REQUIRED, FORMAT_VERSION, MAX_BINARY, Entry, decode, encode
from ..errors import CorruptEntry

__all__ = ["TRANSIENT", "stored_meta", "verified", "meta_ok", "valid_name", "FORMAT_VERSION"]

#: meta fields a store adds when it hands an entry out; never written back into a store
TRANSIENT = ("store", "hits", "last_used", "stored_bytes")


def stored_meta(entry: Entry) -> dict[str, Any]:
    """The entry's metadata without the fields a store adds (hits, last use, origin)."""
    return {k: v for k, v in entry.meta.items() if k not in TRANSIENT}


def valid_name(fingerprint: str, key: str) -> bool:
    """A 16-hex-digit fingerprint and a 64-hex-digit key (what the cache ever files)."""
    hexd = set("0123456789abcdef")
    return (len(fingerprint) == 16 and len(key) == 64 and set(fingerprint) <= hexd
            and set(key) <= hexd)


def verified(key: str, fingerprint: str, meta: dict[str, Any], binary: bytes) -> Entry:
    """The entry rebuilt from stored metadata and binary, passed through the same checks as an
    entry file (metadata fields and types, SHA-256 and length of the binary, key and device);
    raises :class:`CorruptEntry` saying what is wrong."""
    if not isinstance(binary, (bytes, bytearray)):
        raise CorruptEntry("binary missing")
    if len(binary) > MAX_BINARY:
        raise CorruptEntry(f"binary of {len(binary)} bytes is over the {MAX_BINARY} limit")
    try:
        data = encode(Entry(key=key, fingerprint=fingerprint, meta=meta, binary=bytes(binary)))
    except (TypeError, ValueError) as exc:
        raise CorruptEntry(f"metadata cannot be read: {exc}") from None
    return decode(data, key=key, fingerprint=fingerprint)


def meta_ok(meta: dict[str, Any]) -> bool:
    """Whether listed metadata has every required field with its type (no binary check)."""
    for name, kind in _REQUIRED.items():
        value = meta.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            return False
    return all(isinstance(k, str) for k in meta["kernels"])
