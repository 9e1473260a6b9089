"""The cache keys: the exact key (SHA-256 over source, effective options, device identity and
format version, and every included header), and the code key used for rekeying (the same over
the source's code form, see :mod:`clmagic.key.code`)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import NamedTuple

from clmagic.entry import FORMAT_VERSION
from clmagic.key.code import code_refusal
from clmagic.key.options import BuildOptions
from clmagic.opencl.devices import DeviceInfo

__all__ = ["cache_key", "code_key", "code_key_of", "CodeKey"]

_CODE_PREFIX = b"clmagic code key 1\0"


class CodeKey(NamedTuple):
    """A code key, or ``None`` and the reason the build cannot be rekeyed."""

    key: str | None
    reason: str = ""


def _digest(prefix: bytes, source: bytes, options: str, device_fields: Iterable[str],
            headers: Iterable[tuple[str, bytes]],
            driver_flags: dict[str, str] | None = None) -> str:
    h = hashlib.sha256(prefix)
    h.update(source)
    h.update(b"\0")
    h.update(options.encode())
    for field in device_fields:
        h.update(b"\0")
        h.update(field.encode())
    h.update(b"\0")
    h.update(str(FORMAT_VERSION).encode())
    for name, data in headers:
        h.update(b"\0")
        h.update(name.encode())
        h.update(b"\0")
        h.update(data)
    for name, value in (driver_flags or {}).items():
        h.update(b"\0\0")
        h.update(f"{name}={value}".encode())
    return h.hexdigest()


def cache_key(
    source: bytes,
    options: str,
    device: DeviceInfo,
    headers: Iterable[tuple[str, bytes]] = (),
    driver_flags: dict[str, str] | None = None,
) -> str:
    """Hex SHA-256 over ``source NUL options NUL device NUL driver NUL device-version NUL
    platform-version NUL format-version``, then each included header as ``NUL path NUL
    contents`` in the order the compiler meets them, then each build flag a driver takes from
    the environment (``POCL_EXTRA_BUILD_FLAGS``…) as ``NUL NUL NAME=value``."""
    return _digest(b"", source, options, device.key_fields(), headers, driver_flags)


def code_key(
    source: str,
    options: str,
    device: DeviceInfo,
    headers: Iterable[tuple[str, bytes]] = (),
) -> CodeKey:
    """The key of the source's code alone: like :func:`cache_key`, over the source's code form
    and under its own prefix (so it never equals an exact key); ``CodeKey(None, reason)`` where
    comments or spacing could change what the build produces (see :func:`~clmagic.key.code.
    code_form`)."""
    headers = list(headers)
    form, reason = code_refusal(source, options, headers)
    if form is None:
        return CodeKey(None, reason)
    return CodeKey(_digest(_CODE_PREFIX, form.encode(), options, device.key_fields(), headers))


def code_key_of(source: str, options: BuildOptions, device: DeviceInfo,
                headers: Iterable[tuple[str, bytes]],
                driver_flags: dict[str, str] | None = None) -> CodeKey:
    """The code key of a prepared build: over the files its exact key covered (every file the
    compiler can read, see :mod:`clmagic.key.includes`), with the flags a driver adds from the
    environment read as options (so they refuse as written ones do)."""
    written = " ".join([options.effective, *(driver_flags or {}).values()])
    return code_key(source, written, device, headers)
