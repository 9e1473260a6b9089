"""The SQLite store's file: schema, statements, connections, and the conversions between rows
and entries (used by :mod:`clmagic.store.sqlite.store` only; bundles go through the store)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from clmagic._valid import count_or, load_json
from clmagic.entry import (
    FORMAT_VERSION,
    MAX_META,
    SQL_FIELDS,
    Entry,
    EntryMeta,
    Usage,
    check_meta,
)
from clmagic.errors import CorruptEntry
from clmagic.store._fs import check_regular

__all__ = ["SCHEMA", "SCHEMA_VERSION", "BUSY_TIMEOUT_MS", "SchemaTooNew", "connect",
           "schema_version", "is_locked", "has_tables", "create_schema", "row_meta",
           "row_usage", "entry_row", "TEXT_BYTES", "SQL_CODE_PUT", "SQL_CODE_GET",
           "SQL_CODE_CLEAR", "SQL_CODE_DELETE"]

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 5000

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
    binary_sha256 TEXT    NOT NULL,  -- format 1 checksum, empty in later rows
    created       REAL    NOT NULL,
    extra         TEXT    NOT NULL,  -- the other metadata (build log, versions) as JSON
    binary        BLOB    NOT NULL,
    PRIMARY KEY (format, fingerprint, key)
);
-- use counts live apart from the entries: a hit writes this small row, never the binary's
CREATE TABLE IF NOT EXISTS usage (
    format      INTEGER NOT NULL,
    fingerprint TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    hits        INTEGER NOT NULL DEFAULT 0,
    last_used   REAL,
    PRIMARY KEY (format, fingerprint, key)
) WITHOUT ROWID;
-- code key → the latest entry of that code, for rekeying (a row whose entry is gone: ignored)
CREATE TABLE IF NOT EXISTS code_keys (
    format      INTEGER NOT NULL,
    fingerprint TEXT    NOT NULL,
    code_key    TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    PRIMARY KEY (format, fingerprint, code_key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS provenance (
    clmagic TEXT, pyopencl TEXT, sqlite TEXT, python TEXT, pid INTEGER, created REAL NOT NULL
);
"""

#: the entry columns read and written, in row order (``extra`` holds the other fields as JSON)
_ENTRY_COLS = ("fingerprint", "key", "kernels", *SQL_FIELDS, "extra")
_OWN = frozenset(_ENTRY_COLS)
_META_COLS = ", ".join(_ENTRY_COLS)
_E_COLS = ", ".join(f"e.{c}" for c in _ENTRY_COLS)
#: bytes of every text column of an entry row (bounded before an untrusted row is read)
TEXT_BYTES = " + ".join(f"length({c})" for c in ("kernels", "extra", "options", "device",
                                                 "platform", "driver", "binary_sha256"))
_FROM = ("entries AS e LEFT JOIN usage AS u "
         "ON u.format = e.format AND u.fingerprint = e.fingerprint AND u.key = e.key")
_USE = "coalesce(u.hits, 0), coalesce(u.last_used, e.created)"
_SIZE = "length(e.binary) + length(e.extra) + length(e.kernels) + length(e.options) + 96"
_ONE = "format = ? AND fingerprint = ? AND key = ?"
#: one entry with its usage: the entry columns, hits, last use, stored bytes, binary
SQL_GET = (f"SELECT {_E_COLS}, {_USE}, {_SIZE}, e.binary FROM {_FROM} "
           "WHERE e.format = ? AND e.fingerprint = ? AND e.key = ?")
#: one entry without usage (what a bundle reader needs): the entry columns, binary
SQL_READ = f"SELECT {_META_COLS}, binary FROM entries WHERE {_ONE}"
#: every entry's name and the sizes to bound before reading it (bundles)
SQL_SIZES = (f"SELECT fingerprint, key, length(binary), {TEXT_BYTES} "
             "FROM entries WHERE format = ? LIMIT ?")
#: (the format-1 column ``binary_sha256`` gets '': a format-2 entry's checksum is its
#: ``binary_xxh3``, kept in ``extra``; the schema stays, so one file serves both releases)
SQL_PUT = (f"INSERT OR REPLACE INTO entries (format, binary_sha256, {_META_COLS}, binary) "
           f"VALUES (?, ''{', ?' * (len(_ENTRY_COLS) + 1)})")
SQL_USE_RESET = ("INSERT OR REPLACE INTO usage (format, fingerprint, key, hits, last_used) "
                 "VALUES (?, ?, ?, 0, ?)")
# count a hit only for an entry that exists; touches the usage row alone
SQL_HIT = ("INSERT INTO usage (format, fingerprint, key, hits, last_used) "
           f"SELECT format, fingerprint, key, 1, ? FROM entries WHERE {_ONE} "
           "ON CONFLICT (format, fingerprint, key) DO UPDATE "
           "SET hits = hits + 1, last_used = excluded.last_used")
