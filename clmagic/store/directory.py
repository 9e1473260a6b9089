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

Use is tracked beside each entry, never in it: a hit appends one byte to ``<key>.hits``
(``O_APPEND``, so concurrent hits from several processes all count), whose size is the hit count
and whose modification time is the last use. Listing reads each entry's header and metadata (not
the binary) and stats the ``.hits`` files.
"""

from __future__ import annotations

import dataclasses
import errno
import io
import os
import secrets
import shutil
import stat
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..config import warn_once
from ..entry import (HEADER, MAX_BINARY, MAX_META, Entry, EntryMeta, Usage, encode, read_entry,
                     read_meta)
from ..errors import CorruptEntry
from ..lifetime import _alive
from ._fs import (
    O_NOFOLLOW,
    NotAFile,
    check_creatable,
    hostile,
    open_regular,
    private_folder,
    repair_folder,
)
from .base import Store, Use, is_hex, valid_name

__all__ = ["DirectoryStore"]

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
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def _sweep_tmp(folder: Path, names: Iterable[str], prefix: str = "", everything: bool = False
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
                pid = int(name.rsplit(TMP, 1)[1].split(".", 1)[0])
                age = time.time() - tmp.lstat().st_mtime
            except (ValueError, OSError, IndexError):
                continue
            if pid > 0 and _alive(pid) and age < STALE_TMP_S:
                continue  # a writer at work (this process's other threads, or another one)
        try:
            tmp.unlink()
            count += 1
        except OSError:
            continue
    return count


def _read_entry_meta(path: str) -> tuple[EntryMeta | None, int]:
    """Header and metadata of one entry file (one read, two for big metadata) and the file's
    size; ``(None, 0)`` when it cannot be read or fails its checks."""
    try:
        fd = open_regular(path)  # a FIFO or a folder is skipped (its lookup says what it is)
    except OSError:
        return None, 0
    try:
        buf = os.read(fd, 8192)
        if len(buf) >= HEADER.size:
            need = HEADER.size + min(HEADER.unpack_from(buf)[2], MAX_META)
            if need > len(buf):
                buf += os.pread(fd, need - len(buf), len(buf))
        return read_meta(io.BytesIO(buf)), os.fstat(fd).st_size
    except (OSError, CorruptEntry):
        return None, 0
    finally:
        os.close(fd)


def _index_size(path: str, key: str) -> int:
    """The size of a code index file when it names ``key``, else 0."""
    try:
        fd = open_regular(path)
    except OSError:  # a FIFO or folder planted as the index included
        return 0
    try:
        return len(key) if os.read(fd, 65) == key.encode() else 0
    except OSError:
        return 0
    finally:
        os.close(fd)


class DirectoryStore(Store):
    """Entries as ``<root>/<fingerprint>/<key>.clbin`` files (folders made with mode 0700)."""

    kind = "directory"

    def __init__(self, root: str | os.PathLike[str]):
        super().__init__()
        self.root = Path(root)
        self.trust = False
        self._good: set[Path] = set()  # device folders checked (and repaired) in this process

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

    def _usage(self, entry_path: Path, created_size: int) -> Usage:
        """Hits and last use from the ``.hits`` file beside an entry of ``created_size`` bytes."""
        try:
            use = os.stat(entry_path.with_suffix(HITS_SUFFIX), follow_symlinks=False)
        except OSError:
            use = None
        if use is None or not stat.S_ISREG(use.st_mode):  # missing, or a FIFO, a folder, ...
            return Usage(hits=0, last_used=None, stored_bytes=created_size, store=self.kind)
        return Usage(hits=use.st_size, last_used=use.st_mtime,
                     stored_bytes=created_size + use.st_size, store=self.kind)

    # -- the contract -------------------------------------------------------------------------

    def get(self, fingerprint: str, key: str) -> Entry | None:
        path = self._path(fingerprint, key)
        try:
            self._check_folder(path.parent)
            fd = open_regular(path)
        except PermissionError as exc:
            if "refused" not in str(exc.strerror):
                raise CorruptEntry(f"cannot open {path.name}: {exc.strerror}") from None
            warn_once(f"cache {exc.strerror}; its entries are not used")
            return None
        except NotAFile as exc:
            raise CorruptEntry(exc.strerror or "not a file") from None
        except FileNotFoundError:
            swept = self._sweep(path)
            if swept:
                raise CorruptEntry(
                    f"{swept} leftover temp file(s) of an interrupted write removed"
                ) from None
            return None
        except OSError as exc:
            if exc.errno == errno.ENOTDIR:
                return None
            raise CorruptEntry(f"cannot open {path.name}: {exc.strerror}") from None
        try:
            with os.fdopen(fd, "rb", buffering=0) as fh:
                size = os.fstat(fd).st_size
                if size > MAX_FILE:  # before allocating: a planted giant is not read
                    raise CorruptEntry(f"{path.name} is {size} bytes, over any entry's size")
                entry = read_entry(fh, size, key, fingerprint, self._usage(path, size))
        except OSError as exc:  # e.g. a directory where the file should be
            raise CorruptEntry(f"cannot read {path.name}: {exc.strerror}") from None
        return self._vet(entry)

    def _sweep(self, path: Path) -> int:
        """Remove leftover temp files of ``path`` whose writer is gone; how many."""
        try:
            names = os.listdir(path.parent)
        except OSError:
            return 0
        return _sweep_tmp(path.parent, names, path.name + TMP)

    def _check_folder(self, folder: Path) -> None:
        """A device folder is clmagic's own and private: one that others could write into is
        made 0700 again (once per process and folder), one owned by another user is refused
        (``PermissionError``). A missing folder is fine."""
        if folder in self._good:
            return
        try:
            why = None if self.trust else repair_folder(folder)
        except FileNotFoundError:
            return
        if why:
            raise PermissionError(errno.EACCES, f"device folder {folder} is refused: {why}")
        self._good.add(folder)

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
        tmp = path.with_name(f"{path.name}{TMP}{os.getpid()}.{secrets.token_hex(4)}")
        try:
            if not path.parent.is_dir():
                self._make_root()
                private_folder(path.parent)
            self._check_folder(path.parent)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW, 0o600)
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
        self._index_code(entry)
        self._saved(len(data))
        return True

    def _index_code(self, entry: Entry) -> None:
        """Point ``<code key>.code`` at this entry (advisory: a failure only loses a rekey)."""
        code = entry.meta.code_key
        if not valid_name(entry.fingerprint, code):
            return
        path = self.root / entry.fingerprint / (code + CODE_SUFFIX)
        tmp = path.with_name(f"{path.name}{TMP}{os.getpid()}.{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW, 0o600)
            try:
                os.write(fd, entry.key.encode())
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)

    def find_code(self, fingerprint: str, code_key: str) -> Entry | None:
        """The entry the code index names for ``code_key`` (one 64-byte read, then :meth:`get`),
        if it is there and really of that code."""
        if not valid_name(fingerprint, code_key):
            return None
        try:
            fd = open_regular(self.root / fingerprint / (code_key + CODE_SUFFIX))
        except OSError:  # missing, or not a regular file (a FIFO is never waited on)
            return None
        try:
            raw = os.read(fd, 65)
        except OSError:
            return None
        finally:
            os.close(fd)
        return self._code_target(fingerprint, code_key, raw.decode("ascii", "replace"))

    @property
    def stats_folder(self) -> Path:
        return self.root / "stats"

    def usage_list(self) -> list[Use]:
        """Every entry's last use (the ``.hits`` file's mtime, else the entry's) and size, from
        one ``stat`` per file: no entry is opened."""
        out: list[Use] = []
        try:
            folders = [f for f in os.listdir(self.root) if is_hex(f, 16)]
        except OSError:
            return out
        for fp in folders:
            files: dict[str, os.stat_result] = {}
            try:
                with os.scandir(os.path.join(self.root, fp)) as it:
                    for d in it:
                        if d.name.endswith((SUFFIX, HITS_SUFFIX)):
                            try:
                                files[d.name] = d.stat(follow_symlinks=False)
                            except OSError:
                                continue
            except OSError:
                continue
            for name, st in files.items():
                key = name[: -len(SUFFIX)]
                if not (name.endswith(SUFFIX) and is_hex(key, 64)):
                    continue
                hits = files.get(key + HITS_SUFFIX)
                used = max(st.st_mtime, hits.st_mtime) if hits else st.st_mtime
                size = st.st_size + (hits.st_size if hits else 0)
                out.append(Use(used, size, fp, key, (st.st_ino, st.st_mtime_ns)))
        return out

    def remove_uses(self, victims: list[Use]) -> list[Use]:
        """Unlink each entry unless it was rewritten since it was listed (another process's
        fresh save keeps its entry). A reader that has the file open still reads it whole; one
        that opens it later finds nothing and rebuilds."""
        gone = []
        for v in victims:
            path = self._path(v.fingerprint, v.key)
            try:
                st = path.lstat()
                if (st.st_ino, st.st_mtime_ns) != v.token:
                    continue
                index = self._code_index(path, v.key)
                path.unlink()
            except OSError:
                continue  # already gone (another process evicted it too): not counted twice
            self._drop_hits(path)
            self._drop_code(index)
            gone.append(v)
        return gone

    def record_hit(self, fingerprint: str, key: str) -> None:
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
            finally:
                os.close(fd)
        except NotAFile as exc:  # a FIFO would have blocked the build: say what is there
            warn_once(f"cache {path.parent}: {exc.strerror}; hits of that entry are not counted")
        except OSError:
            pass

    def _drop_hits(self, entry_path: Path) -> int:
        """Remove the ``.hits`` file beside an entry; returns the bytes it took."""
        hits = entry_path.with_suffix(HITS_SUFFIX)
        try:
            size = hits.lstat().st_size
            hits.unlink()
            return size
        except OSError:
            return 0

    def delete(self, fingerprint: str, key: str) -> bool:
        path = self._path(fingerprint, key)
        self._drop_hits(path)
        index = self._code_index(path, key)
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:
            return False
        self._drop_code(index)
        return True

    @staticmethod
    def _code_index(path: Path, key: str) -> Path | None:
        """The code index naming the entry at ``path`` (its metadata says which, read before the
        entry goes), or ``None``: an index that names a newer entry of the code is kept."""
        meta, _ = _read_entry_meta(str(path))
        if meta is None or not valid_name(path.parent.name, meta.code_key):
            return None
        index = path.with_name(meta.code_key + CODE_SUFFIX)
        return index if _index_size(str(index), key) else None

    @staticmethod
    def _drop_code(index: Path | None) -> None:
        """Remove a removed entry's code index (advisory: one left behind is a stale miss)."""
        if index is not None:
            try:
                index.unlink()
            except OSError:
                pass

    def _files(self, fingerprint: str | None) -> Iterator[Path]:
        try:
            folders = [self.root / fingerprint] if fingerprint else sorted(self.root.iterdir())
        except OSError:
            return
        for folder in folders:
            if not is_hex(folder.name, 16):
                continue
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                if name.endswith(SUFFIX) and is_hex(name[: -len(SUFFIX)], 64):
                    yield folder / name

    def entries(self, fingerprint: str | None = None) -> Iterator[Entry]:
        try:
            folders = [fingerprint] if fingerprint else sorted(os.listdir(self.root))
        except OSError:
            return
        for fp in folders:
            if not is_hex(fp, 16):
                continue
            folder = os.path.join(self.root, fp)
            try:
                self._check_folder(Path(folder))
                names = set(os.listdir(folder))
            except PermissionError as exc:
                warn_once(f"cache {exc.strerror}; its entries are not used")
                continue
            except OSError:
                continue
            if any(TMP in name for name in names):  # leftovers of killed writers
                _sweep_tmp(Path(folder), names)
            for name in names:
                key = name[: -len(SUFFIX)]
                if not (name.endswith(SUFFIX) and is_hex(key, 64)):
                    continue
                meta, size = _read_entry_meta(os.path.join(folder, name))
                if meta is None or meta.key != key or meta.fingerprint != fp:
                    continue  # unreadable, damaged or filed under another name
                usage = (self._usage(Path(folder, name), size) if key + HITS_SUFFIX in names
                         else Usage(stored_bytes=size, store=self.kind))
                if meta.code_key + CODE_SUFFIX in names:  # the code index counts for its entry
                    index = _index_size(os.path.join(folder, meta.code_key + CODE_SUFFIX), key)
                    usage = dataclasses.replace(usage, stored_bytes=usage.stored_bytes + index)
                yield Entry(meta, usage)

    def clear(self, fingerprint: str | None = None) -> tuple[int, int]:
        count = freed = 0
        for path in list(self._files(fingerprint)):
            try:
                size = path.lstat().st_size
                path.unlink()
            except OSError:
                continue
            count += 1
            freed += size + self._drop_hits(path)
        freed += self._sweep_hits(fingerprint)
        return count, freed

    def _sweep_hits(self, fingerprint: str | None) -> int:
        """Remove ``.hits`` files whose entry is gone (a hit counted while another process
        deleted the entry), the code index of the cleared folders and every temp file (a clear
        empties the folder); returns the bytes freed."""
        freed = 0
        try:
            folders = [fingerprint] if fingerprint else os.listdir(self.root)
        except OSError:
            return 0
        for fp in folders:
            folder = self.root / fp
            try:
                names = set(os.listdir(folder)) if is_hex(fp, 16) else set()
            except OSError:
                continue
            _sweep_tmp(folder, names, everything=True)
            for name in names:
                if name.endswith(HITS_SUFFIX) and name[: -len(HITS_SUFFIX)] + SUFFIX not in names:
                    freed += self._drop_hits(folder / (name[: -len(HITS_SUFFIX)] + SUFFIX))
                elif name.endswith(CODE_SUFFIX) and is_hex(name[: -len(CODE_SUFFIX)], 64):
                    try:  # a cleared folder's code index points at nothing
                        (folder / name).unlink()
                    except OSError:
                        pass
        return freed
