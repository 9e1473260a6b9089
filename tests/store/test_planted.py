"""Planted things and unlucky states of a store (issue 11, part B): files that are not files,
times out of range, leftover temp files, device folders others could write into, a cache folder
deleted mid-session. None of them may hang, crash or raise; each is named or repaired."""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import socket
import sqlite3
import stat
import time
from pathlib import Path

import pytest
from stores import FP, synthetic
from test_faults import SRC, check

from clmagic import ClmagicError, Compiler
from clmagic.cache.bundle import export_bundle, import_bundle
from clmagic.cache.manage import select_entries
from clmagic.config import Settings
from clmagic.entry import FORMAT_VERSION, Entry
from clmagic.show.frames import cache_frame
from clmagic.store import DirectoryStore, open_store
from clmagic.store.directory.files import STALE_TMP_S, TMP


@pytest.fixture(autouse=True)
def _no_hang():
    """A test that would block (a FIFO opened for reading) fails after 60 s instead."""
    def alarm(*_):
        raise TimeoutError("blocked: something waited on a planted file")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _settings(cache: Path, pocl: str) -> Settings:
    return Settings.from_env({"CLMAGIC_CACHE_DIR": str(cache), "CLMAGIC_DEVICE": pocl})


def _plant(path: Path, kind: str, tmp: Path) -> object:
    """Put a ``kind`` where a file is expected; returns what must stay alive (a socket)."""
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        here = os.getcwd()
        os.chdir(path.parent)  # a socket's path is limited to 108 bytes: bind it by its name
        try:
            s.bind(path.name)
        finally:
            os.chdir(here)
        return s
    elif kind == "device":
        try:
            os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # like /dev/null
        except PermissionError:
            pytest.skip("mknod is not permitted here")
    elif kind == "symlink-to-fifo":
        target = tmp / "fifo-target"
        if not target.exists():
            os.mkfifo(target)
        path.symlink_to(target)
    elif kind == "directory":
        path.mkdir()
    return None


KINDS = ["fifo", "socket", "device", "symlink-to-fifo", "directory"]
WORDS = {"fifo": "FIFO", "socket": "socket", "device": "character device",
         "symlink-to-fifo": "symlink", "directory": "directory"}


@pytest.mark.parametrize("kind", KINDS)
def test_an_entry_that_is_not_a_file_is_named_and_rebuilt(tmp_path, pocl, kind, capsys):
    cache = tmp_path / "cache"
    c = Compiler(_settings(cache, pocl))
    r = c.build(SRC)
    c.flush()  # the save is in
    path = cache / r.device.fingerprint / f"{r.key}.clbin"
    keep = _plant(path, kind, tmp_path)
    listed = list(c.store.entries())  # the listing skips it, saying what it is, and never waits
    assert listed == []
    again = Compiler(_settings(cache, pocl)).build(SRC)
    assert again.outcome == "CORRUPT" and check(again)
    err = capsys.readouterr().err
    assert WORDS[kind] in err
    assert Compiler(_settings(cache, pocl)).build(SRC).outcome == "HIT"  # repaired
    del keep


@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "directory"])
def test_a_hit_counter_that_is_not_a_file_never_blocks_a_hit(tmp_path, pocl, kind, capsys):
    cache = tmp_path / "cache"
    first = Compiler(_settings(cache, pocl))
    r = first.build(SRC)
    first.flush()  # the save is in
    keep = _plant(cache / r.device.fingerprint / f"{r.key}.hits", kind, tmp_path)
    c = Compiler(_settings(cache, pocl))
    hit = c.build(SRC)
    assert hit.outcome == "HIT" and check(hit)
    (entry,) = c.store.entries()
    assert entry.usage.hits == 0 and len(cache_frame(compiler=c)) == 1
    if kind in ("fifo", "device"):  # opened for the count: named, not written into
        assert WORDS[kind] in capsys.readouterr().err
    del keep


@pytest.mark.parametrize("side", ["", "-wal", "-shm", "-journal"])
@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_sqlite_file_that_is_not_a_file_is_refused(tmp_path, kind, side, capsys):
    db = tmp_path / "c.db"
    if side:
        assert open_store(str(db)).put(synthetic(1))
    keep = _plant(Path(f"{db}{side}"), kind, tmp_path)
    assert open_store(str(db)) is None
    err = capsys.readouterr().err
    assert WORDS[kind] in err and "memory only" in err
    del keep


@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "symlink-to-fifo"])
def test_a_bundle_that_is_not_a_file_is_one_error(tmp_path, kind):
    store = open_store(str(tmp_path / "cache"))
    keep = _plant(tmp_path / "b.clbundle", kind, tmp_path)
    with pytest.raises(ClmagicError, match="FIFO|directory|character device"):
        import_bundle(tmp_path / "b.clbundle", store=store)
    del keep


# -- times out of range -----------------------------------------------------------------------

BAD_TIMES = [1e300, -1e300, -5.0, float("nan"), 10_413_792_000.0]  # the last: year 2300