SQL_DELETE = f"DELETE FROM entries WHERE {_ONE}"
SQL_USE_DELETE = f"DELETE FROM usage WHERE {_ONE}"
#: every entry with its usage: the entry columns, hits, last use, stored bytes
SQL_LIST = f"SELECT {_E_COLS}, {_USE}, {_SIZE} FROM {_FROM} WHERE e.format = ?"
#: every entry's name, size, last use, build time and format (for eviction): no metadata
#: parsed; the entries of older formats too, which are misses and age out with the rest
SQL_USES = (f"SELECT e.fingerprint, e.key, {_SIZE}, coalesce(u.last_used, e.created), e.created, "
            f"e.format FROM {_FROM} WHERE e.format <= ?")
SQL_SIZE = f"SELECT count(*), coalesce(sum({_SIZE}), 0) FROM entries AS e WHERE e.format = ?"
SQL_CLEAR = "DELETE FROM entries WHERE format = ?"
SQL_USE_CLEAR = "DELETE FROM usage WHERE format = ?"
SQL_CODE_PUT = ("INSERT OR REPLACE INTO code_keys (format, fingerprint, code_key, key) "
                "VALUES (?, ?, ?, ?)")
SQL_CODE_GET = "SELECT key FROM code_keys WHERE format = ? AND fingerprint = ? AND code_key = ?"
SQL_CODE_CLEAR = "DELETE FROM code_keys WHERE format = ?"
SQL_CODE_DELETE = "DELETE FROM code_keys WHERE format = ? AND fingerprint = ? AND key = ?"
_HITS = len(_ENTRY_COLS)  # hits, last use, stored bytes: these positions of SQL_GET / SQL_LIST


class SchemaTooNew(Exception):
    """The file was written by a newer clmagic."""


def connect(path: Path, read_only: bool, immutable: bool = False) -> sqlite3.Connection:
    """A connection with the busy timeout set; ``read_only`` opens with ``mode=ro`` (and, when
    even the WAL index cannot be made, as immutable); ``immutable`` reads a file that nobody
    writes (an untrusted bundle) without any lock or side file. The file and its side files
    must be regular files where they exist (:class:`~clmagic.store._fs.NotAFile`, an
    ``OSError``, otherwise)."""
    for name in (path, *(Path(f"{path}{end}") for end in ("-wal", "-shm", "-journal"))):
        check_regular(name, follow=True)  # SQLite would block on a FIFO, forever
    uri = path.resolve().as_uri()
    if immutable:
        conn = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None,
                               check_same_thread=False)
        conn.execute("PRAGMA query_only = ON")
    elif read_only:
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
    return {"clmagic_schema", "entries", "usage", "code_keys", "provenance"} <= names


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


def row_meta(row: tuple[Any, ...]) -> EntryMeta:
    """Checked metadata from a row that starts with the entry columns; raises
    :class:`~clmagic.errors.CorruptEntry` (the contract's readers: :mod:`clmagic._valid`)."""
    fingerprint, key = row[0], row[1]
    extra = load_json(row[len(_ENTRY_COLS) - 1], "the extra column", MAX_META)
    kernels = load_json(row[2], "the kernels column", MAX_META)
    if not isinstance(extra, dict):
        raise CorruptEntry("the extra column is not a JSON object")
    meta = dict(extra, key=key, fingerprint=fingerprint, kernels=kernels)
    meta.update(zip(SQL_FIELDS, row[3 : 3 + len(SQL_FIELDS)], strict=True))
    return check_meta(meta)


def row_usage(row: tuple[Any, ...], store: str) -> Usage:
    """The usage columns of a ``SQL_GET`` / ``SQL_LIST`` row (a damaged count is 0, a damaged
    time unknown: usage is kept beside the entry)."""
    return Usage(hits=count_or(row[_HITS]), last_used=row[_HITS + 1],
                 stored_bytes=count_or(row[_HITS + 2]), store=store)


def row_size(row: tuple[Any, ...]) -> int:
    """What an ``entry_row`` takes in the store, as ``_SIZE`` counts it (binary, extra, kernels,
    options and 96)."""
    at = {c: i + 1 for i, c in enumerate(_ENTRY_COLS)}  # entry_row starts with the format
    return len(row[-1]) + sum(len(row[at[c]]) for c in ("extra", "kernels", "options")) + 96


def entry_row(entry: Entry) -> tuple[Any, ...]:
    """The values of ``SQL_PUT`` for one entry."""
    meta = entry.meta.to_json()
    extra = {k: v for k, v in meta.items() if k not in _OWN}
    return (FORMAT_VERSION, entry.fingerprint, entry.key, json.dumps(meta["kernels"]),
            *(meta[c] for c in SQL_FIELDS),
            json.dumps(extra, separators=(",", ":"), sort_keys=True), entry.binary)
