"""Entries this process has read and checked, kept in memory in front of a store's files while
the file each came from is still the one read (cubecl's and MIGraphX's memory in front of the
store).

Why: a new OpenCL context cannot use a program built in another one, so a workload that makes a
context per test (a test suite) loads the same binaries again and again: 1219 of the 1301
``Program.build`` calls of ``benchmarks/bench_suite.py`` are programs an earlier context of the
same process already read. Reading and checking an entry file again costs 0.1–0.2 ms (open,
four reads, the checksums, the metadata's JSON and its checks); asking the file system whether
the file is still the same costs one ``lstat``.

What a kept entry guarantees: it is the entry :meth:`Recent.get` was handed after the store read
and checked it, and the file it came from has the same :data:`Stamp` now (device, inode, size,
modification and change times in ns). A file replaced (a save renames a new one into place), a
file edited in place (its ctime moves, and no one can set a ctime back), one removed (``clmagic
clear`` from another process) or a symlink put in its place all stamp differently, and the
store then reads the file again (or finds none). Kept at most :data:`MAX_BYTES` of binaries,
least recently used dropped first.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from typing import TypeAlias

from clmagic._fork import after_fork
from clmagic.entry import Entry

__all__ = ["Recent", "Stamp", "stamp_of", "MAX_BYTES"]

#: binaries kept in memory by one store at most (the suite's 82 programs are 9 MiB on POCL)
MAX_BYTES = 64 << 20

#: (device, inode, size, mtime_ns, ctime_ns) of a file
Stamp: TypeAlias = tuple[int, int, int, int, int]
_Name: TypeAlias = tuple[str, str]

_ALL: weakref.WeakSet[Recent] = weakref.WeakSet()


def stamp_of(st: os.stat_result) -> Stamp:
    """The stamp of a file from its ``stat``."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class Recent:
    """A bounded memory of checked entries by (fingerprint, key), each with the stamp of the
    file it was read from. Thread-safe; a forked child starts with its own lock."""

    def __init__(self, max_bytes: int = MAX_BYTES):
        self.max_bytes = max_bytes
        self._kept: OrderedDict[_Name, tuple[Stamp, Entry]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        _ALL.add(self)

    def get(self, name: _Name, path: str) -> Entry | None:
        """The entry kept for ``name`` if the file at ``path`` (not followed if a symlink) has
        its stamp still, else ``None`` (and nothing kept for it any more)."""
        kept = self._kept.get(name)
        if kept is None:
            return None
        try:
            now: Stamp | None = stamp_of(os.lstat(path))
        except OSError:
            now = None
        if now == kept[0]:
            with self._lock:
                if name in self._kept:
                    self._kept.move_to_end(name)
            return kept[1]
        self.drop(name)
        return None

    def keep(self, name: _Name, stamp: Stamp, entry: Entry) -> None:
        """Keep ``entry``, read from a file of ``stamp``, dropping the least recently used past
        :attr:`max_bytes` (an entry larger than that alone is not kept)."""
        size = len(entry.binary or b"")
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._kept.pop(name, None)
            if old is not None:
                self._bytes -= len(old[1].binary or b"")
            self._kept[name] = (stamp, entry)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, gone) = self._kept.popitem(last=False)
                self._bytes -= len(gone.binary or b"")

    def drop(self, name: _Name | None = None) -> None:
        """Forget one entry, or all (``None``)."""
        with self._lock:
            if name is None:
                self._kept.clear()
                self._bytes = 0
                return
            old = self._kept.pop(name, None)
            if old is not None:
                self._bytes -= len(old[1].binary or b"")

    def __len__(self) -> int:
        return len(self._kept)

    def reset_after_fork(self) -> None:
        """A forked child's fresh lock (the parent's may have been held by another thread)."""
        self._lock = threading.Lock()


def _after_fork() -> None:
    for recent in list(_ALL):
        recent.reset_after_fork()


after_fork(_after_fork)
