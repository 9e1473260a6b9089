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

Stores that keep metadata in columns or hash fields (SQLite, Redis) store byte-damaged data as
the binary, keeping the metadata: the damage then shows as a checksum mismatch, which is what it
is. The layered store's damage goes to its remote copy (the local copy removed). ``redis_server``
is a real ``redis-server`` on a loopback port for the session; ``synthetic(n)`` a valid entry
that needs no driver.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from clmagic.entry import FORMAT_VERSION, Entry, parse_json, seal
from clmagic.entry_file import decode, encode
from clmagic.errors import CorruptEntry
from clmagic.store import DirectoryStore, LayeredStore, Store, open_store

__all__ = ["StoreFactory", "DirectoryFactory", "SQLiteFactory", "RedisFactory", "LayeredFactory",
           "BACKENDS", "store_factory", "redis_server", "RedisServer", "synthetic"]


FP = "0123456789abcdef"
FP2 = "fedcba9876543210"


def synthetic(n: int, fingerprint: str = FP, size: int = 256, tag: str = "") -> Entry:
    """A valid entry with a random binary (no driver needed)."""
    key = hashlib.sha256(f"{fingerprint}/{n}/{tag}".encode()).hexdigest()
    return Entry.create(
        key, fingerprint, os.urandom(size), kernels=[f"k{n}", "scale"], options="-O3",
        device="Synthetic Device", platform="Synthetic Platform", driver="1.2.3",
        device_version="OpenCL 3.0", platform_version="OpenCL 3.0 synthetic",
        source_bytes=100 + n, build_ms=12.5 + n, created=1_700_000_000.0 + n,
        build_log=f"log of {n}",
    )


class RedisServer:
    """A private ``redis-server`` on a free loopback port, with its files in a temp folder."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server not found: run scripts/setup.sh test")
        self.dir = tempfile.mkdtemp(prefix="clmagic-redis-")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        self.client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 20
        while True:  # wait until it answers
            try:
                self.client.ping()
                break
            except redis.exceptions.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("redis-server did not start")
                time.sleep(0.02)

    def stop(self) -> None:
        """Kill the server (as a crash would) and remove its folder."""
        self.client.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server():
    """One real redis-server for the test session."""
    server = RedisServer()
    yield server
    server.stop()


class StoreFactory:
    """One backend for the shared tests; subclass per backend."""

    name = "store"
    server: RedisServer | None = None

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
        "from clmagic.store.directory.files import TMP\n"
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


def _parse_or_damage(data: bytes) -> Entry | None:
    try:
        return decode(data)
    except CorruptEntry:
        return None


class SQLiteFactory(StoreFactory):
    """The SQLite store: one row per entry in one file."""

    name = "sqlite"

    def __call__(self, root: Path) -> tuple[Store, str]:
        location = str(root / "cache.db")
        return self.reopen(location), location

    def raw(self, store: Store, fp: str, key: str) -> bytes | None:
        from clmagic.store.sqlite.sql import SQL_GET, row_meta

        with sqlite3.connect(store.location) as db:
            row = db.execute(SQL_GET, (FORMAT_VERSION, fp, key)).fetchone()
        db.close()
        if row is None:
            return None
        return encode(Entry(row_meta(row), binary=row[-1]))

    def write_raw(self, store: Store, fp: str, key: str, data: bytes) -> None:
        entry = _parse_or_damage(data)
        with sqlite3.connect(store.location) as db:
            if entry is not None:
                from clmagic.store.sqlite.sql import SQL_PUT, entry_row

                db.execute(SQL_PUT, entry_row(entry))
            else:
                db.execute("UPDATE entries SET binary = ? WHERE fingerprint = ? AND key = ?",
                           (data, fp, key))
        db.close()


class RedisFactory(StoreFactory):
    """The Redis store on the session's redis-server (emptied for each test)."""

    name = "redis"

    def __call__(self, root: Path) -> tuple[Store, str]:
        assert self.server is not None
        self.server.client.flushall()
        return self.reopen(self.server.url), self.server.url

    def _name(self, fp: str, key: str) -> str:
        return f"clmagic:v{FORMAT_VERSION}:{fp}:{key}"

    def raw(self, store: Store, fp: str, key: str) -> bytes | None:

        meta, binary = self.server.client.hmget(self._name(fp, key), "meta", "binary")
        if meta is None:
            return None
        return encode(Entry(parse_json(meta), binary=binary))

    def write_raw(self, store: Store, fp: str, key: str, data: bytes) -> None:
        entry = _parse_or_damage(data)
        if entry is not None:
            self.reopen(self.server.url).put(entry)
        else:
            self.server.client.hset(self._name(fp, key), "binary", data)


class LayeredFactory(RedisFactory):
    """A local directory store in front of the Redis store. Damage goes to the remote copy (the
    local one removed), so the remote's checks are the ones tested."""

    name = "layered"

    def __call__(self, root: Path) -> tuple[Store, str]:
        super().__call__(root)
        location = str(root / "local")
        return self.reopen(location), location

    def reopen(self, location: str) -> Store:
        assert self.server is not None
        return LayeredStore(open_store(location), open_store(self.server.url))

    def env(self, location: str) -> dict[str, str]:
        return {"CLMAGIC_CACHE_DIR": location, "CLMAGIC_REMOTE": self.server.url}

    def write_raw(self, store: Store, fp: str, key: str, data: bytes) -> None:
        assert isinstance(store, LayeredStore)
        store.local.delete(fp, key)
        super().write_raw(store.remote, fp, key, data)


BACKENDS: dict[str, type[StoreFactory]] = {
    "directory": DirectoryFactory, "sqlite": SQLiteFactory, "redis": RedisFactory,
    "layered": LayeredFactory,
}




@pytest.fixture(params=list(BACKENDS))
def store_factory(request) -> StoreFactory:
    """Each store backend in turn, as a :class:`StoreFactory`."""
    factory = BACKENDS[request.param]()
    if isinstance(factory, RedisFactory):
        factory.server = request.getfixturevalue("redis_server")
    return factory


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


def forged(entry: Entry, binary: bytes) -> Entry:
    """A full forgery: ``binary`` under ``entry``'s name, every checksum and the digest
    recomputed (what anyone who can write a store, and has clmagic, can make)."""
    import dataclasses

    import xxhash

    meta = dataclasses.replace(entry.meta, binary_xxh3=xxhash.xxh3_128_hexdigest(binary),
                               binary_bytes=len(binary), digest="", signature="")
    return Entry(seal(meta, None), binary=binary)
