"""Stores several people write (issue 11, part B): clearing the team's layer must be asked for;
entries carry what they were built for, sealed, and with a team secret signed; binaries from
elsewhere are proven loadable in a child before the user's process loads them."""

from __future__ import annotations

import dataclasses
import inspect
import json
import signal
import sqlite3
import subprocess
import sys
import zlib

import pytest
import xxhash
from conftest import child_env
from stores import FP, FP2, synthetic
from stores import forged as _forged
from test_faults import SRC, check

from clmagic import ClmagicError, Compiler
from clmagic._secret import Secret
from clmagic.cache.bundle import export_bundle, import_bundle
from clmagic.cache.manage import clear_cache
from clmagic.config import Settings
from clmagic.entry import FORMAT_VERSION, Entry, seal
from clmagic.entry_file import HEADER, MAGIC
from clmagic.show import html_of, text_of
from clmagic.store import LayeredStore, open_store


def _layered(tmp_path, redis_server) -> Compiler:
    redis_server.client.flushall()
    store = LayeredStore(open_store(str(tmp_path / "local")), open_store(redis_server.url))
    return Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": "0"}), store=store)


@pytest.mark.parametrize("how", ["all", "device", "older-than", "keys"])
def test_clearing_a_layered_cache_leaves_the_teams_layer_unless_asked(tmp_path, redis_server,
                                                                      how):
    c = _layered(tmp_path, redis_server)
    entries = [synthetic(1), synthetic(2), synthetic(3, fingerprint=FP2)]
    c.store.put_many(entries)
    args = {"all": {}, "device": {"device": FP}, "older-than": {"older_than": 0.0},
            "keys": {"keys": [entries[0].key[:8], entries[1].key[:8]]}}[how]
    removed = clear_cache(compiler=c, **args)
    assert removed.entries >= 2 and "directory" in removed.location
    assert len(list(c.store.remote.entries())) == 3  # the team's entries are all there
    assert len(list(c.store.local.entries())) == (0 if how in ("all", "older-than") else 1)
    clear_cache(compiler=c, remote=True, **args)
    assert len(list(c.store.remote.entries())) == (0 if how in ("all", "older-than") else 1)


def test_a_shared_store_alone_is_cleared_only_when_asked(tmp_path, redis_server):
    redis_server.client.flushall()
    c = Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": "0"}),
                 store=open_store(redis_server.url))
    c.store.put(synthetic(1))
    with pytest.raises(ClmagicError, match="shared with others.*remote=True"):
        clear_cache(compiler=c)
    assert len(list(c.store.entries())) == 1
    assert clear_cache(compiler=c, remote=True).entries == 1


def test_clcache_clear_remote_is_the_way_to_ask(tmp_path, redis_server, ipshell):
    from clmagic.ipython.magics import CLMagics

    c = _layered(tmp_path, redis_server)
    c.store.put_many([synthetic(1), synthetic(2)])
    ipshell.register_magics(CLMagics(shell=ipshell, compiler=c))
    try:
        ipshell.run_line_magic("clcache", "clear")
        assert len(list(c.store.remote.entries())) == 2
        assert list(c.store.local.entries()) == []
        ipshell.run_line_magic("clcache", "clear --remote")
        assert list(c.store.remote.entries()) == []
    finally:
        ipshell.reset(new_session=False)


# -- class 4: what an entry was built for, sealed; with a team secret, signed -----------------

OTHER = SRC.replace("3 * i + 1", "7 * i")  # another program with the same kernel name


def _two(tmp_path, pocl, cache: str, **env: str):
    """SRC and OTHER built into ``cache``: (compiler, SRC's result, OTHER's result)."""
    c = Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": cache, "CLMAGIC_DEVICE": pocl, **env}))
    built = c, c.build(SRC), c.build(OTHER)
    c.flush()  # both saves are in
    return built


def _victim(cache: str, pocl: str, **env: str):
    c = Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": cache, "CLMAGIC_DEVICE": pocl, **env}))
    return c.build(SRC)


