"""One SQLite file as a store's home: the process's connection (a forked child opens its own),
write transactions and what a lock held by another process does to them, the provenance row of
each writing process, and plain reads. The cache contract on top of it is
:class:`~clmagic.store.sqlite.store.SQLiteStore`; the schema and statements are
:mod:`~clmagic.store.sqlite.sql`.

Cross-process safety is SQLite's own: WAL mode and a ``BUSY_TIMEOUT_MS`` busy timeout. A failed
write turns writes off for the process with one warning, except a lock held by another process,
which only drops that one write; ``MAX_LOCKED`` in a row pause writes for ``LOCK_PAUSE_S`` (no
build waits on the lock meanwhile), then they are tried again: a lock is transient, never the
end of saving.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from clmagic._fork import after_fork, disown
from clmagic._version import __version__
from clmagic._warn import warn, warn_once
from clmagic.entry import FORMAT_VERSION
from clmagic.store.base import Store
from clmagic.store.sqlite.sql import connect, create_schema, has_tables, is_locked

__all__ = ["SQLiteFile", "MAX_LOCKED", "LOCK_PAUSE_S"]

#: lock timeouts in a row after which writes pause for LOCK_PAUSE_S (each one cost
#: BUSY_TIMEOUT_MS)
MAX_LOCKED = 3
#: seconds writes pause after MAX_LOCKED lock timeouts in a row, before they are tried again
LOCK_PAUSE_S = 60.0

_FILES: weakref.WeakSet[SQLiteFile] = weakref.WeakSet()


def _after_fork() -> None:
    for file in list(_FILES):
        file.reset_after_fork()


after_fork(_after_fork)


class SQLiteFile(Store):
    """A store kept in one SQLite file at ``path``: connection, transactions, reads (the
    contract is :class:`~clmagic.store.sqlite.store.SQLiteStore`'s)."""

    def __init__(self, path: str | os.PathLike[str], read_only: bool = False,
                 immutable: bool = False):
        super().__init__()
        self.path = Path(path)
        self._immutable = immutable
        if read_only or immutable:
            self._writable, self._reason = False, "the file is read-only"
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._provenance = False
        self._locked = 0  # lock timeouts in a row
        self._paused_until = 0.0  # monotonic time before which writes are not tried (a lock)
        self.lock_pause_s = LOCK_PAUSE_S
        _FILES.add(self)
        self._connection()

    def reset_after_fork(self) -> None:
        """In a forked child: a new lock (the parent's may have been held), and the parent's
        connection disowned, not closed: SQLite's locks are the parent's, and closing a
        connection in the child could checkpoint or truncate the WAL under the parent's feet.
        The child opens its own connection at its first use, and writes its own provenance."""
        self._lock = threading.RLock()
        disown(self._conn)
        self._conn, self._pid, self._provenance = None, -1, False

    @property
    def location(self) -> str:
        return str(self.path)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():  # a forked child opens its own
            conn = connect(self.path, read_only=not self.writable, immutable=self._immutable)
            self._conn, self._pid = conn, os.getpid()
            if self.writable and not has_tables(conn):  # a new file: one write lock, once
                try:
                    create_schema(conn)
                except sqlite3.OperationalError as exc:
                    self._disable_writes(str(exc))
        return self._conn

    def _write(self, sql_rows: Iterable[tuple[str, tuple[Any, ...]]]) -> int:
        """Run writes in one transaction. Returns rows changed, or -1 when nothing was written
        (see :meth:`_transact`)."""
        return self._transact(lambda conn: sum(conn.execute(sql, args).rowcount
                                               for sql, args in sql_rows))

    def _transact(self, work: Callable[[sqlite3.Connection], int]) -> int:
        """Run ``work(connection)`` in one write transaction; its result, or -1 when nothing was
        written.

        Another process holding the lock past the busy timeout is transient: this write is
        dropped (with one warning) and writes stay on; after ``MAX_LOCKED`` in a row (every save
        would wait ``BUSY_TIMEOUT_MS`` for nothing) writes pause for :attr:`lock_pause_s`
        seconds, and are then tried again. Any other failure (disk full, damaged file, a
        refusing trigger) turns writes off."""
        if not self.writable:
            return -1
        if time.monotonic() < self._paused_until:
            return -1
        with self._lock:
            conn = None
            try:
                conn = self._connection()
                conn.execute("BEGIN IMMEDIATE")
                changed = work(conn)
                if not self._provenance:
                    self._write_provenance(conn)
                conn.execute("COMMIT")
                self._locked, self._reason = 0, ""
                return changed
            except sqlite3.Error as exc:
                self._rollback(conn)
                if not is_locked(exc):
                    self._disable_writes(str(exc))
                    return -1
                self._locked += 1
                self._reason = f"locked by another process ({exc})"
                if self._locked < MAX_LOCKED:
                    warn_once(f"cache {self.path} is locked by another process ({exc}); "
                              "this build is not saved")
                else:
                    self._locked = 0
                    self._paused_until = time.monotonic() + self.lock_pause_s
                    warn(f"cache {self.path} stayed locked by another process for "
                         f"{MAX_LOCKED} saves; saving again in {self.lock_pause_s:g} s")
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

    def _select(self, sql: str, fingerprint: str | None) -> list[tuple[Any, ...]]:
        """The rows of a listing statement (of one device's entries with ``fingerprint``); none,
        after one warning, when the file cannot be read."""
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

    def close(self) -> None:
        """Close this process's connection (reopened on next use)."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """The rows of one statement; ``sqlite3.Error`` is raised (a bundle's reader says why)."""
        with self._lock:
            return self._connection().execute(sql, args).fetchall()
