"""The SQLite store: one file holds every entry, with the metadata as real columns.

Cross-process safety is SQLite's own: WAL mode and a 5 s ``busy_timeout``, nothing else. Use
counts live in their own ``usage`` table, so a hit writes one small row and never the entry (nor
its binary); a count that would wait more than 50 ms for another writer is dropped. A file that
cannot be written serves hits and stores nothing; a failed write turns writes off for the process
with one warning, except a lock held by another process, which only drops that one write (until
it happens three times in a row). A file written by a newer clmagic (a higher schema
version) is never altered: it is not opened at all.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..config import warn_once
from ..entry import FORMAT_VERSION, Entry
from ..errors import CorruptEntry
from . import SUFFIXES  # the endings that select this store, re-exported
from ._common import meta_ok, valid_name, verified
from .base import Store
from .directory import hostile
from .sqlite_sql import (
    _HITS,
    _LAST,
    SCHEMA,
    SQL_CLEAR,
    SQL_DELETE,
    SQL_GET,
    SQL_HIT,
    SQL_LIST,
    SQL_PUT,
    SQL_READ,
    SQL_SIZE,
    SQL_USE_CLEAR,
    SQL_USE_DELETE,
    SQL_USE_RESET,
    entry_row,
    row_meta,
)

__all__ = ["SQLiteStore", "SCHEMA_VERSION", "SUFFIXES", "SQL_GET", "SQL_READ", "SQL_PUT",
           "row_meta", "entry_row"]

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 5000
#: how long a hit count waits for another writer before it is dropped (counts are advisory)
HIT_TIMEOUT_MS = 50
#: lock timeouts in a row after which writes are turned off (each one cost BUSY_TIMEOUT_MS)
MAX_LOCKED = 3

class SchemaTooNew(Exception):
    """The file was written by a newer clmagic."""


def connect(path: Path, read_only: bool) -> sqlite3.Connection:
    """A connection with the busy timeout set; ``read_only`` opens with ``mode=ro`` (and, when
    even the WAL index cannot be made, as immutable)."""
    uri = path.resolve().as_uri()
    if read_only:
        try:
            conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000,
                                   isolation_level=None, check_same_thread=False)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError:
            conn = sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None,
                                   check_same_thread=False)
    else:
        conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                               check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA trusted_schema = OFF")
    return conn


def schema_version(conn: sqlite3.Connection) -> int | None:
    """The file's schema version, ``None`` for a file without clmagic tables yet."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "clmagic_schema" not in tables:
        if tables - {"provenance", "manifest"}:
            raise sqlite3.DatabaseError("not a clmagic cache (other tables inside)")
        return None
    row = conn.execute("SELECT max(version) FROM clmagic_schema").fetchone()
    return int(row[0]) if row and row[0] is not None else None


