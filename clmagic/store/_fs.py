"""Folder and file safety for the stores that live on a file system (directory, SQLite): a
folder that others could write into is refused, and clmagic's own folders and files are
private (0700 / 0600).

This is the only way a file under the cache's folders is opened, read or written
(``tests/store/test_fs_only.py`` scans the package for any other ``open``): readers never
block on a FIFO or a device, follow no symlink, and bound what they read (:func:`read_regular`,
:func:`read_json`); writers create 0600 files without following a planted link
(:func:`create_new`) and replace a file whole (:func:`write_private`)."""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
from pathlib import Path

__all__ = ["hostile", "private_folder", "private_file", "refusal", "check_creatable",
           "O_NOFOLLOW", "NotAFile", "TooLarge", "kind_of", "open_file", "open_regular",
           "read_regular", "check_regular", "repair_folder", "create_new", "write_private",
           "read_json"]

#: ``os.O_NOFOLLOW`` where the platform has it
O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)


def hostile(path: Path) -> str | None:
    """Why ``path`` (a folder or a file) must not be trusted with binaries, or ``None``:
    world-writable (sticky bit or not), or owned by another user."""
    st = path.stat()
    if st.st_mode & stat.S_IWOTH:
        return f"it is world-writable (mode {stat.S_IMODE(st.st_mode):04o})"
    uid = os.geteuid() if hasattr(os, "geteuid") else st.st_uid
    if st.st_uid != uid:
        return f"it is owned by another user (uid {st.st_uid}, you are {uid})"
    return None


def private_folder(path: Path) -> None:
    """Create ``path`` and its missing parents (each 0700, whatever the umask allows beyond it:
    ``mkdir -p`` would make the parents 0755) readable by this user only; an existing folder is
    left as it is."""
    missing = []
    while not path.exists() and path.parent != path:
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            if not folder.is_dir():
                raise
            continue
        os.chmod(folder, 0o700)  # the umask only removes bits; this says exactly what we mean


def repair_folder(path: Path | str) -> str | None:
    """Make a folder of clmagic's own private again: one that others could write into (group or
    world write bit) is set to 0700 when this user owns it. Returns why it cannot be trusted
    (owned by another user), else ``None``."""
    st = os.lstat(path)
    uid = os.geteuid() if hasattr(os, "geteuid") else st.st_uid
    if not stat.S_ISDIR(st.st_mode):
        return f"it is {kind_of(st.st_mode)}, not a folder"
    if st.st_uid != uid:
        return f"it is owned by another user (uid {st.st_uid}, you are {uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.chmod(path, 0o700)
    return None


def private_file(path: Path) -> None:
    """Create the empty file ``path`` (mode 0600) unless it exists."""
    if not path.exists():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))


def refusal(folder: Path, file: Path | None = None) -> str | None:
    """Why a store at ``folder`` (and, when given and present, its ``file``) is refused:
    what :func:`hostile` says of the first one that is hostile, else ``None``."""
    return hostile(folder) or (hostile(file) if file is not None and file.exists() else None)


