"""What an include search saw, so that a remembered preparation can be checked by ``stat`` alone.

The compiler's view wins: a preparation of a source that includes files may be reused only while
every file the search read is the same file, unchanged, and every place it looked and found
nothing (or a folder, which the compiler skips) still holds nothing. :class:`Headers` keeps one
:data:`Probe` per place looked at, in order; :func:`unchanged` stats them again.

A file is the same while its identity — device, inode, size, modification and change time in
ns — is (ccache's inode cache keys the same fields). The change time cannot be set back by a
user, so an edit that restores size and mtime (``os.utime``) still shows. A file whose mtime or
ctime is within :data:`TOO_NEW_NS` of now is never trusted from memory (ccache's "too new"
rule): a write in the same clock tick as the read would leave its stamps as they were.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable

__all__ = ["Identity", "Probe", "Headers", "DIR", "TOO_NEW_NS", "identity", "too_new",
           "probe", "unchanged"]

#: a file younger than this (mtime or ctime, ns) is read again, never taken from memory
TOO_NEW_NS = 2_000_000_000

#: (device, inode, size, mtime_ns, ctime_ns) of a regular file
Identity = tuple[int, int, int, int, int]
#: what the search found at a path: the identity of the file it read, ``None`` (nothing there),
#: :data:`DIR` (a folder: skipped), or a real path (where a header's own includes are searched
#: from, under the path ``"realpath:" + path``)
Probe = Identity | str | None
#: a folder at a probed path
DIR = "dir"
#: what no recorded probe holds: something there that is neither a file nor a folder
_OTHER = "other"
_REAL = "realpath:"


def identity(st: os.stat_result) -> Identity:
    """The fields that tell one version of a file from another."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def too_new(ident: Identity, now_ns: int | None = None) -> bool:
    """Whether the file was modified or changed within :data:`TOO_NEW_NS` of ``now_ns`` (or
    is dated in the future)."""
    now = time.time_ns() if now_ns is None else now_ns
    return max(ident[3], ident[4]) > now - TOO_NEW_NS


class Headers(list[tuple[str, bytes]]):
    """``(name, contents)`` pairs for the key; ``stamps`` holds each file's path and identity
    as read, ``probes`` every place the search looked (see :func:`unchanged`), ``static`` says
    the source and options name no file at all (the list is then empty whatever the folders
    hold), ``too_new`` that a file read was too new to be trusted from memory."""

    def __init__(self, items: Iterable[tuple[str, bytes]] = ()) -> None:
        super().__init__(items)
        self.stamps: list[tuple[str, int, int, int, int, int]] = []
        self.probes: dict[str, Probe] = {}
        self.static = True
        self.too_new = False
        #: find_headers' arguments (text, include folders, cwd, options), for headers_changed
        self.found_with: tuple[str, tuple[str, ...], str, str] | None = None

    def saw(self, path: str, found: Probe) -> None:
        """Note what the search found at ``path`` (a place looked at twice is checked once; one
        that changed in between is a search not to be trusted from memory)."""
        if self.probes.setdefault(path, found) != found or (
                isinstance(found, tuple) and too_new(found)):
            self.too_new = True

    def saw_realpath(self, path: str, real: str) -> None:
        """Note the folder a header's own includes were searched from (through its links)."""
        self.saw(_REAL + path, real)

    @property
    def reusable(self) -> bool:
        """Whether a preparation over these files may be remembered, to be checked by
        :func:`unchanged` on reuse."""
        return self.static or (self.found_with is not None and not self.too_new)


def probe(path: str) -> Probe:
    """What a search would find at ``path`` now (links followed, as the compiler does)."""
    if path.startswith(_REAL):
        try:
            return os.path.realpath(path[len(_REAL):])
        except OSError:
            return _OTHER
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return _OTHER
    if stat.S_ISREG(st.st_mode):
        return identity(st)
    return DIR if stat.S_ISDIR(st.st_mode) else _OTHER


def unchanged(headers: Headers, cwd: str) -> bool:
    """Whether a search of the same text and options from ``cwd`` would read exactly the files
    ``headers`` holds: same working folder, each probe finds what it found, and no file read is
    too new to be trusted."""
    if headers.static:
        return True  # nothing named: nothing the folders hold matters
    if headers.found_with is None or headers.found_with[2] != cwd or headers.too_new:
        return False
    now = time.time_ns()
    for path, found in headers.probes.items():
        if probe(path) != found or (isinstance(found, tuple) and too_new(found, now)):
            return False
    return True