def test_a_sqlite_row_moved_to_another_key_is_refused(tmp_path, pocl):
    db = str(tmp_path / "c.db")
    _, mine, other = _two(tmp_path, pocl, db)
    with sqlite3.connect(db) as conn:  # the row of OTHER takes SRC's key
        conn.execute("DELETE FROM entries WHERE key = ?", (mine.key,))
        conn.execute("UPDATE entries SET key = ? WHERE key = ?", (mine.key, other.key))
    conn.close()
    r = _victim(db, pocl)
    assert r.outcome == "CORRUPT" and check(r)


def test_a_redis_entry_rewritten_with_its_checksum_is_refused(tmp_path, pocl, redis_server):
    redis_server.client.flushall()
    _, mine, other = _two(tmp_path, pocl, redis_server.url)
    c = redis_server.client
    name = f"clmagic:v{FORMAT_VERSION}:{mine.device.fingerprint}:{mine.key}"
    theirs = f"clmagic:v{FORMAT_VERSION}:{other.device.fingerprint}:{other.key}"
    meta = json.loads(c.hget(name, "meta"))
    binary = c.hget(theirs, "binary")
    meta.update(binary_xxh3=xxhash.xxh3_128_hexdigest(binary), binary_bytes=len(binary))
    c.hset(name, mapping={"meta": json.dumps(meta), "binary": binary})
    r = _victim(redis_server.url, pocl)
    assert r.outcome == "CORRUPT" and check(r)


def test_an_entry_file_moved_and_relabelled_is_refused(tmp_path, pocl):
    cache = tmp_path / "cache"
    _, mine, other = _two(tmp_path, pocl, str(cache))
    folder = cache / mine.device.fingerprint
    data = (folder / f"{other.key}.clbin").read_bytes()
    meta_len = HEADER.unpack_from(data)[2]
    meta = json.loads(data[HEADER.size:HEADER.size + meta_len])
    meta["key"] = mine.key  # relabelled, its CRC recomputed: only the digest tells
    raw = json.dumps(meta, separators=(",", ":"), sort_keys=True).encode()
    head = HEADER.pack(MAGIC, FORMAT_VERSION, len(raw), zlib.crc32(raw), 0,
                       HEADER.unpack_from(data)[5])
    (folder / f"{mine.key}.clbin").write_bytes(head + raw + data[HEADER.size + meta_len:])
    r = _victim(str(cache), pocl)
    assert r.outcome == "CORRUPT" and check(r)


def test_a_bundle_of_a_doctored_file_is_refused(tmp_path, pocl):
    cache = tmp_path / "cache"
    c, mine, other = _two(tmp_path, pocl, str(cache))
    bundle = tmp_path / "b.clbundle"
    export_bundle(bundle, store=c.store)
    with sqlite3.connect(bundle) as conn:  # SRC's row in the bundle carries OTHER's binary
        (binary, theirs, size), = conn.execute(
            "SELECT binary, extra, binary_bytes FROM entries WHERE key = ?",
            (other.key,)).fetchall()
        (extra,), = conn.execute("SELECT extra FROM entries WHERE key = ?", (mine.key,))
        extra = dict(json.loads(extra), binary_xxh3=json.loads(theirs)["binary_xxh3"])
        conn.execute("UPDATE entries SET binary = ?, extra = ?, binary_bytes = ? "
                     "WHERE key = ?", (binary, json.dumps(extra), size, mine.key))
    conn.close()
    report = import_bundle(bundle, store=open_store(str(tmp_path / "fresh")))
    assert report.imported == 1 and report.failed == 1
    assert any("digest" in why for why in report.reasons)


SECRET = {"CLMAGIC_CACHE_SECRET": "team secret 42"}