def is_locked(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is another connection holding a lock (``SQLITE_BUSY``/``SQLITE_LOCKED``):
    a transient condition, not a broken file."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def has_tables(conn: sqlite3.Connection) -> bool:
    """Whether every table of the schema is there (a read: no lock taken)."""
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    return {"clmagic_schema", "entries", "usage", "provenance"} <= names


def create_schema(conn: sqlite3.Connection) -> None:
    """Create the tables a file lacks (safe when several processes race; a file
    of a newer schema is left untouched)."""
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = schema_version(conn)
        if version is not None and version > SCHEMA_VERSION:
            raise SchemaTooNew(str(version))
        for stmt in SCHEMA.split(";"):  # IF NOT EXISTS: adds what a pre-release file lacks
            if stmt.strip():
                conn.execute(stmt)
        if version is None:
            conn.execute("INSERT INTO clmagic_schema (version) VALUES (?)", (SCHEMA_VERSION,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


class SQLiteStore(Store):
    """Entries as rows of one SQLite file (see the module docstring)."""

    kind = "sqlite"

    def __init__(self, path: str | os.PathLike[str], read_only: bool = False):
        self.path = Path(path)
        self.writable = not read_only
        self.reason = "the file is read-only" if read_only else ""
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._provenance = False
        self._locked = 0  # lock timeouts in a row
        self._connection()

    @classmethod
    def open(cls, path: str | os.PathLike[str], trust: bool = False) -> SQLiteStore | None:
        """The store in file ``path`` (created, with its folder, if missing); ``None`` after one
        warning when the file cannot be used, or when it or its folder is world-writable or
        another user's and ``trust`` is not set. A file that cannot be written is opened
        read-only; one of a newer schema is left untouched and not used."""
        path = Path(path)
        try:
            if not path.parent.exists():
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            why = None if trust else (hostile(path.parent) or (
                hostile(path) if path.exists() else None))
            if why:
                warn_once(f"cache file {path} refused: {why}; caching in memory only "
                          "(set CLMAGIC_CACHE_TRUST=1 to use it anyway)")
                return None
            if not path.exists():
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
            read_only = not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))
            with connect(path, read_only=True) as probe:
                version = schema_version(probe)
            probe.close()
            if version is not None and version > SCHEMA_VERSION:
                raise SchemaTooNew(str(version))
            store = cls(path, read_only=read_only)
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

    @property
    def location(self) -> str:
        return str(self.path)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():  # a forked child opens its own
            conn = connect(self.path, read_only=not self.writable)
            self._conn, self._pid = conn, os.getpid()
            if self.writable and not has_tables(conn):  # a new file: one write lock, once
                try:
                    create_schema(conn)
                except sqlite3.OperationalError as exc:
                    self._disable_writes(str(exc))
        return self._conn

    def _disable_writes(self, why: str) -> None:
        if self.writable:
            self.writable = False
            self.reason = why
            warn_once(f"cache {self.path}: writing failed ({why}); "
                      "hits are served, nothing more is saved in this process")

    def _write(self, sql_rows: Iterable[tuple[str, tuple[Any, ...]]]) -> int:
        """Run writes in one transaction. Returns rows changed, or -1 when nothing was written.

        Another process holding the lock past the busy timeout is transient: this write is
        dropped (with one warning) and writes stay on, unless it happens ``MAX_LOCKED`` times in
        a row (then every save would wait ``BUSY_TIMEOUT_MS`` for nothing, so writes go off).
        Any other failure (disk full, damaged file, a refusing trigger) turns writes off."""
        if not self.writable:
            return -1
        with self._lock:
            conn = None
            try:
                conn = self._connection()
                conn.execute("BEGIN IMMEDIATE")
                changed = 0
                for sql, args in sql_rows:
                    changed += conn.execute(sql, args).rowcount
                if not self._provenance:
                    self._write_provenance(conn)
                conn.execute("COMMIT")
                self._locked = 0
                return changed
            except sqlite3.Error as exc:
                self._rollback(conn)
                if is_locked(exc) and self._locked + 1 < MAX_LOCKED:
                    self._locked += 1
                    warn_once(f"cache {self.path} is locked by another process ({exc}); "
                              "this build is not saved")
                else:
                    self._disable_writes(str(exc))
                return -1
            except OSError as exc:  # the file or its folder went away under a reconnect
                self._disable_writes(str(exc))
                return -1

    @staticmethod
    def _rollback(conn: sqlite3.Connection | None) -> None:
        try:
            if conn is not None and conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite rolled back already

    def _write_provenance(self, conn: sqlite3.Connection) -> None:
        from .. import __version__

        try:
            import pyopencl

            pyopencl_version = pyopencl.VERSION_TEXT
        except Exception:  # noqa: BLE001 - provenance is informational only
            pyopencl_version = ""
        conn.execute(
            "INSERT INTO provenance VALUES (?, ?, ?, ?, ?, ?)",
            (__version__, pyopencl_version, sqlite3.sqlite_version, sys.version.split()[0],
             os.getpid(), time.time()),
        )
        self._provenance = True

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
        entry = verified(key, fingerprint, meta, row[-1])
        entry.meta.update(hits=row[_HITS], last_used=row[_LAST],
                          stored_bytes=len(row[-1]), store=self.kind)
        return entry

    def put(self, entry: Entry) -> bool:
        return self.put_many([entry]) == 1

    def put_many(self, entries: Iterable[Entry]) -> int:
        """Store several entries in one transaction; returns how many were stored."""
        now = time.time()
        rows = []
        for e in entries:
            if e.binary is None or not valid_name(e.fingerprint, e.key):
                raise ValueError(f"bad entry {e.fingerprint!r}/{e.key!r}")
            rows.append((SQL_PUT, entry_row(e)))
            rows.append((SQL_USE_RESET, (FORMAT_VERSION, e.fingerprint, e.key, now)))
        if self._write(rows) < 0:
            return 0
        return len(rows) // 2

    def record_hit(self, fingerprint: str, key: str) -> None:
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
                    conn.execute(SQL_HIT, (time.time(), FORMAT_VERSION, fingerprint, key))
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
        return self._write([(SQL_DELETE, args), (SQL_USE_DELETE, args)]) > 0

    def _select(self, sql: str, fingerprint: str | None) -> list[tuple[Any, ...]]:
        args: tuple[Any, ...] = (FORMAT_VERSION,)
        if fingerprint:
            sql += " AND e.fingerprint = ?"
            args += (fingerprint,)
        with self._lock:
            try:
                return self._connection().execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                warn_once(f"cache {self.path} cannot be listed ({exc})")
                return []

    def entries(self, fingerprint: str | None = None) -> Iterator[Entry]:
        for row in self._select(SQL_LIST, fingerprint):
            try:
                meta = row_meta(row)
            except (ValueError, TypeError):
                continue
            if not meta_ok(meta):
                continue
            meta.update(hits=row[_HITS], last_used=row[_LAST],
                        stored_bytes=row[-1], store=self.kind)
            yield Entry(key=meta["key"], fingerprint=meta["fingerprint"], meta=meta)

    def clear(self, fingerprint: str | None = None) -> tuple[int, int]:
        rows = self._select(SQL_SIZE, fingerprint)
        count, size = rows[0] if rows else (0, 0)
        args: tuple[Any, ...] = (FORMAT_VERSION,) + ((fingerprint,) if fingerprint else ())
        where = " AND fingerprint = ?" if fingerprint else ""
        if self._write([(SQL_CLEAR + where, args), (SQL_USE_CLEAR + where, args)]) < 0:
            return 0, 0
        return int(count), int(size)

    def close(self) -> None:
        """Close this process's connection (reopened on next use)."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