def _views_work(store, compiler=None) -> None:
    """Every view of the entries: the DataFrame, the widget's rows, a clear by age."""
    from clmagic.show.cache import entry_line as _row

    frame = cache_frame(store=store, compiler=compiler)
    assert len(frame) >= 1
    for e in store.entries():
        _row(e)
        assert 0.0 <= e.last_used <= time.time() + 1e9
        assert e.usage.last_used is None or math.isfinite(e.usage.last_used)
    select_entries(store, older_than="1d")


@pytest.mark.parametrize("when", BAD_TIMES, ids=["1e300", "-1e300", "negative", "nan", "2300"])
def test_times_out_of_range_show_as_unknown(tmp_path, when, redis_server):
    # a hit counter dated `when` (directory; a file time cannot be NaN or 1e300: the nearest)
    d = open_store(str(tmp_path / "d"))
    e = synthetic(1)
    d.put(e)
    d.record_hit(FP, e.key)
    hits = tmp_path / "d" / FP / f"{e.key}.hits"
    try:
        os.utime(hits, (10_413_792_000.0, when if math.isfinite(when) and abs(when) < 1e11
                        else 10_413_792_000.0))
    except (OverflowError, OSError):
        pass
    _views_work(d)
    # a SQLite usage row and a Redis hash field with that time
    s = open_store(str(tmp_path / "s.db"))
    s.put(e)
    s.record_hit(FP, e.key)
    with sqlite3.connect(tmp_path / "s.db") as conn:
        conn.execute("UPDATE usage SET last_used = ?", (when,))
    conn.close()
    _views_work(s)
    redis_server.client.flushall()
    r = open_store(redis_server.url)
    r.put(e)
    redis_server.client.hset(f"clmagic:v{FORMAT_VERSION}:{FP}:{e.key}", "last_used", repr(when))
    _views_work(r)
    # an entry created at `when` (in the metadata: a bundle can carry it), through a bundle
    made = synthetic(2)
    odd = Entry(dataclasses.replace(made.meta, created=when if math.isfinite(when) else 1e300),
                binary=made.binary)
    src = open_store(str(tmp_path / "src"))
    src.put(odd)
    export_bundle(tmp_path / "b.clbundle", store=src)
    dst = open_store(str(tmp_path / "dst"))
    assert import_bundle(tmp_path / "b.clbundle", store=dst).imported == 1
    _views_work(dst)


# -- leftovers, folders ------------------------------------------------------------------------

def _tmp_file(folder: Path, key: str, pid: int, age: float = 0.0) -> Path:
    path = folder / f"{key}.clbin{TMP}{pid}.0badc0de"
    path.write_bytes(b"half an entry")
    if age:
        os.utime(path, (time.time() - age, time.time() - age))
    return path


def test_leftover_temp_files_go_with_listings_and_clears(tmp_path):
    store = open_store(str(tmp_path / "c"))
    e = synthetic(1)
    store.put(e)
    folder = tmp_path / "c" / FP
    dead = _tmp_file(folder, "a" * 64, 2**22 + 12345)  # no such pid
    old = _tmp_file(folder, "b" * 64, os.getpid(), age=STALE_TMP_S + 60)  # a pid in use, old
    live = _tmp_file(folder, "c" * 64, os.getpid())  # a writer at work
    assert [x.key for x in store.entries()] == [e.key]
    assert not dead.exists() and not old.exists() and live.exists()
    assert store.clear()[0] == 1
    assert not live.exists() and os.listdir(folder) == []


def test_a_device_folder_others_can_write_is_repaired(tmp_path, pocl):
    cache = tmp_path / "cache"
    first = Compiler(_settings(cache, pocl))
    r = first.build(SRC)
    first.flush()  # the save is in
    folder = cache / r.device.fingerprint
    folder.chmod(0o777)
    c = Compiler(_settings(cache, pocl))
    assert c.build(SRC).outcome == "HIT"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    folder.chmod(0o775)
    assert len(list(Compiler(_settings(cache, pocl)).store.entries())) == 1
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_device_folder_of_another_user_is_not_used(tmp_path, pocl, capsys):
    cache = tmp_path / "cache"
    first = Compiler(_settings(cache, pocl))
    r = first.build(SRC)
    first.flush()  # the save is in
    folder = cache / r.device.fingerprint
    os.chown(folder, 65534, 65534)
    c = Compiler(_settings(cache, pocl))
    assert list(c.store.entries()) == []
    again = c.build(SRC)
    assert again.outcome == "MISS" and check(again) and not again.saved
    err = capsys.readouterr().err
    assert "owned by another user" in err


def test_a_cache_folder_deleted_mid_session_comes_back_private(tmp_path, pocl):
    import shutil

    cache = tmp_path / "a" / "b" / "cache"
    c = Compiler(_settings(cache, pocl))
    r = c.build(SRC)
    c.flush()  # the save is in
    shutil.rmtree(tmp_path / "a")
    old = os.umask(0o022)
    try:
        c.forget()
        again = c.build(SRC)
    finally:
        os.umask(old)
    assert again.outcome == "MISS" and again.saved
    for folder in (tmp_path / "a", tmp_path / "a" / "b", cache, cache / r.device.fingerprint):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert isinstance(c.store, DirectoryStore)
