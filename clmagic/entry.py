"""One cache entry: what was built (:class:`EntryMeta`), how it has been used (:class:`Usage`)
and the program binary, and the checks every backend makes of them (metadata, binary, digest and
team signature). The bytes of an entry file are :mod:`clmagic.entry_file`'s.

Integrity follows ccache's design: the binary's checksum and the metadata's digest are XXH3-128
(they catch every torn, truncated or bit-flipped entry at a few GB/s; a private store is trusted
to its file permissions, not to a cryptographic hash on every hit), and the team signature is
keyed BLAKE3 over the metadata and the binary themselves (a MAC: XXH3 is not collision
resistant, so a signature over the checksum alone would not bind the binary).

Nothing is unpickled or evaluated; metadata is parsed strictly, bounded in size, and checked
once, when it becomes an :class:`EntryMeta` (however it was stored: entry file, SQLite columns,
Redis hash). Usage is never stored in the entry: each backend keeps it beside the entry.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import math
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import xxhash

from clmagic._valid import load_json, number, whole
from clmagic.errors import CorruptEntry

if TYPE_CHECKING:
    from clmagic._secret import Secret

__all__ = ["Entry", "EntryMeta", "Usage", "sane_time", "MAX_TIME", "FORMAT_VERSION",
           "MAX_META", "MAX_BINARY", "MAX_LOG", "canonical", "seal", "signed", "parse_json",
           "check_meta", "check_binary", "verified", "META_FIELDS", "SQL_FIELDS", "OtherFormat",
           "checksum"]

#: the version of the stored metadata's format: in every entry file's header, the SQLite and
#: Redis stores' records, the bytes the digest covers and every cache key. 2: XXH3-128 checksum
#: and digest, keyed BLAKE3 signature (1: SHA-256 and HMAC-SHA256)
FORMAT_VERSION = 2


class OtherFormat(Exception):
    """An entry of an older format version (an older clmagic's): a miss, not a
    :class:`CorruptEntry` (nothing reports it as damage); it ages out as unused entries do."""

    def __init__(self, version: int) -> None:
        super().__init__(f"format {version}, this clmagic reads {FORMAT_VERSION}")
        self.version = version


def checksum(data: bytes | bytearray | memoryview) -> str:
    """The hex XXH3-128 of ``data``: an entry's binary checksum and its metadata's digest."""
    return xxhash.xxh3_128_hexdigest(data)
#: the most bytes of metadata and of binary an entry may have: every read is bounded by them
MAX_META = 1 << 20
MAX_BINARY = 1 << 30
#: the most of a build log an entry keeps (a driver may log megabytes of warnings)
MAX_LOG = 64 << 10


def _f(*, shown: bool = False, column: bool = False, time: bool = False, omit: bool = False,
       default: Any = dataclasses.MISSING, compare: bool = True) -> Any:
    """A metadata field: ``shown`` in the entries DataFrame, a ``column`` of its own in SQLite
    (else in its ``extra`` JSON), an epoch ``time``; ``omit``: not written at its default (newer
    than the format); ``compare=False``: about the entry, not what was built."""
    return field(default=default, compare=compare,
                 metadata={"shown": shown, "column": column, "time": time, "omit": omit})


@dataclass(frozen=True, kw_only=True)
class EntryMeta:
    """What an entry says about itself: the one list of stored fields. The JSON keys on disk,
    the SQLite columns and the Redis hash's ``meta`` are exactly these names. Fields without a
    default are required; ``other`` keeps fields this clmagic does not know, as written."""

    key: str = _f(shown=True)
    kernels: tuple[str, ...] = _f(shown=True)
    options: str = _f(shown=True, column=True)
    device: str = _f(shown=True, column=True)
    platform: str = _f(shown=True, column=True)
    driver: str = _f(shown=True, column=True)
    source_bytes: int = _f(shown=True, column=True)
    binary_bytes: int = _f(shown=True, column=True)
    build_ms: float = _f(shown=True, column=True)
    created: float = _f(shown=True, column=True, time=True)
    fingerprint: str = _f(shown=True)
    #: who asked for the build: ``cell``, or the module that called ``pyopencl.Program.build``
    origin: str = _f(shown=True, default="cell", omit=True)
    #: XXH3-128 of the binary (:func:`checksum`)
    binary_xxh3: str = _f()
    build_log: str = _f()
    device_version: str = _f(default="")
    platform_version: str = _f(default="")
    headers: tuple[str, ...] = _f(default=())
    #: the key of the source's code alone (:func:`clmagic.key.digest.code_key`), "" when it has none
    code_key: str = _f(default="", omit=True)
    #: the key of the entry whose binary this one reuses (a REKEYED save), else ""; its build
    #: log's line numbers are that source's, and its ``build_ms`` that entry's build
    rekeyed_from: str = _f(shown=True, default="", omit=True)
    #: where the binary came from when not from a build on this machine, until it is proven
    #: loadable here ("bundle NAME", "remote URL"); "" for this machine's own builds
    untrusted: str = _f(default="", omit=True, compare=False)
    #: each kernel's facts (:mod:`clmagic.opencl.facts`) as JSON text, parsed when read (a HIT
    #: parses one string, not an object per kernel: 50 against 350 µs for 180 kernels); older
    #: entries hold the object; ``None``: not kept (older entries, builds making no kernels)
    kernel_facts: str | dict[str, Any] | None = _f(default=None, omit=True)
    #: XXH3-128 of the canonical metadata (every field above, the format version): what the
    #: entry was built for (key, device, binary checksum) is not moved or damaged apart from it
    digest: str = _f(default="", omit=True, compare=False)
    #: keyed BLAKE3 of the same bytes and the binary with the team secret
    #: (CLMAGIC_CACHE_SECRET, see :meth:`clmagic._secret.Secret.mac`), "" unsigned
    signature: str = _f(default="", omit=True, compare=False)
    other: Mapping[str, Any] = field(default_factory=dict, compare=True)

    @classmethod
    def parse(cls, raw: Any) -> EntryMeta:
        """Check decoded JSON (or columns gathered into a dict) and type it; raise
        :class:`CorruptEntry` saying what is wrong."""
        return check_meta(raw)

    def to_json(self) -> dict[str, Any]:
        """The JSON object stored for this metadata (the same keys as every release wrote)."""
        out = dict(self.other)
        for f in META_FIELDS:
            value = getattr(self, f.name)
            if f.metadata["omit"] and value == f.default:
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


#: the stored fields, in order (``other`` excluded)
META_FIELDS: tuple[dataclasses.Field[Any], ...] = tuple(
    f for f in dataclasses.fields(EntryMeta) if f.name != "other")
#: the fields the SQLite store keeps as columns of their own
SQL_FIELDS: tuple[str, ...] = tuple(f.name for f in META_FIELDS if f.metadata["column"])
_NAMES = frozenset(f.name for f in META_FIELDS)
_KINDS: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float),
                                       "tuple[str, ...]": (list,),
                                       "str | dict[str, Any] | None": (str, dict)}
#: per field: name, the types its JSON value may have, whether it may be absent, whether a float
_CHECKS = [(f.name, _KINDS[str(f.type)], f.default is not dataclasses.MISSING, f.type == "float")
           for f in META_FIELDS]


#: the latest time an entry may carry (2200-01-01 UTC); later, negative or not finite: unknown
MAX_TIME = 7_258_118_400.0


def sane_time(value: float | None) -> float | None:
    """``value`` when it is a time an entry can have (finite, from the epoch to
    :data:`MAX_TIME`), else ``None``: what every view reads, so a hit counter dated 2300 or a
    bundle entry created at 1e300 shows as unknown instead of raising."""
    if value is None or not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return float(value) if 0.0 <= value <= MAX_TIME else None  # NaN fails both comparisons


@dataclass(frozen=True, kw_only=True)
class Usage:
    """How a store has seen an entry used; kept beside the entry, never in it.

    ``last_used`` is the last load from the store (``None``: the store cannot tell),
    ``stored_bytes`` what the entry takes in the store, ``store`` which store or layer served
    it."""

    last_used: float | None = field(default=None, metadata={"time": True})
    hits: int = 0
    stored_bytes: int = 0
    store: str = ""

    def __post_init__(self) -> None:
        # a hit counter dated 2300, a NaN or negative last use: unknown, never a crash downstream
        object.__setattr__(self, "last_used", sane_time(self.last_used))


@dataclass(frozen=True)
class Entry:
    """A stored program: its metadata, its usage, and its ``binary`` (``None`` when only the
    metadata was read)."""

    meta: EntryMeta
    usage: Usage = Usage()
    binary: bytes | None = None
    #: why the binary must be proven loadable before this process loads it (it came from a
    #: bundle or a store others write, and no valid team signature vouches for it), else ""
    foreign: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        return self.meta.key

    @property
    def fingerprint(self) -> str:
        return self.meta.fingerprint

    @property
    def kernels(self) -> list[str]:
        """Kernel names of the program."""
        return list(self.meta.kernels)

    @property
    def build_ms(self) -> float:
        """How long the original driver build took."""
        return self.meta.build_ms

    @property
    def last_used(self) -> float:
        """The one rule for last use: the last load from the store, else the build time (a time
        out of range counts as unknown; both unknown: 0, the epoch)."""
        return self.usage.last_used or sane_time(self.meta.created) or 0.0

    def with_usage(self, **changes: Any) -> Entry:
        """This entry with some usage fields changed."""
        return dataclasses.replace(self, usage=dataclasses.replace(self.usage, **changes))

    @classmethod
    def create(cls, key: str, fingerprint: str, binary: bytes, *, kernels: Iterable[str],
               options: str, device: str, platform: str, driver: str, source_bytes: int,
               build_ms: float, created: float, build_log: str = "", origin: str = "cell",
               device_version: str = "", platform_version: str = "",
               headers: Iterable[str] = (), code_key: str = "", rekeyed_from: str = "",
               untrusted: str = "", kernel_facts: Mapping[str, Any] | str | None = None
               ) -> Entry:
        """A new entry: every stored field by name (a misspelt one is a ``TypeError``, never a
        field of ``meta.other``); fills ``binary_bytes`` and ``binary_xxh3``, trims the build
        log to :data:`MAX_LOG`, keeps ``kernel_facts`` as JSON text. No seal (the store seals
        what it writes); the values are checked as stored metadata is (:func:`check_meta`)."""
        text = kernel_facts if isinstance(kernel_facts, str | None) else _CANONICAL.encode(
            dict(kernel_facts))
        facts = {} if text is None else {"kernel_facts": text}
        return cls(meta=check_meta({
            **facts, "key": key, "fingerprint": fingerprint, "kernels": list(kernels),
            "options": options, "device": device, "platform": platform, "driver": driver,
            "source_bytes": source_bytes, "binary_bytes": len(binary),
            "binary_xxh3": checksum(binary), "build_ms": build_ms,
            "created": created, "build_log": str(build_log)[:MAX_LOG], "origin": origin,
            "device_version": device_version, "platform_version": platform_version,
            "headers": list(headers), "code_key": code_key, "rekeyed_from": rekeyed_from,
            "untrusted": untrusted}), binary=bytes(binary))


#: one encoder for every entry (``json.dumps`` with arguments would make one per call)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)
_Cut = Callable[[EntryMeta], bytes]  # the stored bytes of metadata as canonical's (check_meta)


def parse_json(raw: bytes | str, cut: _Cut | None = None) -> EntryMeta:
    """Metadata from its JSON text (an entry file's, a Redis hash's ``meta``), checked."""
    return check_meta(load_json(raw, "metadata", MAX_META), bounded=True, cut=cut)


def _bound(meta: dict[str, Any]) -> None:
    """No NaN or infinity anywhere, and at most :data:`MAX_META` bytes of content."""
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


def check_meta(meta: Any, bounded: bool = False, cut: _Cut | None = None) -> EntryMeta:
    """Check metadata however it was read (entry file, SQLite columns, Redis hash): a dict with
    every required field of its type (an optional one, when present, too), names as strings, no
    NaN or infinity anywhere, at most :data:`MAX_META` bytes of content (``bounded``: already
    known, as of metadata :func:`parse_json` read), its digest (over ``cut(meta)`` first, when
    given). Returns it typed; raises :class:`CorruptEntry` saying what is wrong."""
    if not isinstance(meta, dict):
        raise CorruptEntry("metadata is not a JSON object")
    typed: dict[str, Any] = {}
    for name, kinds, optional, is_float in _CHECKS:
        if optional and name not in meta:
            continue
        value: Any = meta.get(name)
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise CorruptEntry(f"metadata field {name!r} missing or of the wrong type")
        if isinstance(value, list):
            if not all(isinstance(k, str) for k in value):
                raise CorruptEntry(f"metadata field {name!r} holds a non-string")
            value = tuple(value)
        if is_float or isinstance(value, int):  # in range: never an OverflowError later
            value = (number if is_float else whole)(value, f"metadata field {name!r}")
        typed[name] = value
    if not bounded:
        _bound(meta)
    other = {k: v for k, v in meta.items() if k not in _NAMES}
    typed_meta = EntryMeta(**typed, other=other)
    _check_digest(typed_meta, cut)
    return typed_meta


_SEAL = frozenset({"digest", "signature"})


def canonical(meta: EntryMeta) -> bytes:
    """The bytes the digest and the signature cover: the stored metadata without them, with the
    format version, as sorted, spaceless, ASCII JSON."""
    doc = {k: v for k, v in meta.to_json().items() if k not in _SEAL}
    doc["format"] = FORMAT_VERSION
    return _CANONICAL.encode(doc).encode()


def _signed_parts(meta: EntryMeta, binary: Any) -> tuple[bytes, bytes, Any]:
    """What a signature covers: the metadata's length (so no other split of the same bytes
    signs the same), the canonical metadata, the binary."""
    raw = canonical(meta)
    return struct.pack("<Q", len(raw)), raw, binary


def seal(meta: EntryMeta, secret: Secret | None,
         binary: bytes | bytearray | memoryview | None = None) -> EntryMeta:
    """``meta`` with its digest, and its signature when a team ``secret`` is given (which then
    needs the entry's ``binary``: the signature covers it)."""
    raw = canonical(meta)
    if secret is not None and binary is None:
        raise ValueError("a signature covers the binary: seal(meta, secret, binary)")
    sig = "" if secret is None else secret.mac(*_signed_parts(meta, binary))
    return dataclasses.replace(meta, digest=checksum(raw), signature=sig)


def signed(meta: EntryMeta, secret: Secret, binary: bytes | bytearray | memoryview) -> bool | None:
    """Whether ``meta`` and ``binary`` carry a valid signature for ``secret``: ``None`` when
    unsigned."""
    if not meta.signature:
        return None
    good = secret.mac(*_signed_parts(meta, binary))
    return hmac.compare_digest(good, meta.signature)


def _check_digest(meta: EntryMeta, cut: _Cut | None = None) -> None:
    if meta.digest and not any(hmac.compare_digest(checksum(f(meta)), meta.digest)
                               for f in ((cut, canonical) if cut else (canonical,))):
        raise CorruptEntry("metadata does not match its digest: moved to another key or device, "
                           "or edited")


def check_binary(meta: EntryMeta, binary: bytes | bytearray | memoryview, key: str | None,
                 fingerprint: str | None) -> None:
    """Check a binary against checked metadata (XXH3-128, length, size bound) and the name it was
    filed under (``key``/``fingerprint`` when given); raise :class:`CorruptEntry`."""
    if len(binary) > MAX_BINARY:
        raise CorruptEntry(f"binary of {len(binary)} bytes is over the {MAX_BINARY} limit")
    if checksum(binary) != meta.binary_xxh3:
        raise CorruptEntry("binary checksum mismatch")
    if meta.binary_bytes != len(binary):
        raise CorruptEntry("binary length disagrees with the metadata")
    if key is not None and meta.key != key:
        raise CorruptEntry("entry is filed under another key")
    if fingerprint is not None and meta.fingerprint != fingerprint:
        raise CorruptEntry("entry is filed under another device")


def verified(meta: EntryMeta, binary: Any, key: str | None, fingerprint: str | None,
             usage: Usage = Usage()) -> Entry:
    """The entry of checked metadata and a stored binary, after the binary's checks (see
    :func:`check_binary`); raises :class:`CorruptEntry`."""
    if not isinstance(binary, bytes | bytearray | memoryview):
        raise CorruptEntry("binary missing")
    check_binary(meta, binary, key, fingerprint)
    return Entry(meta, usage, bytes(binary))
