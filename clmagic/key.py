"""The cache key: SHA-256 over source, effective options, device identity and format version."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from .devices import DeviceInfo
from .entry import FORMAT_VERSION

__all__ = ["cache_key"]


def cache_key(
    source: bytes,
    options: str,
    device: DeviceInfo,
    headers: Iterable[tuple[str, bytes]] = (),
) -> str:
    """Hex SHA-256 over ``source NUL options NUL device NUL driver NUL device-version NUL
    platform-version NUL format-version`` and, after that, each included header as
    ``NUL path NUL contents`` in the order the compiler meets them."""
    h = hashlib.sha256()
    h.update(source)
    h.update(b"\0")
    h.update(options.encode())
    for field in device.key_fields():
        h.update(b"\0")
        h.update(field.encode())
    h.update(b"\0")
    h.update(str(FORMAT_VERSION).encode())
    for name, data in headers:
        h.update(b"\0")
        h.update(name.encode())
        h.update(b"\0")
        h.update(data)
    return h.hexdigest()
