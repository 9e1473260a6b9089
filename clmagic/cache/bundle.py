"""Bundles: a cache in one SQLite file, to ship with a notebook or a course.

A bundle is a SQLite store file (see :mod:`clmagic.store.sqlite.store`) plus a ``manifest`` table
(clmagic version, created, devices with their fingerprints, entry count). Import treats the
file as untrusted: it is opened immutable and read-only, only plain tables are read, sizes are
bounded before anything is loaded, every binary's checksum is verified, nothing is executed,
and an entry already in the local cache is never overwritten. Every entry's seal is checked (its
digest: what it was built for); with a team secret (``CLMAGIC_CACHE_SECRET``) export signs every
entry, and import refuses (and counts) entries that are unsigned or signed with another secret.
Imported binaries that no valid signature vouches for are marked ``untrusted``: the first load
proves them loadable in a child process (:mod:`clmagic.opencl.vet`).

A bundle made by an older clmagic (entry format 1: SHA-256 checksums, HMAC signatures) is
refused as such, never reported as damaged or tampered: its entries are not converted, because
the cache key covers the format version, so this clmagic would never look them up.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clmagic._format import device_label
from clmagic._secret import Secret
from clmagic._version import __version__
from clmagic.entry import FORMAT_VERSION, MAX_BINARY, MAX_META, Entry
from clmagic.errors import ClmagicError, CorruptEntry
from clmagic.store._fs import open_regular
from clmagic.store.base import Store, valid_name
from clmagic.store.layered import LayeredStore
from clmagic.store.sqlite.store import SCHEMA_VERSION, SQLiteStore

__all__ = ["export_bundle", "import_bundle", "BundleReport", "ImportReport", "MAX_BUNDLE_BYTES"]

MAX_BUNDLE_BYTES = 4 << 30
MAX_ENTRIES = 200_000
_SQLITE_MAGIC = b"SQLite format 3\x00"
_BATCH = 200


@dataclass
class BundleReport:
    """What :func:`export_bundle` wrote: ``bytes`` is what those entries take in the cache,
    the one size ``ls``, ``info``, the statistics and a clear give the same entries."""

    path: str
    entries: int
    bytes: int
    devices: list[dict[str, Any]] = field(default_factory=list)
    failed: int = 0


@dataclass
class ImportReport:
    """What :func:`import_bundle` did: entries imported, skipped (already in the cache) and
    failed (with reasons), and the devices of the bundle this machine lacks."""

    path: str
    imported: int = 0
    skipped: int = 0
    failed: int = 0
    reasons: list[str] = field(default_factory=list)
    #: fingerprint → {"device": name, "entries": count} for devices not on this machine
    missing_devices: dict[str, dict[str, Any]] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)


def _store(store: Store | None) -> Store:
    if store is None:
        from clmagic.process.session import get_compiler

        store = get_compiler().store
    if store is None:
        raise ClmagicError("the cache is off (memory only): there is no cache to export or "
                           "import into; set CLMAGIC_CACHE_DIR")
    return store


def export_bundle(path: str | os.PathLike[str], device: object = None,
                  kernels: str | list[str] | None = None, *, store: Store | None = None,
                  overwrite: bool = False) -> BundleReport:
    """Write the cache's entries (of one ``device``, of programs defining any of ``kernels``)
    to one SQLite file at ``path``; returns a :class:`BundleReport`."""
    try:
        return _export(path, device, kernels, store, overwrite)
    except (OSError, sqlite3.Error) as exc:  # a path that cannot be written: one line
        raise ClmagicError(f"cannot write the bundle {path}: {exc}") from None


def _export(path: str | os.PathLike[str], device: object, kernels: str | list[str] | None,
            store: Store | None, overwrite: bool) -> BundleReport:
    source = _store(store)
    target = Path(path)
    if target.exists() and not overwrite:
        raise ClmagicError(f"{target} exists; choose another path or pass overwrite=True")
    fingerprint = None
    if device is not None:
        from clmagic.opencl.devices import resolve_device

        fingerprint = resolve_device(device)[0].fingerprint
    wanted = {kernels} if isinstance(kernels, str) else set(kernels or ())
    if not target.parent.is_dir():  # a folder is made only when asked for: say it is missing
        why = "is not a folder" if target.parent.exists() else "does not exist"
        raise ClmagicError(f"cannot write the bundle {path}: {target.parent} {why}")
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    bundle = SQLiteStore(tmp)
    bundle.secret = _secret(source)  # signed with the team secret, when there is one
    devices: dict[str, dict[str, Any]] = {}
    count = size = failed = 0
    batch: list[Entry] = []
    try:
        for listed in list(source.entries(fingerprint)):
            if wanted and not wanted & set(listed.kernels):
                continue
            try:
                entry = source.get(listed.fingerprint, listed.key)
            except CorruptEntry:
                failed += 1
                continue
            if entry is None:
                continue
            batch.append(entry)
            size += listed.usage.stored_bytes  # the one size of an entry, as listed
            d = devices.setdefault(entry.fingerprint, {
                "fingerprint": entry.fingerprint, "device": entry.meta.device,
                "platform": entry.meta.platform, "driver": entry.meta.driver, "entries": 0})
            d["entries"] += 1
            if len(batch) >= _BATCH:
                count += bundle.put_many(batch)
                batch.clear()
        count += bundle.put_many(batch)
        if not bundle.writable:
            raise ClmagicError(f"cannot write {target}: {bundle.reason}")
        bundle.seal({"clmagic": __version__, "created": time.time(), "format": FORMAT_VERSION,
                     "schema": SCHEMA_VERSION, "entries": count,
                     "devices": list(devices.values())})
        bundle.close()
        os.replace(tmp, target)
    finally:
        bundle.close()
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            leftover.unlink(missing_ok=True)
    return BundleReport(str(target), count, size, list(devices.values()), failed)


def _open_untrusted(path: Path) -> SQLiteStore:
    try:
        fd = open_regular(path, follow=True)  # a FIFO is named, never waited on
        with os.fdopen(fd, "rb") as fh:
            size = os.fstat(fd).st_size
            head = fh.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise ClmagicError(f"cannot read bundle {path}: {exc.strerror}") from None
    if size > MAX_BUNDLE_BYTES:
        raise ClmagicError(f"bundle {path} is {size:,} bytes, over the {MAX_BUNDLE_BYTES:,} limit")
    if head != _SQLITE_MAGIC:
        raise ClmagicError(f"{path} is not a clmagic bundle (not an SQLite file)")
    bundle = None
    try:
        bundle = SQLiteStore.untrusted(path)
        kinds = bundle.tables()
        if any(kinds.get(t) != "table" for t in ("entries", "manifest", "clmagic_schema")):
            raise ClmagicError(f"{path} is not a clmagic bundle (tables missing)")
        version = bundle.schema()
    except (sqlite3.Error, ClmagicError) as exc:
        if bundle is not None:
            bundle.close()
        if isinstance(exc, ClmagicError):
            raise
        raise ClmagicError(f"{path} is not a readable clmagic bundle ({exc})") from None
    if version != SCHEMA_VERSION:
        bundle.close()
        raise ClmagicError(f"bundle {path} has schema {version}; this clmagic reads "
                           f"{SCHEMA_VERSION}")
    return bundle


def import_bundle(path: str | os.PathLike[str], *, store: Store | None = None) -> ImportReport:
    """Add the entries of bundle ``path`` to the local cache (never overwriting an entry that is
    already there); returns an :class:`ImportReport`."""
    target = _store(store)
    if isinstance(target, LayeredStore):
        target = target.local  # an untrusted file goes to this machine only, not the team's
    if not target.writable:
        raise ClmagicError(f"the cache at {target.location} is read-only ({target.reason})")
    bundle = Path(path)
    source = _open_untrusted(bundle)
    source.shared, source.secret = True, _secret(target)  # written by anyone: vetted as such
    report = ImportReport(str(bundle))
    try:
        _check_format(source, bundle, report)
        for name, value in source.manifest(limit=100):
            if isinstance(value, str) and len(value) <= MAX_META:
                try:
                    report.manifest[str(name)] = json.loads(value)
                except (ValueError, RecursionError):
                    pass
        _import_rows(source, source.sizes(limit=MAX_ENTRIES + 1), target, report)
    except sqlite3.Error as exc:
        report.failed += 1
        report.reasons.append(f"the bundle is damaged ({exc})")
    finally:
        source.close()
    return report


def _check_format(source: SQLiteStore, path: Path, report: ImportReport) -> None:
    """Refuse a bundle holding only entries of other formats (an older clmagic's) in one line
    that says so; one that also holds this format's has the others counted as not imported."""
    try:
        formats = source.formats()
    except sqlite3.Error:
        return  # the import's own reads say what is wrong with the file
    others = {f: n for f, n in formats.items() if f != FORMAT_VERSION}
    if not others:
        return
    which = ", ".join(str(f) for f in sorted(others))
    age = "an older" if max(others) < FORMAT_VERSION else "another"
    if FORMAT_VERSION not in formats:
        raise ClmagicError(f"bundle {path} was made by {age} clmagic (format {which}; this one "
                           f"writes {FORMAT_VERSION}): nothing imported. Export it again with "
                           "this clmagic (cache keys changed with the format, so its entries "
                           "would never be looked up)")
    report.failed += sum(others.values())
    report.reasons.append(f"{sum(others.values())} entries of format {which} ({age} clmagic's) "
                          "not imported")


def _import_rows(source: SQLiteStore, rows: list[tuple[Any, ...]], target: Store,
                 report: ImportReport) -> None:
    if len(rows) > MAX_ENTRIES:
        raise ClmagicError(f"bundle holds over {MAX_ENTRIES:,} entries; not importing it")
    try:
        from clmagic.opencl.devices import list_devices

        here = {d.fingerprint for d in list_devices()}
    except ClmagicError:
        here = set()
    missing: Counter[str] = Counter()
    names: dict[str, str] = {}
    batch: list[Entry] = []

    def fail(why: str) -> None:
        report.failed += 1
        report.reasons.append(why)

    for fp, key, bin_len, meta_len in rows:
        if not (isinstance(fp, str) and isinstance(key, str) and valid_name(fp, key)):
            fail(f"an entry with a malformed name {str(key)[:16]!r}")
            continue
        if not isinstance(bin_len, int) or not isinstance(meta_len, int) or (
                bin_len > MAX_BINARY or meta_len > MAX_META):
            fail(f"{key[:12]}: over the size limits")
            continue
        try:
            entry = source.read(fp, key)
        except CorruptEntry as exc:
            fail(f"{key[:12]}: {exc}")
            continue
        if entry is None:
            continue
        if entry.foreign:  # proven loadable before this machine loads it (or signed)
            entry = Entry(dataclasses.replace(entry.meta, untrusted=f"bundle {source.path.name}"),
                          binary=entry.binary)
        try:
            present = target.get(fp, key) is not None
        except CorruptEntry:
            present = False  # a damaged local copy may be replaced
        if present:
            report.skipped += 1
            continue
        if fp not in here:
            missing[fp] += 1
            names[fp] = device_label(entry.meta.platform, entry.meta.device, entry.meta.driver)
        batch.append(entry)
        if len(batch) >= _BATCH:
            _flush(target, batch, report)
    _flush(target, batch, report)
    report.missing_devices = {fp: {"device": names[fp], "entries": n}
                              for fp, n in missing.items()}


def _secret(store: Store) -> Secret | None:
    """The team secret a store was opened with (a layered store's: its local layer's)."""
    return (store.local if isinstance(store, LayeredStore) else store).secret


def _flush(target: Store, batch: list[Entry], report: ImportReport) -> None:
    if not batch:
        return
    stored = target.put_many(batch)
    report.imported += stored
    if stored < len(batch):
        report.failed += len(batch) - stored
        report.reasons.append(f"the cache refused {len(batch) - stored} entries "
                              f"({target.reason or 'write failed'})")
    batch.clear()
