"""Bundles: a cache in one SQLite file, to ship with a notebook or a course.

A bundle is a SQLite store file (see :mod:`clmagic.store.sqlite.store`) plus a ``manifest`` table
(clmagic version, created, devices with their fingerprints, entry count). Import treats the
file as untrusted: it is opened immutable and read-only, only plain tables are read, sizes are
bounded before anything is loaded, every binary's checksum is verified, nothing is executed,
and an entry already in the local cache is never overwritten. Every entry's seal is checked (its
digest: what it was built for); with a team secret (``CLMAGIC_CACHE_SECRET``) export signs every
entry, and import refuses (and counts) entries that are unsigned or signed with another secret.
Imported binaries that no valid signature vouches for are proven loadable in a child process
as they are imported (:mod:`clmagic.cache.proof`), so a binary that crashes the driver is
refused at the import and a good one costs nothing more on its first HIT; those for devices
this machine lacks are kept marked ``untrusted``, to be proven where they are used.

A bundle made by an older clmagic (entry format 1: SHA-256 checksums, HMAC signatures) is
refused as such, never reported as damaged or tampered: its entries are not converted, because
the cache key covers the format version, so this clmagic would never look them up.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clmagic._format import device_label
from clmagic._secret import Secret
from clmagic._valid import load_json
from clmagic._version import __version__
from clmagic.cache.proof import prove_entries
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
    #: of the imported, those whose binary was proven loadable here as it was imported
    proven: int = 0
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


def import_bundle(path: str | os.PathLike[str], *, store: Store | None = None,
                  progress: Callable[[int, int], None] | None = None,
                  jobs: int | None = None) -> ImportReport:
    """Add the entries of bundle ``path`` to the local cache (never overwriting an entry that is
    already there), each binary for a device of this machine proven loadable in a child process
    first (``jobs`` at a time: :func:`clmagic.cache.proof.prove_entries`); returns an
    :class:`ImportReport`. ``progress(done, total)`` is called as each entry is settled."""
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
            try:  # the contract's reader: a row it refuses is left out of the report
                report.manifest[str(name)] = load_json(value, "a manifest row", MAX_META)
            except CorruptEntry:
                pass
        rows = source.sizes(limit=MAX_ENTRIES + 1)
        _Import(target, report, _devices_here(), progress, len(rows), jobs).rows(source, rows)
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


def _devices_here() -> set[str]:
    try:
        from clmagic.opencl.devices import list_devices

        return {d.fingerprint for d in list_devices()}
    except ClmagicError:
        return set()


@dataclass
class _Import:
    """One import's way through the bundle's rows: what it adds to ``target``, counted in
    ``report``, proven for the devices ``here``, each row's end told to ``progress``."""

    target: Store
    report: ImportReport
    here: set[str]
    progress: Callable[[int, int], None] | None
    total: int
    jobs: int | None
    done: int = 0
    missing: Counter[str] = field(default_factory=Counter)
    names: dict[str, str] = field(default_factory=dict)

    def step(self) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total)

    def fail(self, why: str) -> None:
        self.report.failed += 1
        self.report.reasons.append(why)
        self.step()

    def rows(self, source: SQLiteStore, rows: list[tuple[Any, ...]]) -> None:
        if len(rows) > MAX_ENTRIES:
            raise ClmagicError(f"bundle holds over {MAX_ENTRIES:,} entries; not importing it")
        batch: list[Entry] = []
        for fp, key, bin_len, meta_len in rows:
            entry = self.read(source, fp, key, bin_len, meta_len)
            if entry is not None:
                batch.append(entry)
            if len(batch) >= _BATCH:
                self.flush(batch)
        self.flush(batch)
        self.report.missing_devices = {fp: {"device": self.names[fp], "entries": n}
                                       for fp, n in self.missing.items()}

    def read(self, source: SQLiteStore, fp: Any, key: Any, bin_len: Any,
             meta_len: Any) -> Entry | None:
        """One row's entry to import, or ``None`` (failed, absent, or already cached)."""
        if not (isinstance(fp, str) and isinstance(key, str) and valid_name(fp, key)):
            self.fail(f"an entry with a malformed name {str(key)[:16]!r}")
            return None
        if not isinstance(bin_len, int) or not isinstance(meta_len, int) or (
                bin_len > MAX_BINARY or meta_len > MAX_META):
            self.fail(f"{key[:12]}: over the size limits")
            return None
        try:
            entry = source.read(fp, key)
        except CorruptEntry as exc:
            self.fail(f"{key[:12]}: {exc}")
            return None
        try:
            present = entry is not None and self.target.get(fp, key) is not None
        except CorruptEntry:
            present = False  # a damaged local copy may be replaced
        if entry is None or present:
            self.report.skipped += present
            self.step()
            return None
        if fp not in self.here:
            self.missing[fp] += 1
            self.names[fp] = device_label(entry.meta.platform, entry.meta.device,
                                          entry.meta.driver)
        if not entry.foreign:  # signed with the team secret: nothing to prove
            return entry
        came = f"bundle {source.path.name}"  # where it came from, until proven here
        return Entry(dataclasses.replace(entry.meta, untrusted=came), binary=entry.binary,
                     foreign=came)

    def flush(self, batch: list[Entry]) -> None:
        """Prove the batch's binaries, store those that load, count those that do not."""
        if not batch:
            return
        proofs = prove_entries(batch, self.here, self.step, self.jobs)
        batch.clear()
        self.report.failed += len(proofs.refused)
        self.report.reasons.extend(proofs.refused)
        if not proofs.entries:
            return
        stored = self.target.put_many(proofs.entries)
        self.report.imported += stored
        self.report.proven += proofs.proven if stored == len(proofs.entries) else 0
        if stored < len(proofs.entries):
            self.report.failed += len(proofs.entries) - stored
            self.report.reasons.append(f"the cache refused {len(proofs.entries) - stored} "
                                       f"entries ({self.target.reason or 'write failed'})")


def _secret(store: Store) -> Secret | None:
    """The team secret a store was opened with (a layered store's: its local layer's)."""
    return (store.local if isinstance(store, LayeredStore) else store).secret
