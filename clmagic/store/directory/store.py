"""The directory store: one file per entry under a folder per device fingerprint.

Files are written to an exclusively created temp file in the same folder and renamed into place,
so readers see either the old entry or the new one, never half of one; there are no locks.
A rename replaces a symlink planted at the entry's path instead of writing through it, and
nothing is opened unless it is a regular file (``O_NOFOLLOW | O_NONBLOCK``, then ``fstat``: a
FIFO, a device or a folder planted as an entry or a hit counter is named, never waited on).
Temp files left by a writer that died (its pid gone, or over an hour old) are swept when their
key is next looked up and by listings; a clear removes them all. A folder that is
world-writable or owned by another user is refused unless trusted explicitly
(``CLMAGIC_CACHE_TRUST=1``); a device folder that others could write into is made 0700 again,
one owned by another user is not used.

A code index, ``<code key>.code`` holding a key (64 bytes), names the latest entry built from the
same code (comments and spacing aside), for rekeying; a stale one (its entry gone) is ignored.

An entry read and checked once is kept in memory (:mod:`clmagic.store.recent`) while its file
has the same device, inode, size and times: a new context's HIT of it costs one ``lstat`` and
the ``.hits`` file's, not a read.

Use is tracked beside each entry, never in it: a hit appends one byte to ``<key>.hits``
(``O_APPEND``, so concurrent hits from several processes all count), whose size is the hit count
and whose modification time is the last use. Listing reads each entry's header and metadata (not
the binary) and stats the ``.hits`` files.

This module is the store itself (open, the contract, saving); the files beside an entry (temp
files, ``.hits``, the code index) are :mod:`~clmagic.store.directory.files`, and the walks over
the folders (listing, the size scan and eviction, clear) are :mod:`~clmagic.store.directory.scan`.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

from clmagic._warn import warn_once
from clmagic.entry import Entry, OtherFormat, Usage
from clmagic.entry_file import encode, read_entry
from clmagic.errors import CorruptEntry
from clmagic.store._fs import (
    NotAFile,
    check_creatable,
    create_new,
    hostile,
    open_file,
    open_regular,
    private_folder,
    repair_folder,
)
from clmagic.store.base import Store, Use, valid_name
from clmagic.store.directory import scan as directory_scan
from clmagic.store.directory.files import (
    CODE_SUFFIX,
    HITS_SUFFIX,
    MAX_FILE,
    SUFFIX,
    TMP,
    code_index_of,
    drop_code,
    drop_hits,
    read_code_index,
    sweep_tmp,
    temp_path,
    usage_beside,
    write_code_index,
)
from clmagic.store.recent import Recent, stamp_of

__all__ = ["DirectoryStore"]

_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


class DirectoryStore(Store):
    """Entries as ``<root>/<fingerprint>/<key>.clbin`` files (folders made with mode 0700)."""

    kind = "directory"

    def __init__(self, root: str | os.PathLike[str]):
        super().__init__()
        self.root = Path(root)
        self.trust = False
        self._good: set[str] = set()  # device folders checked (and repaired) in this process
        self._root = os.fspath(self.root)
        self._recent = Recent()  # entries read, while their files stay the ones read

    @classmethod
    def open(cls, root: str | os.PathLike[str], trust: bool = False) -> DirectoryStore | None:
        """A store at ``root``; ``None`` (after one warning) when the folder cannot be read or
        created, or is world-writable or another user's and ``trust`` is not set. A folder that
        exists but cannot be written is opened read-only: hits are served, nothing is stored.
        A missing folder is created (0700) only when the first entry is saved, so opening,
        listing or checking a cache leaves nothing behind."""
        path = Path(root)
        try:
            if path.is_dir():
                os.listdir(path)
                why = None if trust else hostile(path)
                writable = os.access(path, os.W_OK)
            else:
                check_creatable(path)
                why, writable = None, True
        except OSError as exc:
            warn_once(
                f"cache folder {path} cannot be used ({exc.strerror}); caching in memory only"
            )
            return None
        if why:
            warn_once(
                f"cache folder {path} is refused: {why}, so others could plant binaries in it; "
                "caching in memory only. Use a private folder (chmod 700, your own), or set "
                "CLMAGIC_CACHE_TRUST=1 to use it anyway"
            )
            return None
        store = cls(path)
        store.trust = trust
        store.shared = trust and path.is_dir() and hostile(path) is not None  # others write
        if not writable:
            store._read_only("the folder is not writable")
        return store

    def _make_root(self) -> None:
        """Create the store's folder (0700) before the first save; a folder that someone else
        made meanwhile is checked as :meth:`open` checks one."""
        if self.root.is_dir():
            if not self.trust and (why := hostile(self.root)):
                raise PermissionError(errno.EACCES, f"refused: {why}")
            return
        private_folder(self.root)

    @property
    def location(self) -> str:
        return str(self.root)

    def _path(self, fingerprint: str, key: str) -> Path:
        self._check_name(fingerprint, key)
        return self.root / fingerprint / (key + SUFFIX)

    def _read_only(self, why: str) -> None:
        self._disable_writes(why, f"cache {self.root} is read-only ({why}): hits are served, "
                                  "nothing is saved")

    def _usage(self, entry_path: Path | str, created_size: int) -> Usage:
        """Hits and last use from the ``.hits`` file beside an entry of ``created_size`` bytes."""
        return usage_beside(entry_path, created_size, self.kind)

    # -- the contract -------------------------------------------------------------------------

    def get(self, fingerprint: str, key: str) -> Entry | None:
        self._check_name(fingerprint, key)
        folder = f"{self._root}{os.sep}{fingerprint}"
        where = f"{folder}{os.sep}{key}{SUFFIX}"
        kept = self._recent.get((fingerprint, key), where)
        if kept is not None:  # its file unchanged: only its use counts are read again
            size = kept.usage.stored_bytes - kept.usage.hits  # the entry file's own size
            return Entry(kept.meta, self._usage(where, size), kept.binary, kept.foreign)
        try:
            self._check_folder(folder)
            fd, st = open_file(where)
        except PermissionError as exc:
            if "refused" not in str(exc.strerror):
                raise CorruptEntry(f"cannot open {key}{SUFFIX}: {exc.strerror}") from None
            warn_once(f"cache {exc.strerror}; its entries are not used")
            return None
        except NotAFile as exc:
            raise CorruptEntry(exc.strerror or "not a file") from None
        except FileNotFoundError:
            swept = self._sweep(Path(where))
            if swept:
                raise CorruptEntry(
                    f"{swept} leftover temp file(s) of an interrupted write removed"
                ) from None
            return None
        except OSError as exc:
            if exc.errno == errno.ENOTDIR:
                return None
            raise CorruptEntry(f"cannot open {key}{SUFFIX}: {exc.strerror}") from None
        try:
            if st.st_size > MAX_FILE:  # before allocating: a planted giant is not read
                raise CorruptEntry(f"{key}{SUFFIX} is {st.st_size} bytes, over any entry's size")
            entry = read_entry(fd, st.st_size, key, fingerprint, self._usage(where, st.st_size))
        except OSError as exc:  # e.g. a directory where the file should be
            raise CorruptEntry(f"cannot read {key}{SUFFIX}: {exc.strerror}") from None
        except OtherFormat:
            return None  # an older clmagic's entry: a miss; the save replaces it, or it ages out
        finally:
            os.close(fd)
        entry = self._vet(entry)
        self._recent.keep((fingerprint, key), stamp_of(st), entry)
        return entry

    def _sweep(self, path: Path) -> int:
        """Remove leftover temp files of ``path`` whose writer is gone; how many."""
        try:
            names = os.listdir(path.parent)
        except OSError:
            return 0
        return sweep_tmp(path.parent, names, path.name + TMP)

    def _check_folder(self, folder: Path | str) -> None:
        """A device folder is clmagic's own and private: one that others could write into is
        made 0700 again (once per process and folder), one owned by another user is refused
        (``PermissionError``). A missing folder is fine."""
        name = os.fspath(folder)
        if name in self._good:
            return
        try:
            why = None if self.trust else repair_folder(folder)
        except FileNotFoundError:
            return
        if why:
            raise PermissionError(errno.EACCES, f"device folder {folder} is refused: {why}")
        self._good.add(name)

    def put_many(self, entries: Iterable[Entry]) -> int:
        return sum(self._put(e) for e in entries)

    def _put(self, entry: Entry) -> bool:
        path = self._path(entry.fingerprint, entry.key)
        if not self.writable:
            return False
        entry = self._sealed(entry)
        data = encode(entry)
        if not self._fits(entry, len(data)):
            return False
        tmp = temp_path(path)
        try:
            if not path.parent.is_dir():
                self._make_root()
                private_folder(path.parent)
            self._check_folder(path.parent)
            fd = create_new(tmp)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                try:
                    os.replace(tmp, path)
                except IsADirectoryError:  # a directory squats the entry's name: repair
                    shutil.rmtree(path)
                    os.replace(tmp, path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
        except FileNotFoundError:
            return False  # the temp file was swept under us (another host's writer); harmless
        except OSError as exc:
            if "refused" in str(exc.strerror):  # one foreign device folder: not the whole cache
                warn_once(f"cache {exc.strerror}; entries of that device are not saved")
                return False
            if exc.errno in _FULL:
                self._reason = f"disk full: {exc.strerror}"
                warn_once(f"cache {self.root} is full ({exc.strerror}): entries are not saved")
                return False
            self._read_only(exc.strerror or str(exc))
            return False
        write_code_index(path.parent, entry)
        self._saved(len(data))
        return True

    def find_code(self, fingerprint: str, code_key: str) -> Entry | None:
        """The entry the code index names for ``code_key`` (one 64-byte read, then :meth:`get`),
        if it is there and really of that code."""
        if not valid_name(fingerprint, code_key):
            return None
        key = read_code_index(self.root / fingerprint / (code_key + CODE_SUFFIX))
        return None if key is None else self._code_target(fingerprint, code_key, key)

    @property
    def stats_folder(self) -> Path:
        return self.root / "stats"

    def usage_list(self) -> list[Use]:
        """Every entry's last use and size, one ``stat`` per file (no entry is opened)."""
        return directory_scan.scan_uses(self.root)

    def remove_uses(self, victims: list[Use]) -> list[Use]:
        """Unlink each entry unless it was rewritten since it was listed (see
        :func:`~clmagic.store.directory.scan.remove_uses`)."""
        return directory_scan.remove_uses(self.root, victims)

    def record_hit(self, fingerprint: str, key: str, when: float | None = None) -> None:
        """Append one byte to the entry's ``.hits`` file (its size counts the hits, its mtime is
        the last use); the entry file is not touched. Failures are ignored: use counts are
        advisory and must never cost a build."""
        if not self.writable:
            return
        path = self._path(fingerprint, key).with_suffix(HITS_SUFFIX)
        try:
            fd = open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                os.write(fd, b"+")
                if when is not None:
                    os.utime(fd, (when, when))
            finally:
                os.close(fd)
        except NotAFile as exc:  # a FIFO would have blocked the build: say what is there
            warn_once(f"cache {path.parent}: {exc.strerror}; hits of that entry are not counted")
        except OSError:
            pass

    def delete(self, fingerprint: str, key: str) -> bool:
        path = self._path(fingerprint, key)
        self._recent.drop((fingerprint, key))
        drop_hits(path)
        index = code_index_of(path, key)
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:
            return False
        drop_code(index)
        return True

    def entries(self, fingerprint: str | None = None) -> Iterator[Entry]:
        return directory_scan.list_entries(self.root, fingerprint, self.kind, self._check_folder)

    def clear(self, fingerprint: str | None = None) -> tuple[int, int]:
        self._recent.drop()
        return directory_scan.clear(self.root, fingerprint)

    def close(self) -> None:
        """Let go of the entries kept in memory: the next ``get`` reads its file again."""
        self._recent.drop()
