"""The entry file: one :class:`~clmagic.entry.Entry` as bytes, the format the directory store
writes, bundles carry and every release reads.

Layout of an entry file (little-endian)::

    0   8  magic b"CLMAGIC\\n"
    8   4  u32 format version
    12  4  u32 metadata length
    16  4  u32 CRC-32 of the metadata
    20  4  u32 reserved (0)
    24  8  u64 binary length
    32  .  metadata: UTF-8 JSON object (the fields of EntryMeta)
    .   .  binary
    .  16  XXH3-128 of the binary (format 2; format 1 ended with its 32-byte SHA-256)

A file of an older format version is :class:`~clmagic.entry.OtherFormat` (a miss, not damage):
only the magic and the version are read of it, since nothing after them need be laid out alike.
A newer version is damage: the cache key covers the format, so no newer clmagic files an entry
under a key this one looks up.

Apart from :mod:`clmagic.entry` (what an entry is and when its metadata and binary are valid),
because only the directory store and the tools that handle files need the byte layout: the
SQLite and Redis stores keep the same metadata in columns and hashes, checked by the same
:func:`~clmagic.entry.check_meta`, and never read this header.
"""

from __future__ import annotations

import json
import os
import struct
import zlib

from clmagic.entry import (
    FORMAT_VERSION,
    MAX_BINARY,
    MAX_META,
    Entry,
    EntryMeta,
    OtherFormat,
    Usage,
    parse_json,
    verified,
)
from clmagic.errors import CorruptEntry

__all__ = ["MAGIC", "HEADER", "encode", "decode", "read_entry", "read_meta", "canonical_of"]

MAGIC = b"CLMAGIC\n"
#: magic, format version, metadata length, metadata CRC-32, reserved, binary length
HEADER = struct.Struct("<8sIIIIQ")
#: the XXH3-128 of the binary that ends the file
_TRAILER = 16
_FIRST = 8192  # the first read of an entry: its header and most metadata


def encode(entry: Entry) -> bytes:
    """The bytes of one entry file."""
    if entry.binary is None:
        raise ValueError("cannot encode an entry without its binary")
    meta = json.dumps(entry.meta.to_json(), separators=(",", ":"), sort_keys=True).encode()
    header = HEADER.pack(
        MAGIC, FORMAT_VERSION, len(meta), zlib.crc32(meta), 0, len(entry.binary)
    )
    return b"".join((header, meta, entry.binary, bytes.fromhex(entry.meta.binary_xxh3)))


def _parse_header(head: bytes | memoryview) -> tuple[int, int, int]:
    if len(head) < HEADER.size:
        raise CorruptEntry(f"truncated header ({len(head)} bytes)")
    magic, version, meta_len, meta_crc, _reserved, bin_len = HEADER.unpack_from(head)
    if magic != MAGIC:
        raise CorruptEntry("bad magic: not a clmagic entry")
    if version < FORMAT_VERSION:  # an older clmagic's entry: a miss
        raise OtherFormat(int(version))
    if version != FORMAT_VERSION:  # no newer clmagic files an entry under this one's keys
        raise CorruptEntry(f"format version {version}, this clmagic reads {FORMAT_VERSION}")
    if meta_len > MAX_META:
        raise CorruptEntry(f"metadata of {meta_len} bytes is over the {MAX_META} limit")
    if bin_len > MAX_BINARY:
        raise CorruptEntry(f"binary of {bin_len} bytes is over the {MAX_BINARY} limit")
    return int(meta_len), int(meta_crc), int(bin_len)


def _parse_meta(raw: bytes, crc: int) -> EntryMeta:
    if zlib.crc32(raw) != crc:
        raise CorruptEntry("metadata checksum mismatch")
    return parse_json(raw, lambda meta: canonical_of(raw, meta))