def test_with_a_team_secret_a_full_forgery_in_a_shared_store_is_refused(tmp_path, pocl,
                                                                        redis_server):
    redis_server.client.flushall()
    c, mine, other = _two(tmp_path, pocl, redis_server.url, **SECRET)
    fp = mine.device.fingerprint
    theirs = c.store.get(fp, other.key)
    assert theirs.meta.signature  # written signed
    forged = _forged(c.store.get(fp, mine.key), theirs.binary)
    raw = json.dumps(forged.meta.to_json(), separators=(",", ":"), sort_keys=True)
    redis_server.client.hset(f"clmagic:v{FORMAT_VERSION}:{fp}:{mine.key}",
                             mapping={"meta": raw, "binary": forged.binary})
    victim = Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": redis_server.url,
                                         "CLMAGIC_DEVICE": pocl, **SECRET}))
    r = victim.build(SRC)
    assert r.outcome == "CORRUPT" and check(r)
    victim.flush()  # the rebuild's save is in
    assert victim.store.refused == {"unsigned": 1}
    # signed with another secret: refused as badly signed
    bad = dataclasses.replace(forged, meta=seal(forged.meta, Secret(b"another team"),
                                                 forged.binary))
    raw = json.dumps(bad.meta.to_json(), separators=(",", ":"), sort_keys=True)
    redis_server.client.hset(f"clmagic:v{FORMAT_VERSION}:{fp}:{mine.key}",
                             mapping={"meta": raw, "binary": bad.binary})
    victim.forget()
    assert victim.build(SRC).outcome == "CORRUPT" and victim.store.refused["bad signature"] == 1
    # without the secret, the unsigned forgery is what an integrity check cannot catch
    assert victim.store.get(fp, mine.key).meta.signature  # the rebuild was re-signed


def test_with_a_team_secret_unsigned_sqlite_entries_are_refused_private_folders_not(tmp_path,
                                                                                  pocl):
    db, folder = str(tmp_path / "c.db"), str(tmp_path / "cache")
    for where in (db, folder):
        _two(tmp_path, pocl, where)  # written without a secret: unsigned
    assert _victim(db, pocl, **SECRET).outcome == "CORRUPT"
    assert _victim(db, pocl, **SECRET).outcome == "HIT"  # rebuilt, signed
    assert _victim(folder, pocl, **SECRET).outcome == "HIT"  # only you write a private folder
    signed_elsewhere = Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": folder,
                                                   "CLMAGIC_DEVICE": pocl,
                                                   "CLMAGIC_CACHE_SECRET": "old secret"}))
    signed_elsewhere.forget()
    r = signed_elsewhere.build(SRC)  # unsigned in a private folder: served
    assert r.outcome == "HIT"


def test_a_signed_bundle_imports_and_an_unsigned_one_is_refused_with_a_secret(tmp_path, pocl):
    c, mine, other = _two(tmp_path, pocl, str(tmp_path / "signed"), **SECRET)
    c.store.clear()
    c.forget()
    c.build(SRC)
    export_bundle(tmp_path / "signed.clbundle", store=c.store)
    u, _, _ = _two(tmp_path, pocl, str(tmp_path / "unsigned"))
    export_bundle(tmp_path / "unsigned.clbundle", store=u.store)
    dest = open_store(str(tmp_path / "dest"))
    dest.secret = Secret(SECRET["CLMAGIC_CACHE_SECRET"].encode())
    good = import_bundle(tmp_path / "signed.clbundle", store=dest)
    bad = import_bundle(tmp_path / "unsigned.clbundle", store=dest)
    assert good.imported == 1 and good.failed == 0
    assert bad.imported == 0 and bad.failed == 2 and all("not signed" in r for r in bad.reasons)
    got = dest.get(mine.device.fingerprint, mine.key)
    assert got.foreign == "" and got.meta.untrusted == ""  # vouched for: no proof needed


def test_the_secret_is_never_shown(tmp_path, pocl, capsys):
    from clmagic.cache.manage import cache_info

    c, _, _ = _two(tmp_path, pocl, str(tmp_path / "c.db"), **SECRET)
    shown = text_of(cache_info(c)) + html_of(cache_info(c)) + repr(c.settings)
    assert "team secret 42" not in shown and "CLMAGIC_CACHE_SECRET" in shown
    assert "team secret 42" not in capsys.readouterr().err


# -- class 5: a binary from elsewhere is proven loadable in a child first ---------------------