def check_creatable(path: Path) -> None:
    """Raise ``OSError`` unless the missing folder ``path`` can be made: its nearest existing
    ancestor must be a folder that this user may write into."""
    parent = path
    while not parent.exists():
        if parent.parent == parent:
            break
        parent = parent.parent
    if not parent.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(parent))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(parent))


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISLNK, "a symlink"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    """What a file of ``st_mode`` is, in words (``a FIFO``, ``a directory``, ...)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


class NotAFile(OSError):
    """Something that is not a regular file where one was expected (a FIFO, a directory, a
    device, a symlink, a socket); the message says what was found, ``errno`` is ``EISDIR`` for
    a directory (which a compiler's search skips) and ``EINVAL`` for the rest."""

    def __str__(self) -> str:
        return self.strerror or "not a regular file"


class TooLarge(OSError):
    """A regular file larger than anything clmagic writes there: not read (a planted giant
    would otherwise be read into memory whole)."""

    def __str__(self) -> str:
        return self.strerror or "too large"


def check_regular(path: Path | str, follow: bool = False) -> None:
    """Raise :class:`NotAFile` when ``path`` exists and is not a regular file (``follow``: look
    through a symlink); missing is fine. Opens nothing."""
    try:
        st = os.stat(path, follow_symlinks=follow)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise NotAFile(errno.EINVAL, f"{Path(path).name} is {kind_of(st.st_mode)}, not a file",
                       str(path))


def open_regular(path: Path | str, flags: int = os.O_RDONLY, mode: int = 0o600,
                 follow: bool = False) -> int:
    """Open ``path`` only if it is a regular file, without ever blocking: ``O_NONBLOCK`` (a FIFO
    opens at once, or fails, instead of waiting for a peer), no symlink followed unless
    ``follow``, then ``fstat`` of what was opened. Returns the descriptor (in blocking mode);
    raises :class:`NotAFile` saying what was found, or the ``OSError`` of the open."""
    fd, _ = open_file(path, flags, mode, follow)
    try:
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(path: Path | str, flags: int = os.O_RDONLY, mode: int = 0o600,
              follow: bool = False) -> tuple[int, os.stat_result]:
    """:func:`open_regular` for a reader that needs no blocking mode (a regular file's reads
    never wait, ``O_NONBLOCK`` or not): the descriptor and its ``fstat``, two system calls."""
    nofollow = 0 if follow else O_NOFOLLOW
    try:
        fd = os.open(path, flags | nofollow | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EWOULDBLOCK):
            try:
                found = kind_of(os.lstat(path).st_mode)
            except OSError:
                raise exc from None
            raise NotAFile(exc.errno, f"{Path(path).name} is {found}, not a file",
                           str(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            code = errno.EISDIR if stat.S_ISDIR(st.st_mode) else errno.EINVAL
            raise NotAFile(code, f"{Path(path).name} is {kind_of(st.st_mode)}, not a file",
                           str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_regular(path: Path | str, limit: int, follow: bool = False
                 ) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file ``path`` (at most ``limit``) and its ``fstat``, read the
    one safe way every reader of a cache or include folder uses: opened by
    :func:`open_regular` (never blocks on a FIFO or a device, no symlink followed unless
    ``follow``), its size checked before a byte is read, the read bounded (a file that grows
    while read is caught too). Raises :class:`NotAFile`, :class:`TooLarge`, or the
    ``OSError`` of the open (``FileNotFoundError`` for a missing file)."""
    fd = open_regular(path, follow=follow)
    try:
        st = os.fstat(fd)
        if st.st_size > limit:
            raise TooLarge(errno.EFBIG, f"{Path(path).name} is {st.st_size:,} bytes, over the "
                           f"{limit:,} a file there can be", str(path))
        chunks, got = [], 0
        while got <= limit:
            chunk = os.read(fd, min(limit + 1 - got, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:
            raise TooLarge(errno.EFBIG, f"{Path(path).name} grew past {limit:,} bytes while "
                           "read", str(path))
        return b"".join(chunks), st
    finally:
        os.close(fd)


def create_new(path: Path | str, flags: int = os.O_WRONLY) -> int:
    """A descriptor of the new file ``path``, made 0600 here (``O_EXCL``: a file, a FIFO or a
    symlink already there is never opened, the open fails); ``flags``: how it is opened
    (``O_WRONLY``, ``O_RDWR``)."""
    return os.open(path, flags | os.O_CREAT | os.O_EXCL | O_NOFOLLOW
                   | getattr(os, "O_CLOEXEC", 0), 0o600)


def write_private(path: Path, data: bytes, tmp: Path | None = None) -> None:
    """Replace ``path`` by a file (0600) holding ``data``, whole or not at all: written to a
    new temp file beside it (``tmp``, else a hidden name of this process's) and renamed over
    it, so a reader sees the old file or the new one, and a symlink planted at ``path`` is
    replaced, never followed. Raises the ``OSError`` (the temp file removed)."""
    if tmp is None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = create_new(tmp)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_json(path: Path | str, limit: int) -> object:
    """The JSON document in the regular file ``path`` (read by :func:`read_regular`: at most
    ``limit`` bytes, no FIFO waited on, no symlink followed), or ``None`` when there is none
    that can be read: missing, not a file, too large, not UTF-8, not JSON (``NaN`` and
    ``Infinity`` included), nested too deep. Never raises: what is kept there is a record
    that a damaged file only loses. The caller checks the shape of what it gets."""
    try:
        data, _ = read_regular(path, limit)
        return json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except (OSError, ValueError, RecursionError):  # (UnicodeDecodeError is a ValueError)
        return None


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a number JSON holds")
