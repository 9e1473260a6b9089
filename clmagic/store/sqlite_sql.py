"""The SQLite store's schema and statements, and the conversions between rows and entries
(shared by :mod:`clmagic.store.sqlite` and the bundle reader)."""

from __future__ import annotations

import json
from typing import Any

from ..entry import FORMAT_VERSION, Entry
from ._common import stored_meta

#: bytes of every text column of an entry row (bounded before an untrusted row is read)
TEXT_BYTES = " + ".join(f"length({c})" for c in ("kernels", "extra", "options", "device",
                                                 "platform", "driver", "binary_sha256"))

__all__ = ["TEXT_BYTES", "COLUMNS", "SCHEMA", "SQL_GET", "SQL_READ", "SQL_PUT", "SQL_HIT",
           "row_meta", "entry_row"]

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
CREATE TABLE IF NOT EXISTS provenance (
    clmagic TEXT, pyopencl TEXT, sqlite TEXT, python TEXT, pid INTEGER, created REAL NOT NULL
);
"""

_ENTRY_COLS = ("fingerprint", "key", "kernels", *COLUMNS, "extra")
_META_COLS = ", ".join(_ENTRY_COLS)
_E_COLS = ", ".join(f"e.{c}" for c in _ENTRY_COLS)
_FROM = ("entries AS e LEFT JOIN usage AS u "
         "ON u.format = e.format AND u.fingerprint = e.fingerprint AND u.key = e.key")
_USE = "coalesce(u.hits, 0), coalesce(u.last_used, e.created)"
_SIZE = "length(e.binary) + length(e.extra) + length(e.kernels) + length(e.options) + 96"
_ONE = "format = ? AND fingerprint = ? AND key = ?"
#: one entry with its use counts: the entry columns, hits, last use, binary
SQL_GET = (f"SELECT {_E_COLS}, {_USE}, e.binary FROM {_FROM} "
           "WHERE e.format = ? AND e.fingerprint = ? AND e.key = ?")
#: one entry without use counts (what a bundle reader needs): the entry columns, binary
SQL_READ = f"SELECT {_META_COLS}, binary FROM entries WHERE {_ONE}"
SQL_PUT = (f"INSERT OR REPLACE INTO entries (format, {_META_COLS}, binary) "
           f"VALUES (?{', ?' * (len(_ENTRY_COLS) + 1)})")
SQL_USE_RESET = ("INSERT OR REPLACE INTO usage (format, fingerprint, key, hits, last_used) "
                 "VALUES (?, ?, ?, 0, ?)")
# count a hit only for an entry that exists; touches the usage row alone
SQL_HIT = ("INSERT INTO usage (format, fingerprint, key, hits, last_used) "
           f"SELECT format, fingerprint, key, 1, ? FROM entries WHERE {_ONE} "
           "ON CONFLICT (format, fingerprint, key) DO UPDATE "
           "SET hits = hits + 1, last_used = excluded.last_used")
SQL_DELETE = f"DELETE FROM entries WHERE {_ONE}"
SQL_USE_DELETE = f"DELETE FROM usage WHERE {_ONE}"
SQL_LIST = f"SELECT {_E_COLS}, {_USE}, {_SIZE} FROM {_FROM} WHERE e.format = ?"
SQL_SIZE = f"SELECT count(*), coalesce(sum({_SIZE}), 0) FROM entries AS e WHERE e.format = ?"
SQL_CLEAR = "DELETE FROM entries WHERE format = ?"
SQL_USE_CLEAR = "DELETE FROM usage WHERE format = ?"
_HITS, _LAST = len(_ENTRY_COLS), len(_ENTRY_COLS) + 1  # positions in SQL_GET / SQL_LIST rows


def row_meta(row: tuple[Any, ...]) -> dict[str, Any]:
    """Metadata from a row that starts with the columns of ``_META_COLS``."""
    fingerprint, key, kernels = row[0], row[1], row[2]
    try:
        extra, kernels = json.loads(row[len(_ENTRY_COLS) - 1]), json.loads(kernels)
    except RecursionError:  # nested deeper than the parser's stack: damaged or hostile
        raise ValueError("metadata nested too deeply") from None
    if not isinstance(extra, dict):
        raise ValueError("extra is not a JSON object")
    meta = dict(extra, key=key, fingerprint=fingerprint, kernels=kernels)
    meta.update(zip(COLUMNS, row[3 : 3 + len(COLUMNS)], strict=True))
    return meta


def entry_row(entry: Entry) -> tuple[Any, ...]:
    """The values of ``SQL_PUT`` for one entry."""
    meta = stored_meta(entry)
    extra = {k: v for k, v in meta.items()
             if k not in COLUMNS and k not in ("key", "fingerprint", "kernels")}
    return (FORMAT_VERSION, entry.fingerprint, entry.key, json.dumps(meta.get("kernels", [])),
            *(meta.get(c) for c in COLUMNS),
            json.dumps(extra, separators=(",", ":"), sort_keys=True), entry.binary)
