"""How the SQLite and Redis stores write: a hit touches only its use count, a lock held by
another process or a refused hit count never turns saving off, a reconnect failure is no
traceback, and an existing file is opened without taking the write lock. Metadata and binary
checks shared by every backend (``check_meta``/``check_binary``)."""

from __future__ import annotations

import dataclasses
import math
import shutil
import sqlite3
import time

import pytest
from stores import FP, synthetic

from clmagic.entry import FORMAT_VERSION, MAX_META, check_binary, check_meta
from clmagic.errors import CorruptEntry
from clmagic.store import RedisStore, SQLiteStore, open_store
from clmagic.store.sqlite import sql as sqlite_sql
from clmagic.store.sqlite import store as sqlite_mod

BIG = 1 << 20  # a binary of 256 SQLite pages: a hit that rewrote it would show in the WAL


def _wal_frames(db) -> int:
    """Frames in the WAL now (a passive checkpoint reports them and moves nothing back)."""
    with sqlite3.connect(db) as conn:
        busy, frames, _moved = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    conn.close()
    assert busy == 0
    return frames


def test_sqlite_hit_writes_the_use_count_not_the_entry(tmp_path):
    db = tmp_path / "c.db"
    store = open_store(str(db))
    e = synthetic(1, size=BIG)
    assert store.put(e)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        row_before = conn.execute("SELECT rowid, * FROM entries").fetchall()
    conn.close()
    assert (tmp_path / "c.db-wal").stat().st_size == 0
    start = time.time()
    for _ in range(5):
        store.record_hit(FP, e.key)
    frames = _wal_frames(db)
    assert 0 < frames < 20  # the use-count rows only; one rewrite of the entry is 256+ frames
    assert (tmp_path / "c.db-wal").stat().st_size < BIG // 8
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT rowid, * FROM entries").fetchall() == row_before
    conn.close()
    (listed,) = store.entries()
    got = store.get(FP, e.key)
    for use in (listed.usage, got.usage):
        assert use.hits == 5 and start <= use.last_used <= time.time()
    assert got.binary == e.binary


def test_sqlite_use_counts_go_with_their_entry(tmp_path):
    store = open_store(str(tmp_path / "c.db"))
    a, b, c = synthetic(1), synthetic(2), synthetic(3)
    store.put_many([a, b, c])
    for e in (a, b, c):
        store.record_hit(FP, e.key)
    store.record_hit(FP, "f" * 64)  # no entry: no use row either

    def usage() -> set[str]:
        with sqlite3.connect(store.location) as conn:
            keys = {k for (k,) in conn.execute("SELECT key FROM usage WHERE hits > 0")}
        conn.close()
        return keys

    assert usage() == {a.key, b.key, c.key}
    assert store.delete(FP, a.key) and usage() == {b.key, c.key}
    store.put(b)  # a replaced entry starts again from no hits
    assert usage() == {c.key} and store.get(FP, b.key).usage.hits == 0
    assert store.clear()[0] == 2 and usage() == set()
    with sqlite3.connect(store.location) as conn:
        assert conn.execute("SELECT count(*) FROM usage").fetchone() == (0,)
    conn.close()


@pytest.fixture
def short_busy(monkeypatch):
    """A 20 ms busy timeout, so tests that hold the write lock do not wait 5 s a write: set where
    a connection is opened (``sql.connect``) as well as where the store sets it again."""
    monkeypatch.setattr(sqlite_mod, "BUSY_TIMEOUT_MS", 20)
    monkeypatch.setattr(sqlite_sql, "BUSY_TIMEOUT_MS", 20)


def _hold_write_lock(db) -> sqlite3.Connection:
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_sqlite_hit_and_save_under_another_writers_lock_keep_saving_on(tmp_path, short_busy,
                                                                      capsys):
    db = tmp_path / "c.db"
    store = open_store(str(db))
    e = synthetic(1)
    assert store.put(e)
    other = _hold_write_lock(db)
    try:
        store.record_hit(FP, e.key)  # dropped after a short wait, saving stays on
        assert store.writable and store.reason == ""
        assert store.put(synthetic(2)) is False  # this save is dropped ...
        assert store.writable  # ... but saving is not off for good
        assert store.get(FP, e.key).binary == e.binary  # reads go on under the lock
    finally:
        other.rollback()
        other.close()
    assert store.put(synthetic(2)) and store.put(synthetic(3))
    store.record_hit(FP, e.key)
    assert store.get(FP, e.key).usage.hits == 1
    err = capsys.readouterr().err
    assert err.count("warning") == 1 and "locked by another process" in err


