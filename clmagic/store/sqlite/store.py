"""The SQLite store: one file holds every entry, with the metadata as real columns.

Cross-process safety is SQLite's own: WAL mode and a 5 s ``busy_timeout``, nothing else. Use counts
live in their own ``usage`` table, so a hit writes one small row and never the entry (nor its
binary); a count that would wait more than 50 ms for another writer is dropped. A file that cannot
be written serves hits and stores nothing; a failed write turns writes off for the process with one
warning, except a lock held by another process, which only drops that one write; three in a row
pause writes for ``LOCK_PAUSE_S`` (no build waits on the lock meanwhile), then they are tried
again: a lock is transient, never the end of saving. A file written by a newer clmagic (a higher
schema version) is never altered: it is not opened at all. The same file, sealed with a manifest,
is a bundle (:mod:`clmagic.cache.bundle`), read back through :meth:`SQLiteStore.untrusted`.

This module is the store (open, the contract, the bundle side); the connection, write
transactions and the lock policy are :mod:`~clmagic.store.sqlite.file`, the schema and statements
:mod:`~clmagic.store.sqlite.sql`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from clmagic._valid import count_or
from clmagic._warn import warn_once
from clmagic.config import SQLITE_SUFFIXES as SUFFIXES
from clmagic.entry import FORMAT_VERSION, Entry, sane_time, verified
from clmagic.errors import CorruptEntry
from clmagic.store._fs import private_file, private_folder, refusal
from clmagic.store.base import Use, valid_name
from clmagic.store.sqlite.file import LOCK_PAUSE_S, MAX_LOCKED, SQLiteFile
from clmagic.store.sqlite.sql import (
    BUSY_TIMEOUT_MS,
    SCHEMA_VERSION,
    SQL_CLEAR,
    SQL_CODE_CLEAR,
    SQL_CODE_DELETE,
    SQL_CODE_GET,
    SQL_CODE_PUT,
    SQL_DELETE,
    SQL_GET,
    SQL_HIT,
    SQL_LIST,
    SQL_PUT,
    SQL_READ,
    SQL_SIZE,
    SQL_SIZES,
    SQL_USE_CLEAR,
    SQL_USE_DELETE,
    SQL_USE_RESET,
    SQL_USES,
    SchemaTooNew,
    connect,
    entry_row,
    is_locked,
    row_meta,
    row_size,
    row_usage,
    schema_version,
)

__all__ = ["SQLiteStore", "SCHEMA_VERSION", "SUFFIXES", "MAX_LOCKED", "LOCK_PAUSE_S",
           "HIT_TIMEOUT_MS"]

#: how long a hit count waits for another writer before it is dropped (counts are advisory)
HIT_TIMEOUT_MS = 50
_ROW_ERRORS = (ValueError, TypeError, CorruptEntry)


class SQLiteStore(SQLiteFile):
    """Entries as rows of one SQLite file (see the module docstring)."""

    kind = "sqlite"
    signed_only = True  # a cache file is what people copy to each other

    @classmethod
    def open(cls, path: str | os.PathLike[str], trust: bool = False) -> SQLiteStore | None:
        """The store in file ``path`` (created, with its folder, if missing); ``None`` after one
        warning when the file cannot be used, or when it or its folder is world-writable or
        another user's and ``trust`` is not set. A file that cannot be written is opened
        read-only; one of a newer schema is left untouched and not used."""
        path = Path(path)
        try:
            if not path.parent.exists():
                private_folder(path.parent)
            why = refusal(path.parent, path)
            shared, why = why is not None, None if trust else why
            if why:
                warn_once(f"cache file {path} refused: {why}; caching in memory only "
                          "(set CLMAGIC_CACHE_TRUST=1 to use it anyway)")
                return None
            private_file(path)
            read_only = not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))
            with connect(path, read_only=True) as probe:
                version = schema_version(probe)
            probe.close()
            if version is not None and version > SCHEMA_VERSION:
                raise SchemaTooNew(str(version))
            store = cls(path, read_only=read_only)
            store.shared = shared  # others can write it: used through CLMAGIC_CACHE_TRUST=1
        except SchemaTooNew as exc:
            warn_once(f"cache file {path} has schema {exc}, newer than this clmagic reads "
                      f"({SCHEMA_VERSION}); left untouched, caching in memory only")
            return None
        except (OSError, sqlite3.Error) as exc:
            warn_once(f"cache file {path} cannot be used ({exc}); caching in memory only")
            return None
        if read_only:
            warn_once(f"cache {path} is read-only (the file is not writable): "
                      "hits are served, nothing is saved")
        return store

    @classmethod
    def untrusted(cls, path: Path) -> SQLiteStore:
        """A file from elsewhere (a bundle), opened immutable and read-only: nothing in it is
        executed (``trusted_schema`` off, query-only) and nothing beside it is written. Raises
        ``sqlite3.Error`` for a file SQLite cannot read."""
        return cls(path, immutable=True)

    # -- the contract -------------------------------------------------------------------------

    def get(self, fingerprint: str, key: str) -> Entry | None:
        with self._lock:
            try:
                row = self._connection().execute(
                    SQL_GET, (FORMAT_VERSION, fingerprint, key)).fetchone()
            except (sqlite3.OperationalError, OSError) as exc:
                warn_once(f"cache {self.path} cannot be read ({exc}); building instead")
                return None
            except sqlite3.DatabaseError as exc:
                raise CorruptEntry(f"sqlite: {exc}") from None
        if row is None:
            return None
        try:
            meta = row_meta(row)
        except (ValueError, TypeError) as exc:
            raise CorruptEntry(f"metadata cannot be read: {exc}") from None
        return self._vet(verified(meta, row[-1], key, fingerprint, row_usage(row, self.kind)))

    def put_many(self, entries: Iterable[Entry]) -> int:
        """Store several entries in one transaction; returns how many were stored."""
        now = time.time()
        rows = []
        count = added = 0
        for e in entries:
            self._check_name(e.fingerprint, e.key)
            if e.binary is None:
                raise ValueError(f"cannot store entry {e.key} without its binary")
            e = self._sealed(e)
            row = entry_row(e)
            size = row_size(row)
            if not self._fits(e, size):
                continue
            added += size
            rows.append((SQL_PUT, row))
            rows.append((SQL_USE_RESET, (FORMAT_VERSION, e.fingerprint, e.key, now)))
            if valid_name(e.fingerprint, e.meta.code_key):
                rows.append((SQL_CODE_PUT, (FORMAT_VERSION, e.fingerprint, e.meta.code_key,
                                            e.key)))
            count += 1
        if not rows or self._write(rows) < 0:
            return 0
        self._saved(added)
        return count

    def find_code(self, fingerprint: str, code_key: str) -> Entry | None:
        """The entry the ``code_keys`` table names for ``code_key``, if it is there and really
        of that code (a file without the table, as written before it existed: ``None``)."""
        if not valid_name(fingerprint, code_key):
            return None
        with self._lock:
            try:
                row = self._connection().execute(
                    SQL_CODE_GET, (FORMAT_VERSION, fingerprint, code_key)).fetchone()
            except (sqlite3.Error, OSError):
                return None
        return None if row is None else self._code_target(fingerprint, code_key, row[0])

    @property
    def stats_folder(self) -> Path:
        """A folder beside the file (``cache.db.stats``): counting needs no write lock."""
        return self.path.with_name(self.path.name + ".stats")

    def usage_list(self) -> list[Use]:
        """Every entry's last use and size, from the columns (no metadata parsed), of this
        format and the older ones (so that an older clmagic's entries age out)."""
        return [Use(sane_time(last) or 0.0, count_or(size), fp, key, (form, created))
                for fp, key, size, last, created, form in self._select(SQL_USES, None)]

    def remove_uses(self, victims: list[Use]) -> list[Use]:
        """Delete these entries in one transaction, each unless it was saved again since it
        was listed (its ``created`` changed); the token says its format and build time."""
        gone: list[Use] = []

        def work(conn: sqlite3.Connection) -> int:
            gone.clear()
            for v in victims:
                if not (isinstance(v.token, tuple) and len(v.token) == 2):
                    continue  # listed by no usage_list of this store
                form, created = v.token
                args = (form, v.fingerprint, v.key)
                if conn.execute(SQL_DELETE + " AND created = ?", (*args, created)).rowcount:
                    conn.execute(SQL_USE_DELETE, args)
                    conn.execute(SQL_CODE_DELETE, args)
                    gone.append(v)
            return len(gone)

        return list(gone) if self._transact(work) >= 0 else []

    def record_hit(self, fingerprint: str, key: str, when: float | None = None) -> None:
        """Count a hit in the ``usage`` table (the entry row is not touched). Counts are
        advisory: waiting at most ``HIT_TIMEOUT_MS`` for another writer, a count that cannot be
        written is dropped, and it never turns writes off."""
        if not self.writable:
            return
        with self._lock:
            conn = None
            try:
                conn = self._connection()
                conn.execute(f"PRAGMA busy_timeout = {HIT_TIMEOUT_MS}")
                try:
                    conn.execute(SQL_HIT, (when or time.time(), FORMAT_VERSION, fingerprint, key))
                finally:
                    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            except sqlite3.Error as exc:
                self._rollback(conn)
                if not is_locked(exc):
                    warn_once(f"cache {self.path} could not count a hit ({exc})")
            except OSError as exc:
                warn_once(f"cache {self.path} could not count a hit ({exc})")

    def delete(self, fingerprint: str, key: str) -> bool:
        args = (FORMAT_VERSION, fingerprint, key)
        return self._write([(SQL_DELETE, args), (SQL_USE_DELETE, args),
                            (SQL_CODE_DELETE, args)]) > 0

    def entries(self, fingerprint: str | None = None) -> Iterator[Entry]:
        for row in self._select(SQL_LIST, fingerprint):
            try:
                yield Entry(row_meta(row), row_usage(row, self.kind))
            except _ROW_ERRORS:
                continue

    def clear(self, fingerprint: str | None = None) -> tuple[int, int]:
        rows = self._select(SQL_SIZE, fingerprint)
        count, size = rows[0] if rows else (0, 0)
        args: tuple[Any, ...] = (FORMAT_VERSION,) + ((fingerprint,) if fingerprint else ())
        where = " AND fingerprint = ?" if fingerprint else ""
        if self._write([(SQL_CLEAR + where, args), (SQL_USE_CLEAR + where, args),
                        (SQL_CODE_CLEAR + where, args)]) < 0:
            return 0, 0
        return int(count), int(size)

    # -- bundles: the same file, sealed with a manifest --------------------------------------

    def seal(self, manifest: dict[str, Any]) -> None:
        """Make this file a bundle: drop this machine's use counts, add ``manifest`` (values as
        JSON) and leave one self-contained file (no WAL). Raises ``sqlite3.Error``."""
        with self._lock:
            conn = self._connection()
            conn.execute("DELETE FROM usage")
            conn.execute("CREATE TABLE manifest (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.executemany("INSERT INTO manifest VALUES (?, ?)",
                             [(k, json.dumps(v)) for k, v in manifest.items()])
            conn.execute("PRAGMA journal_mode = DELETE")

    def tables(self) -> dict[str, str]:
        """Name → kind (table, view, trigger, ...) of everything in the file's schema."""
        return {str(n): str(t) for n, t in self._query("SELECT name, type FROM sqlite_master")}

    def schema(self) -> int | None:
        """The file's schema version (``None`` when it has none)."""
        value = self._query("SELECT max(version) FROM clmagic_schema")[0][0]
        return value if isinstance(value, int) else None

    def manifest(self, limit: int) -> list[tuple[Any, Any]]:
        """At most ``limit`` raw (name, value) rows of a bundle's manifest, unchecked."""
        return [(r[0], r[1]) for r in self._query(f"SELECT name, value FROM manifest "
                                                 f"LIMIT {int(limit)}")]

    def formats(self) -> dict[int, int]:
        """Format version → how many entries of it the file holds (a bundle made by an older
        clmagic holds none of this one's). Raises ``sqlite3.Error``."""
        return {int(f): int(n) for f, n in self._query(
            "SELECT format, count(*) FROM entries GROUP BY format LIMIT 100")
            if isinstance(f, int) and isinstance(n, int)}

    def sizes(self, limit: int) -> list[tuple[Any, ...]]:
        """(fingerprint, key, binary bytes, text bytes) of at most ``limit`` rows, unchecked:
        what to bound before any row is read whole."""
        return self._query(SQL_SIZES, (FORMAT_VERSION, int(limit)))

    def read(self, fingerprint: str, key: str) -> Entry | None:
        """One entry without usage, verified like :meth:`get` (for bundles, whose file has no
        usage); raises :class:`CorruptEntry`."""
        row = self._query(SQL_READ, (FORMAT_VERSION, fingerprint, key))
        if not row:
            return None
        try:
            return self._vet(verified(row_meta(row[0]), row[0][-1], key, fingerprint))
        except (ValueError, TypeError) as exc:
            raise CorruptEntry(str(exc)) from None