def canonical_of(raw: bytes, meta: EntryMeta) -> bytes:
    """What :func:`~clmagic.entry.canonical` makes of ``meta``, cut from the sorted, spaceless
    JSON it was parsed from (as :func:`encode` writes it) rather than encoded again (300 µs for
    a 180-kernel program's facts): the seal's members removed, the format version put after the
    fingerprint. Where the JSON was written otherwise these bytes differ from what the writer
    hashed, the digest does not match them, and the check encodes the metadata as before."""
    # quoted without json.dumps (a value JSON escapes is not found, or its cut does not match)
    for name, value in (("digest", meta.digest), ("signature", meta.signature)):
        if value:
            member = f',"{name}":"{value}"'.encode()
            at = raw.find(member)
            if at >= 0:
                raw = raw[:at] + raw[at + len(member):]
    after = f'"fingerprint":"{meta.fingerprint}"'.encode()
    at = raw.find(after) + len(after)
    return raw[:at] + b',"format":%d' % FORMAT_VERSION + raw[at:] if at >= len(after) else raw


def decode(data: bytes | bytearray, key: str | None = None, fingerprint: str | None = None,
           usage: Usage = Usage()) -> Entry:
    """Parse and verify one entry file; raise :class:`CorruptEntry` saying what is wrong, or
    :class:`~clmagic.entry.OtherFormat` for a file of another format version.

    ``key``/``fingerprint``, when given, must match the stored ones (an entry filed under the
    wrong name is corrupt too).
    """
    view = memoryview(data)  # slices below copy nothing until the verified binary
    meta_len, meta_crc, bin_len = _parse_header(view[: HEADER.size])
    _check_size(len(data), meta_len, bin_len)
    start = HEADER.size + meta_len
    return _assemble(bytes(view[HEADER.size : start]), meta_crc, view[start : start + bin_len],
                     bytes(view[start + bin_len :]), key, fingerprint, usage)


def read_entry(fd: int, size: int, key: str | None = None, fingerprint: str | None = None,
               usage: Usage = Usage()) -> Entry:
    """:func:`decode` of an entry file open at ``fd``, of ``size`` bytes, read by ``pread``:
    the header with the metadata (most fit the first read), the binary into its own bytes
    (never copied: a HIT reads megabytes on some drivers), the trailer. Three system calls and
    no file object: a HIT's path."""
    meta_len, meta_crc, bin_len, raw = _read_head(fd)
    _check_size(size, meta_len, bin_len)
    start = HEADER.size + meta_len
    binary = _pread_exactly(fd, bin_len, start)
    trailer = _pread_exactly(fd, _TRAILER + 1, start + bin_len)
    if len(raw) != meta_len or len(binary) != bin_len or len(trailer) != _TRAILER:
        raise CorruptEntry("the file changed size while it was read")
    return _assemble(raw, meta_crc, binary, trailer, key, fingerprint, usage)


def _read_head(fd: int) -> tuple[int, int, int, bytes]:
    """The header's fields (checked) and the metadata's bytes, fewer only at the end of the
    file, by ``pread``: the header and most metadata in the first read."""
    head = os.pread(fd, _FIRST, 0)
    meta_len, meta_crc, bin_len = _parse_header(head[: HEADER.size])
    raw = head[HEADER.size : HEADER.size + meta_len]
    if len(raw) < meta_len:
        raw += _pread_exactly(fd, meta_len - len(raw), HEADER.size + len(raw))
    return meta_len, meta_crc, bin_len, raw


def _pread_exactly(fd: int, n: int, at: int) -> bytes:
    """``n`` bytes from offset ``at``, fewer only at the end of the file."""
    parts, got = [], 0
    while got < n:
        part = os.pread(fd, n - got, at + got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _check_size(size: int, meta_len: int, bin_len: int) -> None:
    expected = HEADER.size + meta_len + bin_len + _TRAILER
    if size != expected:
        raise CorruptEntry(f"size {size} bytes, header says {expected}")


def _assemble(raw: bytes, crc: int, binary: bytes | memoryview, trailer: bytes,
              key: str | None, fingerprint: str | None, usage: Usage) -> Entry:
    meta = _parse_meta(raw, crc)
    if trailer.hex() != meta.binary_xxh3:
        raise CorruptEntry("binary checksum mismatch")
    return verified(meta, binary, key, fingerprint, usage)


def read_meta(fd: int) -> EntryMeta:
    """Only the header and metadata of the entry file open at ``fd`` (no binary): for fast
    listing."""
    meta_len, meta_crc, _bin_len, raw = _read_head(fd)
    if len(raw) != meta_len:
        raise CorruptEntry("truncated metadata")
    return _parse_meta(raw, meta_crc)
