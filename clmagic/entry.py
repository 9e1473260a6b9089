"""One cache entry: metadata and program binary, and its self-describing byte format.

Layout (little-endian)::

    0   8  magic b"CLMAGIC\\n"
    8   4  u32 format version
    12  4  u32 metadata length
    16  4  u32 CRC-32 of the metadata
    20  4  u32 reserved (0)
    24  8  u64 binary length
    32  .  metadata: UTF-8 JSON object
    .   .  binary
    .  32  SHA-256 of the binary

Nothing is unpickled or evaluated; the metadata is parsed strictly and bounded in size.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import zlib
from dataclasses import dataclass, field
from typing import IO, Any

from .errors import CorruptEntry

__all__ = ["Entry", "FORMAT_VERSION", "MAGIC", "encode", "decode", "read_meta", "HEADER",
           "check_meta", "check_binary"]

MAGIC = b"CLMAGIC\n"
FORMAT_VERSION = 1
HEADER = struct.Struct("<8sIIIIQ")
MAX_META = 1 << 20
MAX_BINARY = 1 << 30
MAX_LOG = 64 << 10

_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "key": str,
    "fingerprint": str,
    "kernels": list,
    "options": str,
    "device": str,
    "platform": str,
    "driver": str,
    "source_bytes": int,
    "binary_bytes": int,
    "binary_sha256": str,
    "build_ms": (int, float),
    "created": (int, float),
    "build_log": str,
}


@dataclass
class Entry:
    """A stored program: ``meta`` (JSON-able dict) and ``binary`` (``None`` when only the
    metadata was read)."""

    key: str
    fingerprint: str
    meta: dict[str, Any] = field(default_factory=dict)
    binary: bytes | None = None

    @property
    def kernels(self) -> list[str]:
        """Kernel names of the program."""
        return list(self.meta.get("kernels", []))

    @property
    def build_ms(self) -> float:
        """How long the original driver build took."""
        return float(self.meta.get("build_ms", 0.0))

    @classmethod
    def create(cls, key: str, fingerprint: str, binary: bytes, **meta: Any) -> Entry:
        """A new entry; fills ``binary_bytes``, ``binary_sha256`` and trims the build log."""
        meta = dict(meta, key=key, fingerprint=fingerprint)
        meta["binary_bytes"] = len(binary)
        meta["binary_sha256"] = hashlib.sha256(binary).hexdigest()
        meta["build_log"] = str(meta.get("build_log", ""))[:MAX_LOG]
        return cls(key=key, fingerprint=fingerprint, meta=meta, binary=binary)


def encode(entry: Entry) -> bytes:
    """The bytes of one entry file."""
    if entry.binary is None:
        raise ValueError("cannot encode an entry without its binary")
    meta = json.dumps(entry.meta, separators=(",", ":"), sort_keys=True).encode()
    header = HEADER.pack(
        MAGIC, FORMAT_VERSION, len(meta), zlib.crc32(meta), 0, len(entry.binary)
    )
    digest = entry.meta.get("binary_sha256") or hashlib.sha256(entry.binary).hexdigest()
    return b"".join((header, meta, entry.binary, bytes.fromhex(digest)))


def _parse_header(head: bytes) -> tuple[int, int, int]:
    if len(head) < HEADER.size:
        raise CorruptEntry(f"truncated header ({len(head)} bytes)")
    magic, version, meta_len, meta_crc, _reserved, bin_len = HEADER.unpack_from(head)
    if magic != MAGIC:
        raise CorruptEntry("bad magic: not a clmagic entry")
    if version != FORMAT_VERSION:
        raise CorruptEntry(f"format version {version}, this clmagic reads {FORMAT_VERSION}")
    if meta_len > MAX_META:
        raise CorruptEntry(f"metadata of {meta_len} bytes is over the {MAX_META} limit")
    if bin_len > MAX_BINARY:
        raise CorruptEntry(f"binary of {bin_len} bytes is over the {MAX_BINARY} limit")
    return meta_len, meta_crc, bin_len


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_meta(raw: bytes, crc: int) -> dict[str, Any]:
    if zlib.crc32(raw) != crc:
        raise CorruptEntry("metadata checksum mismatch")
    try:
        meta = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptEntry(f"metadata is not valid JSON: {exc}") from None
    except RecursionError:
        raise CorruptEntry("metadata is nested too deeply") from None
    check_meta(meta)
    return meta


def check_meta(meta: Any) -> None:
    """Check metadata however it was read (entry file, SQLite columns, Redis hash): a dict with
    every required field of its type, kernel names as strings, no NaN or infinity anywhere, and
    at most :data:`MAX_META` bytes of content; raise :class:`CorruptEntry` saying what is
    wrong."""
    if not isinstance(meta, dict):
        raise CorruptEntry("metadata is not a JSON object")
    for name, kind in _REQUIRED.items():
        if not isinstance(meta.get(name), kind) or isinstance(meta.get(name), bool):
            raise CorruptEntry(f"metadata field {name!r} missing or of the wrong type")
    if not all(isinstance(k, str) for k in meta["kernels"]):
        raise CorruptEntry("metadata field 'kernels' holds a non-string")
    size, todo = 0, [meta]  # a lower bound of the JSON size; iterative, so depth is harmless
    while todo:
        value = todo.pop()
        if isinstance(value, dict):
            for k, v in value.items():
                size += (len(k) if isinstance(k, str) else 1) + 4  # "k": and a comma
                todo.append(v)
        elif isinstance(value, list | tuple):
            size += len(value) + 1
            todo.extend(value)
        elif isinstance(value, str):
            size += len(value) + 2
        elif isinstance(value, float) and not math.isfinite(value):
            raise CorruptEntry("metadata holds NaN or infinity")
        else:
            size += 1
        if size > MAX_META:
            raise CorruptEntry(f"metadata is over the {MAX_META} byte limit")


def check_binary(meta: dict[str, Any], binary: bytes | bytearray | memoryview, key: str | None,
                 fingerprint: str | None) -> None:
    """Check a binary against checked metadata (SHA-256, length, size bound) and the name it was
    filed under (``key``/``fingerprint`` when given); raise :class:`CorruptEntry`."""
    if len(binary) > MAX_BINARY:
        raise CorruptEntry(f"binary of {len(binary)} bytes is over the {MAX_BINARY} limit")
    if hashlib.sha256(binary).hexdigest() != meta["binary_sha256"]:
        raise CorruptEntry("binary checksum mismatch")
    if meta["binary_bytes"] != len(binary):
        raise CorruptEntry("binary length disagrees with the metadata")
    if key is not None and meta["key"] != key:
        raise CorruptEntry("entry is filed under another key")
    if fingerprint is not None and meta["fingerprint"] != fingerprint:
        raise CorruptEntry("entry is filed under another device")


def decode(
    data: bytes | bytearray, key: str | None = None, fingerprint: str | None = None
) -> Entry:
    """Parse and verify one entry file; raise :class:`CorruptEntry` saying what is wrong.

    ``key``/``fingerprint``, when given, must match the stored ones (an entry filed under the
    wrong name is corrupt too).
    """
    view = memoryview(data)  # slices below copy nothing until the verified binary
    meta_len, meta_crc, bin_len = _parse_header(view[: HEADER.size])
    expected = HEADER.size + meta_len + bin_len + 32
    if len(data) != expected:
        raise CorruptEntry(f"size {len(data)} bytes, header says {expected}")
    meta = _parse_meta(bytes(view[HEADER.size : HEADER.size + meta_len]), meta_crc)
    start = HEADER.size + meta_len
    if bytes(view[start + bin_len :]).hex() != meta["binary_sha256"]:
        raise CorruptEntry("binary checksum mismatch")
    check_binary(meta, view[start : start + bin_len], key, fingerprint)
    binary = bytes(view[start : start + bin_len])
    return Entry(key=meta["key"], fingerprint=meta["fingerprint"], meta=meta, binary=binary)


def read_meta(fh: IO[bytes]) -> Entry:
    """Read only the header and metadata of an entry file (no binary): for fast listing."""
    meta_len, meta_crc, _bin_len = _parse_header(fh.read(HEADER.size))
    raw = fh.read(meta_len)
    if len(raw) != meta_len:
        raise CorruptEntry("truncated metadata")
    meta = _parse_meta(raw, meta_crc)
    return Entry(key=meta["key"], fingerprint=meta["fingerprint"], meta=meta)
