"""The directory store's files: each entry's file and the small files kept beside it.

In a device folder, ``<key>.clbin`` is an entry; ``<key>.hits`` counts its hits (its size) and
last use (its modification time); ``<code key>.code`` holds the key (64 bytes) of the latest entry
built from that code, for rekeying; ``<name>.tmp.<pid>.<random>`` is a write in progress, swept
once its writer is gone. Nothing here follows a link or waits on a FIFO: files are opened only
when they are regular (:func:`~clmagic.store._fs.open_regular`), and every helper is advisory
where the file is (a lost hit count or code index costs a count or a rekey, never a build).
"""

from __future__ import annotations

import os
import secrets
import stat
import time
from collections.abc import Iterable
from pathlib import Path

from clmagic._valid import pid_of
from clmagic._warn import warn_once
from clmagic.entry import MAX_BINARY, MAX_META, Entry, EntryMeta, OtherFormat, Usage
from clmagic.entry_file import HEADER, read_meta
from clmagic.errors import CorruptEntry
from clmagic.store._fs import open_file, open_regular, write_private
from clmagic.store.base import valid_name
from clmagic.store.lifetime import _alive

__all__ = ["SUFFIX", "TMP", "STALE_TMP_S", "HITS_SUFFIX", "CODE_SUFFIX", "MAX_FILE", "temp_path",
           "sweep_tmp", "read_entry_meta", "usage_beside", "drop_hits", "write_code_index",
           "read_code_index", "index_size", "code_index_of", "drop_code"]

SUFFIX = ".clbin"
TMP = ".tmp."
#: a temp file older than this is a leftover even when its writer's pid is in use again (or
#: lives on another host sharing the folder); listings and clears remove such files
STALE_TMP_S = 3600.0
HITS_SUFFIX = ".hits"
#: ``<code key>.code`` beside the entries holds the key of the latest entry of that code
CODE_SUFFIX = ".code"
#: no valid entry file is larger
MAX_FILE = HEADER.size + MAX_META + MAX_BINARY + 32


def temp_path(path: Path) -> Path:
    """A fresh temp file name beside ``path`` (this process's pid, then random digits)."""
    return path.with_name(f"{path.name}{TMP}{os.getpid()}.{secrets.token_hex(4)}")


def sweep_tmp(folder: Path, names: Iterable[str], prefix: str = "", everything: bool = False
              ) -> int:
    """Remove the temp files among ``names`` in ``folder`` (those starting with ``prefix``) whose
    writer is gone: its pid is not alive here, or the file is over :data:`STALE_TMP_S` old
    (``everything``: all of them, as a clear does). Returns how many went."""
    count = 0
    for name in names:
        if TMP not in name or not name.startswith(prefix):
            continue
        tmp = folder / name
        if not everything:
            try:
                pid = pid_of(name.rsplit(TMP, 1)[1].split(".", 1)[0])
                age = time.time() - tmp.lstat().st_mtime
            except OSError:
                continue
            if pid is None:  # not a name a writer of ours spells (the contract's reader)
                continue
            if _alive(pid) and age < STALE_TMP_S:
                continue  # a writer at work (this process's other threads, or another one)
        try:
            tmp.unlink()
            count += 1
        except OSError:
            continue
    return count


def read_entry_meta(path: str, listing: bool = False) -> tuple[EntryMeta | None, int]:
    """Header and metadata of one entry file (one read, two for big metadata) and the file's
    size; ``(None, 0)`` when it cannot be read, fails its checks or is of another format (not
    listed: an older clmagic's entry is no entry of this one, though eviction still counts and
    removes it, from the sizes alone). ``listing``: a damaged one is said, once, in one line
    (a listing that only left it out would read as an empty cache)."""
    try:  # a FIFO or a folder is skipped (its lookup says what it is)
        fd, st = open_file(path)
    except OSError:
        return None, 0
    try:
        return read_meta(fd), st.st_size
    except CorruptEntry as exc:
        if listing:
            warn_once(f"cache entry {os.path.basename(path)[:12]} is damaged ({exc}): not listed; "
                      "its next build replaces it")
        return None, 0
    except (OSError, OtherFormat):
        return None, 0
    finally:
        os.close(fd)


# -- the hit counter beside an entry -----------------------------------------------------------

def usage_beside(entry_path: Path | str, created_size: int, kind: str) -> Usage:
    """Hits and last use from the ``.hits`` file beside an entry of ``created_size`` bytes."""
    name = os.fspath(entry_path)
    try:  # (the entry's name ends in its suffix: the counter's replaces it)
        use = os.stat(name[:name.rindex(".")] + HITS_SUFFIX, follow_symlinks=False)
    except OSError:
        use = None
    if use is None or not stat.S_ISREG(use.st_mode):  # missing, or a FIFO, a folder, ...
        return Usage(hits=0, last_used=None, stored_bytes=created_size, store=kind)
    return Usage(hits=use.st_size, last_used=use.st_mtime,
                 stored_bytes=created_size + use.st_size, store=kind)


def drop_hits(entry_path: Path) -> int:
    """Remove the ``.hits`` file beside an entry; returns the bytes it took."""
    hits = entry_path.with_suffix(HITS_SUFFIX)
    try:
        size = hits.lstat().st_size
        hits.unlink()
        return size
    except OSError:
        return 0


# -- the code index ----------------------------------------------------------------------------

def write_code_index(folder: Path, entry: Entry) -> None:
    """Point ``<code key>.code`` in ``folder`` at this entry (advisory: a failure only loses a
    rekey)."""
    code = entry.meta.code_key
    if not valid_name(entry.fingerprint, code):
        return
    path = folder / (code + CODE_SUFFIX)
    try:
        write_private(path, entry.key.encode(), temp_path(path))
    except OSError:
        pass


def read_code_index(path: str | Path) -> str | None:
    """The key a code index names (one read of at most 65 bytes), or ``None`` when it is missing
    or not a regular file (a FIFO is never waited on)."""
    try:
        fd = open_regular(path)
    except OSError:
        return None
    try:
        return os.read(fd, 65).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def index_size(path: str, key: str) -> int:
    """The size of a code index file when it names ``key``, else 0."""
    return len(key) if read_code_index(path) == key else 0


def code_index_of(path: Path, key: str) -> Path | None:
    """The code index naming the entry at ``path`` (its metadata says which, read before the
    entry goes), or ``None``: an index that names a newer entry of the code is kept."""
    meta, _ = read_entry_meta(str(path))
    if meta is None or not valid_name(path.parent.name, meta.code_key):
        return None
    index = path.with_name(meta.code_key + CODE_SUFFIX)
    return index if index_size(str(index), key) else None


def drop_code(index: Path | None) -> None:
    """Remove a removed entry's code index (advisory: one left behind is a stale miss)."""
    if index is not None:
        try:
            index.unlink()
        except OSError:
            pass