def test_sqlite_lock_held_on_every_save_pauses_saving_then_saves_again(tmp_path, short_busy,
                                                                       capsys):
    """A lock held across many saves (40 s in the issue) pauses saving, never ends it: once the
    pause is over and the lock is gone, entries are saved again."""
    db = tmp_path / "c.db"
    store = open_store(str(db))
    other = _hold_write_lock(db)
    try:
        results = [store.put(synthetic(n)) for n in range(sqlite_mod.MAX_LOCKED)]
        assert store.put(synthetic(9)) is False  # paused: no wait on the lock at all
    finally:
        other.rollback()
        other.close()
    assert results == [False] * sqlite_mod.MAX_LOCKED
    assert store.writable and "locked" in store.reason
    assert "saving again in" in capsys.readouterr().err
    assert store.put(synthetic(10)) is False  # the lock is gone, but the pause is not over
    store._paused_until = 0.0  # the pause is over (its length is lock_pause_s)
    assert store.put(synthetic(11)) and store.reason == ""
    assert store.get(FP, synthetic(11).key) is not None


def test_sqlite_reconnect_failure_is_no_traceback(tmp_path, capsys):
    folder = tmp_path / "gone"
    store = open_store(str(folder / "c.db"))
    e = synthetic(1)
    assert store.put(e)
    store.close()
    shutil.rmtree(folder)  # the next use reconnects, and cannot open the file
    store.record_hit(FP, e.key)
    assert store.get(FP, e.key) is None
    assert store.put(e) is False and not store.writable
    assert "unable to open" in store.reason
    assert list(store.entries()) == []


def test_sqlite_existing_file_opens_without_the_write_lock(tmp_path, short_busy):
    db = tmp_path / "c.db"
    first = open_store(str(db))
    e = synthetic(1)
    first.put(e)
    other = _hold_write_lock(db)
    try:
        second = open_store(str(db))  # a new process's open, while another one writes
        assert isinstance(second, SQLiteStore) and second.writable, second.reason
        assert second.get(FP, e.key).binary == e.binary
    finally:
        other.rollback()
        other.close()
    assert second.put(synthetic(2)) and len(list(first.entries())) == 2


def test_redis_refused_hit_count_keeps_saving_on(redis_server, capsys):
    redis_server.client.flushall()
    store = RedisStore(redis_server.url)
    e = synthetic(1)
    name = f"clmagic:v{FORMAT_VERSION}:{FP}:{e.key}"
    redis_server.client.set(name, b"not a hash")  # the hit script's HINCRBY gets WRONGTYPE
    store.record_hit(FP, e.key)
    assert store.writable and store.available
    assert "did not count a hit" in capsys.readouterr().err
    assert store.put(synthetic(2)) and store.put(e)
    store.record_hit(FP, e.key)
    assert store.get(FP, e.key).usage.hits == 1


def _meta(**over):
    return {**synthetic(1).meta.to_json(), **over}


@pytest.mark.parametrize("meta, message", [
    ([1, 2], "not a JSON object"),
    (_meta(created=math.inf), "field 'created' is NaN or infinity"),
    (_meta(build_ms=math.nan), "field 'build_ms' is NaN or infinity"),
    (_meta(created=1e301), "field 'created' is out of range$"),
    (_meta(extra={"deep": [[[math.nan]]]}), "NaN or infinity"),
    (_meta(build_ms=True), "'build_ms'"),
    (_meta(kernels=["k", 3]), "non-string"),
    (_meta(build_log="x" * (MAX_META + 1)), "over the"),
    (_meta(extra=[[]] * (MAX_META // 2)), "over the"),
], ids=["array", "inf", "nan", "huge", "nested-nan", "bool", "kernel-int", "long-log",
        "many-items"])
def test_check_meta_rejects(meta, message):
    with pytest.raises(CorruptEntry, match=message):
        check_meta(meta)


def test_check_binary_checks_hash_length_and_name():
    e = synthetic(1)
    check_binary(e.meta, e.binary, e.key, FP)
    check_binary(e.meta, e.binary, None, None)
    with pytest.raises(CorruptEntry, match="checksum"):
        check_binary(e.meta, e.binary[:-1] + bytes([e.binary[-1] ^ 1]), e.key, FP)
    with pytest.raises(CorruptEntry, match="length"):
        check_binary(dataclasses.replace(e.meta, binary_bytes=1), e.binary, e.key, FP)
    with pytest.raises(CorruptEntry, match="another key"):
        check_binary(e.meta, e.binary, "0" * 64, FP)
    with pytest.raises(CorruptEntry, match="another device"):
        check_binary(e.meta, e.binary, e.key, "f" * 16)


def test_stored_metadata_with_infinity_is_corrupt(tmp_path, redis_server):
    e = synthetic(1)
    sqlite_store = open_store(str(tmp_path / "c.db"))
    sqlite_store.put(e)
    with sqlite3.connect(sqlite_store.location) as conn:
        conn.execute("UPDATE entries SET created = 1e999")  # SQLite keeps +Inf in a REAL
    conn.close()
    redis_server.client.flushall()
    redis_store = RedisStore(redis_server.url)
    redis_store.put(e)
    name = f"clmagic:v{FORMAT_VERSION}:{FP}:{e.key}"
    raw = redis_server.client.hget(name, "meta").replace(b'"build_ms":13.5', b'"build_ms":1e999')
    redis_server.client.hset(name, "meta", raw)
    for store in (sqlite_store, redis_store):
        with pytest.raises(CorruptEntry, match="NaN or infinity"):
            store.get(FP, e.key)
        assert list(store.entries()) == []
