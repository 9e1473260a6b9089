"""Store backends for the conformance and fault tests: the ``store_factory`` fixture.

A factory is callable as ``make(root_tmp_path) -> (Store, location)``; the same ``location``
reopens the same store (``reopen``), in this process or, through ``env``, in a child. For the
fault matrix a factory also knows how to damage what it stores:

- ``raw(store, fp, key)`` / ``write_raw(store, fp, key, data)``: the stored bytes of one entry
  (the encoded entry file), so byte-level faults (truncation, flipped bytes, bad magic, ...) are
  written once for every backend;
- ``plant(store, fp, key, fault)``: faults that only mean something for some backends (a
  directory where the file should be, a leftover temp file, a file without read permission,
  a planted symlink); a backend without such a thing calls ``pytest.skip`` with the reason.

Other backends (SQLite, Redis, layered) add a subclass and a name in ``BACKENDS``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from clmagic.store import DirectoryStore, Store, open_store

__all__ = ["StoreFactory", "DirectoryFactory", "BACKENDS", "store_factory"]


class StoreFactory:
    """One backend for the shared tests; subclass per backend."""

    name = "store"

    def __call__(self, root: Path) -> tuple[Store, str]:
        raise NotImplementedError

    def reopen(self, location: str) -> Store:
        """A second handle on the same store."""
        store = open_store(location)
        assert store is not None
        return store

    def env(self, location: str) -> dict[str, str]:
        """Environment that makes a child's ``Compiler()`` use this store."""
        return {"CLMAGIC_CACHE_DIR": location}

    def raw(self, store: Store, fp: str, key: str) -> bytes | None:
        raise NotImplementedError

    def write_raw(self, store: Store, fp: str, key: str, data: bytes) -> None:
        raise NotImplementedError

    def plant(self, store: Store, fp: str, key: str, fault: str) -> None:
        pytest.skip(f"{fault!r} has no meaning for the {self.name} store")


def _killed_writer(folder: Path, name: str, data: bytes) -> None:
    """A real writer killed mid-write: a child starts the temp file the way the directory store
    does, writes half the entry, and is SIGKILLed before the rename."""
    code = (
        "import os, signal, sys\n"
        "from clmagic.store.directory import TMP\n"
        "folder, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])\n"
        "tmp = os.path.join(folder, f'{name}{TMP}{os.getpid()}.0badc0de')\n"
        "fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)\n"
        "os.write(fd, sys.stdin.buffer.read(n))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    from conftest import child_env

    proc = subprocess.run([sys.executable, "-c", code, str(folder), name, str(len(data) // 2)],
                          input=data, env=child_env(), capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


class DirectoryFactory(StoreFactory):
    """The directory store: one file per entry."""

    name = "directory"

    def __call__(self, root: Path) -> tuple[Store, str]:
        location = str(root / "cache")
        store = DirectoryStore.open(location)
        assert store is not None
        return store, location

    def _path(self, store: Store, fp: str, key: str) -> Path:
        assert isinstance(store, DirectoryStore)
        return store._path(fp, key)

    def raw(self, store: Store, fp: str, key: str) -> bytes | None:
        path = self._path(store, fp, key)
        return path.read_bytes() if path.is_file() else None

    def write_raw(self, store: Store, fp: str, key: str, data: bytes) -> None:
        self._path(store, fp, key).write_bytes(data)

    def plant(self, store: Store, fp: str, key: str, fault: str) -> None:
        path = self._path(store, fp, key)
        if fault == "directory":
            path.unlink()
            (path / "inner").mkdir(parents=True)
            (path / "inner" / "file").write_bytes(b"squatter")
        elif fault == "leftover-temp":
            data = path.read_bytes()
            path.unlink()  # the killed writer never renamed its temp file into place
            _killed_writer(path.parent, path.name, data)
        elif fault == "unreadable":
            path.chmod(0)
        elif fault == "symlink":
            victim = Path(str(store.location) + "-victim")
            victim.write_bytes(b"precious")
            path.unlink()
            path.symlink_to(victim)
        else:
            super().plant(store, fp, key, fault)


BACKENDS: dict[str, type[StoreFactory]] = {"directory": DirectoryFactory}


@pytest.fixture(params=list(BACKENDS))
def store_factory(request) -> StoreFactory:
    """Each store backend in turn, as a :class:`StoreFactory`."""
    return BACKENDS[request.param]()


def drop_dac() -> None:
    """``preexec_fn`` that makes a root child obey file permissions: removes CAP_DAC_OVERRIDE
    and CAP_DAC_READ_SEARCH from its bounding set, so the exec'd Python does not hold them."""
    import ctypes

    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def can_drop_dac() -> bool:
    """Whether children can be made to obey permissions (not root, or root with CAP_SETPCAP)."""
    if os.geteuid() != 0:
        return True
    try:
        proc = subprocess.run([sys.executable, "-c", "pass"], preexec_fn=drop_dac,
                              capture_output=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0