CHILD_IMPORT = inspect.getsource(check) + """
import json, os, sys, clmagic
from clmagic.cache.bundle import import_bundle
c = clmagic.Compiler()
report = import_bundle(os.environ["BUNDLE"], store=c.store) if os.environ.get("BUNDLE") else None
r = c.build(os.environ["SOURCE"])
print(json.dumps({"outcome": r.outcome, "correct": check(r), "note": r.note,
                  "corrupt": c.history.tally["CORRUPT"],
                  "imported": report and report.imported, "reasons": report and report.reasons}))
"""

LOAD_DIRECTLY = """
import os, sys, pyopencl as cl
from clmagic.opencl import devices, driver
_, dev = devices.resolve_device(os.environ["FP"])
driver.from_binaries(cl.Context([dev]), [dev], [sys.stdin.buffer.read()], "")
print("loaded")
"""


def _truncated(tmp_path, pocl) -> tuple[Entry, Entry]:
    """SRC's real POCL entry, and a forgery of it with the binary cut to 1000 bytes."""
    c = Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": str(tmp_path / "maker"),
                                    "CLMAGIC_DEVICE": pocl}))
    r = c.build(SRC)
    real = c.store.get(r.device.fingerprint, r.key)
    return real, _forged(real, real.binary[:1000])


def test_a_truncated_pocl_binary_really_crashes_a_process_that_loads_it(tmp_path, pocl):
    real, forged = _truncated(tmp_path, pocl)
    proc = subprocess.run([sys.executable, "-c", LOAD_DIRECTLY], input=forged.binary,
                          env=child_env(FP=real.fingerprint), capture_output=True, timeout=240)
    assert proc.returncode in (-signal.SIGSEGV, -signal.SIGABRT), proc.returncode


def test_a_bundle_with_a_truncated_binary_never_crashes_the_users_process(tmp_path, pocl):
    """The import proves the binary in a child, which crashes; the entry is not imported, and
    the user's build is a MISS that computes right."""
    real, forged = _truncated(tmp_path, pocl)
    evil = open_store(str(tmp_path / "evil"))
    assert evil.put(forged)  # sealed as the forger's own clmagic would seal it
    export_bundle(tmp_path / "evil.clbundle", store=evil)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD_IMPORT], capture_output=True, text=True, timeout=400,
        env=child_env(CLMAGIC_CACHE_DIR=str(tmp_path / "victim"), CLMAGIC_DEVICE=pocl,
                      BUNDLE=str(tmp_path / "evil.clbundle"), SOURCE=SRC))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["imported"] == 0 and got["outcome"] == "MISS" and got["correct"], got
    (why,) = got["reasons"]
    assert why.startswith(real.key[:12]) and "crashed loading it in a child process" in why


def test_a_good_imported_binary_is_proven_at_import_then_served_as_own(tmp_path, pocl):
    real, _ = _truncated(tmp_path, pocl)
    export_bundle(tmp_path / "good.clbundle", store=open_store(str(tmp_path / "maker")))
    dest = str(tmp_path / "dest")
    report = import_bundle(tmp_path / "good.clbundle", store=open_store(dest))
    assert (report.imported, report.proven) == (1, 1)
    got = open_store(dest).get(real.fingerprint, real.key)
    assert got.foreign == "" and got.meta.untrusted == ""  # the verdict, kept
    r = _victim(dest, pocl)
    assert r.outcome == "HIT" and check(r) and r.record.once_what == ""  # no child on a HIT


def test_a_truncated_binary_in_the_teams_store_never_crashes_the_users_process(
        tmp_path, pocl, redis_server):
    redis_server.client.flushall()
    real, forged = _truncated(tmp_path, pocl)
    assert open_store(redis_server.url).put(forged)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD_IMPORT], capture_output=True, text=True, timeout=400,
        env=child_env(CLMAGIC_CACHE_DIR=str(tmp_path / "victim"), CLMAGIC_DEVICE=pocl,
                      CLMAGIC_REMOTE=redis_server.url, SOURCE=SRC))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["outcome"] == "CORRUPT" and got["correct"], got
