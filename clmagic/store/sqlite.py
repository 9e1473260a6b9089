"""The SQLite store: one file holds every entry, with the metadata as real columns.

Cross-process safety is SQLite's own: WAL mode and a 5 s ``busy_timeout``, nothing else. A
file that cannot be written serves hits and stores nothing; the first failed write turns
writes off for the process with one warning. A file written by a newer clmagic (a higher schema
version) is never altered: it is not opened at all.
"""

from __future__ import annotations

import json
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
from ._common import meta_ok, stored_meta, valid_name, verified
from .base import Store
from .directory import hostile

__all__ = ["SQLiteStore", "SCHEMA_VERSION", "SUFFIXES"]

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 5000

#: metadata fields kept as real columns (the rest of the metadata goes to ``extra`` as JSON)
COLUMNS = ("options", "device", "platform", "driver", "build_ms", "source_bytes",
           "binary_bytes", "binary_sha256", "created")

SCHEMA = """
CREATE TABLE IF NOT EXISTS clmagic_schema (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    format        INTEGER NOT NULL,
    fingerprint   TEXT    NOT NULL,
    key           TEXT    NOT NULL,
    kernels       TEXT    NOT NULL,  -- JSON list of kernel names
    options       TEXT    NOT NULL,
    device        TEXT    NOT NULL,
    platform      TEXT    NOT NULL,
    driver        TEXT    NOT NULL,
    build_ms      REAL    NOT NULL,
    source_bytes  INTEGER NOT NULL,
    binary_bytes  INTEGER NOT NULL,
    binary_sha256 TEXT    NOT NULL,
    created       REAL    NOT NULL,
    last_used     REAL,
    hits          INTEGER NOT NULL DEFAULT 0,
    extra         TEXT    NOT NULL,  -- the other metadata (build log, versions) as JSON
    binary        BLOB    NOT NULL,
    PRIMARY KEY (format, fingerprint, key)
);
CREATE TABLE IF NOT EXISTS provenance (
    clmagic TEXT, pyopencl TEXT, sqlite TEXT, python TEXT, pid INTEGER, created REAL NOT NULL
);
"""

_META_COLS = "fingerprint, key, kernels, " + ", ".join(COLUMNS) + ", last_used, hits, extra"
_SIZE = "length(binary) + length(extra) + length(kernels) + length(options) + 96"
SQL_GET = (f"SELECT {_META_COLS}, binary FROM entries "
           "WHERE format = ? AND fingerprint = ? AND key = ?")
SQL_PUT = (f"INSERT OR REPLACE INTO entries (format, {_META_COLS}, binary) "
           f"VALUES (?{', ?' * (len(COLUMNS) + 7)})")
SQL_HIT = ("UPDATE entries SET hits = hits + 1, last_used = ? "
           "WHERE format = ? AND fingerprint = ? AND key = ?")
SQL_DELETE = "DELETE FROM entries WHERE format = ? AND fingerprint = ? AND key = ?"
SQL_LIST = f"SELECT {_META_COLS}, {_SIZE} FROM entries WHERE format = ?"
SQL_SIZE = f"SELECT count(*), coalesce(sum({_SIZE}), 0) FROM entries WHERE format = ?"
SQL_CLEAR = "DELETE FROM entries WHERE format = ?"


class SchemaTooNew(Exception):
    """The file was written by a newer clmagic."""


def row_meta(row: tuple[Any, ...]) -> dict[str, Any]:
    """Metadata from a row that starts with the columns of ``_META_COLS``."""
    fingerprint, key, kernels = row[0], row[1], row[2]
    extra = json.loads(row[len(COLUMNS) + 5])
    if not isinstance(extra, dict):
        raise ValueError("extra is not a JSON object")
    meta = dict(extra, key=key, fingerprint=fingerprint, kernels=json.loads(kernels))
    meta.update(zip(COLUMNS, row[3 : 3 + len(COLUMNS)], strict=True))
    return meta


def entry_row(entry: Entry, now: float) -> tuple[Any, ...]:
    """The values of ``SQL_PUT`` for one entry."""
    meta = stored_meta(entry)
    extra = {k: v for k, v in meta.items()
             if k not in COLUMNS and k not in ("key", "fingerprint", "kernels")}
    return (FORMAT_VERSION, entry.fingerprint, entry.key, json.dumps(meta.get("kernels", [])),
            *(meta.get(c) for c in COLUMNS), now, 0,
            json.dumps(extra, separators=(",", ":"), sort_keys=True), entry.binary)


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


def create_schema(conn: sqlite3.Connection) -> None:
    """Create the tables (idempotent, safe when several processes race)."""
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = schema_version(conn)
        if version is not None and version > SCHEMA_VERSION:
            raise SchemaTooNew(str(version))
        for stmt in SCHEMA.split(";"):
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
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
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
            self._conn = connect(self.path, read_only=not self.writable)
            self._pid = os.getpid()
            if self.writable:
                try:
                    create_schema(self._conn)
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
        """Run writes in one transaction; on failure turn writes off. Returns rows changed."""
        if not self.writable:
            return -1
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                changed = 0
                for sql, args in sql_rows:
                    changed += conn.execute(sql, args).rowcount
                if not self._provenance:
                    self._write_provenance(conn)
                conn.execute("COMMIT")
                return changed
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                self._disable_writes(str(exc))
                return -1

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
            except sqlite3.OperationalError as exc:
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
        entry.meta.update(hits=row[len(COLUMNS) + 4], last_used=row[len(COLUMNS) + 3],
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
            rows.append((SQL_PUT, entry_row(e, now)))
        changed = self._write(rows)
        return max(changed, 0)

    def record_hit(self, fingerprint: str, key: str) -> None:
        self._write([(SQL_HIT, (time.time(), FORMAT_VERSION, fingerprint, key))])

    def delete(self, fingerprint: str, key: str) -> bool:
        return self._write([(SQL_DELETE, (FORMAT_VERSION, fingerprint, key))]) > 0

    def _select(self, sql: str, fingerprint: str | None) -> list[tuple[Any, ...]]:
        args: tuple[Any, ...] = (FORMAT_VERSION,)
        if fingerprint:
            sql += " AND fingerprint = ?"
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
            meta.update(hits=row[len(COLUMNS) + 4], last_used=row[len(COLUMNS) + 3],
                        stored_bytes=row[-1], store=self.kind)
            yield Entry(key=meta["key"], fingerprint=meta["fingerprint"], meta=meta)

    def clear(self, fingerprint: str | None = None) -> tuple[int, int]:
        rows = self._select(SQL_SIZE, fingerprint)
        count, size = rows[0] if rows else (0, 0)
        args: tuple[Any, ...] = (FORMAT_VERSION,) + ((fingerprint,) if fingerprint else ())
        sql = SQL_CLEAR + (" AND fingerprint = ?" if fingerprint else "")
        if self._write([(sql, args)]) < 0:
            return 0, 0
        return int(count), int(size)

    def close(self) -> None:
        """Close this process's connection (reopened on next use)."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
