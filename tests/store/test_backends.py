"""SQLite and Redis stores with real builds: stored columns, schema guards, read-only files,
failed writes, a shared remote across processes, and a remote that dies or stalls."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import xxhash
from conftest import SAXPY, child_env, last_json, run_child
from stores import FP, RedisServer, can_drop_dac, drop_dac, synthetic

import clmagic
from clmagic.config import Settings
from clmagic.entry import FORMAT_VERSION
from clmagic.store import LayeredStore, RedisStore, SQLiteStore, open_store

CHILD = """
import json, os, numpy as np, pyopencl as cl, clmagic
r = clmagic.build(os.environ["SRC"], "-O2", os.environ["DEV"])
x = np.arange(64, dtype=np.float32); y = np.ones_like(x)
mf = cl.mem_flags
xb = cl.Buffer(r.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
yb = cl.Buffer(r.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=y)
r.kernels["saxpy"](r.queue, x.shape, None, np.float32(3), xb, yb)
cl.enqueue_copy(r.queue, y, yb)
print(json.dumps({"outcome": r.outcome, "note": r.note, "saved": r.saved, "key": r.key,
                  "correct": bool(np.allclose(y, 3 * x + 1))}))
"""


def _compiler(pocl, cache, remote=None, ttl=None):
    env = {"CLMAGIC_CACHE_DIR": str(cache), "CLMAGIC_DEVICE": pocl}
    if remote:
        env["CLMAGIC_REMOTE"] = remote
    if ttl:
        env["CLMAGIC_REMOTE_TTL"] = str(ttl)
    return clmagic.Compiler(Settings.from_env(env))


def test_open_store_chooses_by_location(tmp_path, redis_server):
    assert type(open_store(str(tmp_path / "a" / "c.db"))) is SQLiteStore
    assert (tmp_path / "a" / "c.db").is_file()  # parent folder created
    assert type(open_store(str(tmp_path / "c.sqlite3"))) is SQLiteStore
    assert type(open_store(redis_server.url)) is RedisStore
    assert open_store(str(tmp_path / "dir")).kind == "directory"
    s = Settings.from_env({"CLMAGIC_CACHE_DIR": str(tmp_path / "d"),
                           "CLMAGIC_REMOTE": redis_server.url, "CLMAGIC_REMOTE_TTL": "60"})
    assert (s.remote, s.remote_ttl) == (redis_server.url, 60)
    assert type(clmagic.Compiler(s).store) is LayeredStore


def test_sqlite_columns_hold_the_entry(tmp_path, pocl):
    db = tmp_path / "cache.db"
    comp = _compiler(pocl, db)
    r = comp.build(SAXPY, "-O2")
    entry = comp.store.get(r.device.fingerprint, r.key)
    comp.store.record_hit(r.device.fingerprint, r.key)
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        row = conn.execute("SELECT *, length(binary) AS n FROM entries").fetchone()
        use = conn.execute("SELECT * FROM usage").fetchone()
        prov = conn.execute("SELECT * FROM provenance").fetchall()
        version = conn.execute("SELECT version FROM clmagic_schema").fetchall()
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert (row["format"], row["fingerprint"], row["key"]) == (
        FORMAT_VERSION, r.device.fingerprint, r.key)
    assert json.loads(row["kernels"]) == ["saxpy", "scale"]
    assert row["options"] == r.options.effective
    assert (row["device"], row["platform"], row["driver"]) == (
        r.device.device_name, r.device.platform_name, r.device.driver_version)
    assert row["build_ms"] == pytest.approx(r.build_ms, abs=1e-3)
    assert row["source_bytes"] == len(SAXPY.encode())
    assert row["binary_bytes"] == row["n"] == len(entry.binary) > 0
    assert row["binary_sha256"] == ""  # format 1's column: the checksum is binary_xxh3 now
    assert json.loads(row["extra"])["binary_xxh3"] == xxhash.xxh3_128_hexdigest(row["binary"])
    assert row["binary"] == entry.binary and "hits" not in row.keys()
    assert (use["fingerprint"], use["key"], use["hits"]) == (r.device.fingerprint, r.key, 1)
    assert use["last_used"] > 0
    assert json.loads(row["extra"])["device_version"] == r.device.device_version
    assert [tuple(p)[:3] for p in prov] == [
        (clmagic.__version__, __import__("pyopencl").VERSION_TEXT, sqlite3.sqlite_version)]
    assert [tuple(v) for v in version] == [(1,)] and mode == "wal"
    busy = comp.store._connection().execute("PRAGMA busy_timeout").fetchone()[0]
    assert busy == 5000


@pytest.mark.parametrize("where", ["sqlite", "redis"])
def test_two_processes_miss_then_hit(where, tmp_path, pocl, redis_server):
    redis_server.client.flushall()
    cache = str(tmp_path / "c.db") if where == "sqlite" else redis_server.url
    env = dict(SRC=SAXPY, DEV=pocl, CLMAGIC_CACHE_DIR=cache)
    first, second = last_json(run_child(CHILD, **env)), last_json(run_child(CHILD, **env))
    assert (first["outcome"], second["outcome"]) == ("MISS", "HIT")
    assert first["saved"] and second["correct"] and f"from {where}" in second["note"]


def test_remote_shares_builds_between_machines(tmp_path, pocl, redis_server):
    redis_server.client.flushall()
    base = dict(SRC=SAXPY, DEV=pocl, CLMAGIC_REMOTE=redis_server.url)
    a = last_json(run_child(CHILD, **base, CLMAGIC_CACHE_DIR=str(tmp_path / "a")))
    b = last_json(run_child(CHILD, **base, CLMAGIC_CACHE_DIR=str(tmp_path / "b")))
    assert (a["outcome"], b["outcome"]) == ("MISS", "HIT") and "from redis" in b["note"]
    # the remote hit was copied into b's local store: b alone now hits, without the remote
    alone = last_json(run_child(CHILD, SRC=SAXPY, DEV=pocl, CLMAGIC_CACHE_DIR=str(tmp_path / "b")))
    assert alone["outcome"] == "HIT" and "from directory" in alone["note"] and alone["correct"]
    listed = {e.key: e.usage.store for e in
              LayeredStore(open_store(str(tmp_path / "b")), open_store(redis_server.url)).entries()}
    assert listed == {a["key"]: "directory+redis"}


def test_newer_schema_is_left_untouched(tmp_path, pocl, capsys):
    db = tmp_path / "new.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE clmagic_schema (version INTEGER)")
        conn.execute("INSERT INTO clmagic_schema VALUES (99)")
        conn.execute("CREATE TABLE entries_v99 (anything BLOB)")
    conn.close()
    before = db.read_bytes()
    comp = _compiler(pocl, db)
    assert comp.store is None and comp.build(SAXPY).outcome == "MISS"
    assert "schema 99" in capsys.readouterr().err
    assert db.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["new.db"]


def test_failed_write_turns_writes_off_once(tmp_path, pocl, capsys):
    db = tmp_path / "c.db"
    comp = _compiler(pocl, db)
    with sqlite3.connect(db) as conn:  # every insert fails from now on, as a full disk would
        conn.execute("CREATE TRIGGER no BEFORE INSERT ON entries "
                     "BEGIN SELECT RAISE(ABORT, 'disk says no'); END")
    conn.close()
    first = comp.build(SAXPY)
    second = comp.build(SAXPY.replace("a * x[i]", "x[i] * a"))
    assert (first.outcome, second.outcome) == ("MISS", "MISS")
    assert not first.saved and "disk says no" in first.note and "disk says no" in second.note
    assert comp.store.writable is False
    assert capsys.readouterr().err.count("disk says no") == 1
    assert comp.store.put(synthetic(1)) is False


def _world_readable_tmp() -> Path:
    path = Path(tempfile.mkdtemp(prefix="clmagic-ro-"))
    path.chmod(0o755)
    return path


def test_read_only_file_serves_hits_and_stores_nothing(pocl):
    if not can_drop_dac():
        pytest.skip("running as root without CAP_SETPCAP: cannot make a file read-only")
    root = _world_readable_tmp()
    try:
        home = root / "home"  # POCL wants a writable home
        home.mkdir(mode=0o777)
        home.chmod(0o777)
        db = root / "db" / "c.db"
        writer = _compiler(pocl, db)
        writer.build(SAXPY, "-O2")
        writer.store.close()  # the last connection checkpoints the WAL into the file
        db.chmod(0o444)
        db.parent.chmod(0o555)
        before = db.read_bytes()
        other = SAXPY.replace("a * x[i]", "x[i] * a")
        code = CHILD + "\nr2 = clmagic.build(os.environ['OTHER'], None, os.environ['DEV'])\n" \
            "print(json.dumps({'outcome': r.outcome, 'second': r2.outcome, 'saved': r2.saved}))"
        proc = subprocess.run([sys.executable, "-c", code], preexec_fn=drop_dac,
                              env=child_env(SRC=SAXPY, OTHER=other, DEV=pocl,
                                            CLMAGIC_CACHE_DIR=str(db), HOME=str(home)),
                              capture_output=True, text=True, timeout=240)
        out = last_json(proc)
        assert out == {"outcome": "HIT", "second": "MISS", "saved": False}
        assert "read-only" in proc.stderr
        assert db.read_bytes() == before
    finally:
        (root / "db").chmod(0o755)
        shutil.rmtree(root)


def test_redis_layout_index_and_ttl(tmp_path, pocl, redis_server):
    redis_server.client.flushall()
    comp = _compiler(pocl, redis_server.url, ttl=600)
    r = comp.build(SAXPY)
    comp.flush()  # the save runs in the background
    name = f"clmagic:v{FORMAT_VERSION}:{r.device.fingerprint}:{r.key}"
    c = redis_server.client
    assert set(c.hkeys(name)) == {b"meta", b"binary", b"hits", b"last_used"}
    meta = json.loads(c.hget(name, "meta"))
    assert meta["binary_xxh3"] == xxhash.xxh3_128_hexdigest(c.hget(name, "binary"))
    assert meta["kernels"] == ["saxpy", "scale"] and "store" not in meta
    assert c.smembers(f"clmagic:v{FORMAT_VERSION}:{r.device.fingerprint}:index") == {r.key.encode()}
    assert 0 < c.ttl(name) <= 600
    comp.store.record_hit(r.device.fingerprint, r.key)
    assert c.hget(name, "hits") == b"1"


def test_remote_killed_mid_session_is_skipped_with_one_warning(tmp_path, pocl, capsys):
    server = RedisServer()
    try:
        comp = _compiler(pocl, tmp_path / "local", remote=server.url)
        assert comp.build(SAXPY).saved
        assert len(list(comp.store.remote.entries())) == 1
        server.stop()
        second = comp.build(SAXPY.replace("a * x[i]", "x[i] * a"))
        third = comp.build(SAXPY.replace("y[i] = ", "y[i] = 0.0f + "))
        assert (second.outcome, third.outcome) == ("MISS", "MISS")
        assert second.saved and third.saved  # the local store still takes them
        assert comp.store.remote.available is False
        assert capsys.readouterr().err.count("skipping it for the rest of this process") == 1
        assert len(list(comp.store.entries())) == 3
    finally:
        server.stop()


def test_stalled_remote_times_out_and_stays_skipped(tmp_path):
    server = RedisServer()
    try:
        remote = RedisStore(server.url, timeout=0.2)
        store = LayeredStore(open_store(str(tmp_path / "local")), remote)
        e = synthetic(1)
        os.kill(server.proc.pid, signal.SIGSTOP)  # the server hangs
        try:
            assert store.get(FP, e.key) is None
            assert store.put(e) is True  # stored locally
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        assert remote.available is False
        store.put(synthetic(2))
        assert server.client.dbsize() == 0  # nothing more was sent after the stall
        assert {x.usage.store for x in store.entries()} == {"directory"}
    finally:
        server.stop()


def test_remote_down_from_the_start(tmp_path, pocl, capsys):
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    comp = _compiler(pocl, tmp_path / "local", remote=f"redis://:secret@127.0.0.1:{port}/0")
    assert comp.build(SAXPY).saved
    err = capsys.readouterr().err
    assert err.count("unreachable") == 1 and "secret" not in err
    assert "***" in comp.store.location


def test_sqlite_file_in_a_world_writable_folder_is_refused_unless_trusted(tmp_path, capsys):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    assert open_store(str(folder / "c.db")) is None
    assert "world-writable" in capsys.readouterr().err and not (folder / "c.db").exists()
    assert type(open_store(str(folder / "c.db"), trust=True)) is SQLiteStore
