"""Folder and file safety for the stores that live on a file system (directory, SQLite): a
folder that others could write into is refused, and clmagic's own folders and files are
private (0700 / 0600)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["hostile", "private_folder", "private_file", "refusal", "check_creatable",
           "O_NOFOLLOW"]

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
    """Create ``path`` (and missing parents) readable by this user only; an existing folder
    is left as it is."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)


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
