"""A cache written by the release before the typed entry (clmagic 0.1.0 at d2328e9, entry format
1: SHA-256 checksums) in every backend: since format 2 (XXH3-128 checksums, keyed BLAKE3
signatures) its entries are misses, never damage: not listed, nothing reported, a new entry saved
beside them, and eviction still sees and removes them (they age out).

``tests/data/release-0.1.0`` was written by that code (``DirectoryStore.put`` + three hits,
``SQLiteStore.put`` + two hits, and the Redis hash fields ``RedisStore.put`` writes, with
``stored_meta`` of the same entry): the entry file bytes, the SQLite rows and the Redis fields are
exactly what the release stores. git keeps no file times, so the ``.hits`` time is set here.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import struct
from pathlib import Path

import pytest
import xxhash

from clmagic.entry import FORMAT_VERSION, Entry, OtherFormat, Usage, check_meta
from clmagic.entry_file import decode, encode
from clmagic.errors import CorruptEntry
from clmagic.store import DirectoryStore, RedisStore, SQLiteStore, Store

DATA = Path(__file__).parent / "data" / "release-0.1.0"
FP = "0123456789abcdef"
KEY = "c47d78a636afdbbaebce1800e626b8feac29d4e3567e1661eee3bfb0cb756126"
BINARY = bytes(range(256)) * 2


def _check(entry: Entry | None, hits: int, last_used: float, store: str) -> None:
    """The fixture's entry as the release stored it (what a format-1 reader saw)."""
    assert entry is not None
    m = entry.meta
    assert (m.key, m.fingerprint, m.kernels, m.options) == (KEY, FP, ("saxpy", "scale"), "-O3")
    assert (m.device, m.platform, m.driver) == ("Synthetic Device", "Synthetic Platform", "1.2.3")
    assert (m.device_version, m.platform_version) == ("OpenCL 3.0", "OpenCL 3.0 synthetic")
    assert (m.source_bytes, m.binary_bytes, m.build_ms) == (321, 512, 12.5)
    assert (m.created, m.build_log, m.headers) == (1_700_000_000.0, "a warning\non two lines",
                                                   ("inc/common.h",))
    assert m.other == {}
    assert entry.usage.hits == hits and entry.last_used == last_used
    assert entry.usage.store == store and entry.usage.stored_bytes >= len(BINARY)


def _a_miss_that_ages_out(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """The release's entry (format 1) in a store of this clmagic (format 2): a miss, not listed,
    nothing reported (no warning, no damage), a new entry saved beside it, and eviction still
    sees the old one (its size, its last use) and removes it."""
    assert FORMAT_VERSION == 2
    assert store.get(FP, KEY) is None
    assert list(store.entries()) == []
    new = Entry.create("e" * 64, FP, b"new", kernels=["k"], options="", device="d",
                       platform="p", driver="1", source_bytes=1, build_ms=1.0, created=2e9)
    assert store.put(new)
    assert [e.key for e in store.entries()] == [new.key]
    old = [u for u in store.usage_list() if u.key == KEY]
    assert len(old) == 1 and old[0].size >= len(BINARY)
    assert store.remove_uses(old) == old  # aged out (evicted as the least recently used)
    assert [u.key for u in store.usage_list()] == [new.key]
    assert store.get(FP, new.key).binary == b"new"
    assert "clmagic" not in capsys.readouterr().err


def test_release_entry_file_is_an_older_format_not_damage():
    path = DATA / "directory" / FP / f"{KEY}.clbin"
    with pytest.raises(OtherFormat) as caught:
        decode(path.read_bytes(), key=KEY, fingerprint=FP)
    assert caught.value.version == 1 and not isinstance(caught.value, CorruptEntry)


def test_a_format_2_entry_file_decodes_and_reencodes_to_the_same_bytes():
    entry = Entry.create(KEY, FP, BINARY, kernels=["saxpy"], options="-O3", device="d",
                         platform="p", driver="1", source_bytes=3, build_ms=1.0, created=1e9)
    data = encode(entry)
    assert struct.unpack_from("<I", data, 8)[0] == FORMAT_VERSION
    assert data[-16:] == xxhash.xxh3_128_digest(BINARY)  # the trailer: the binary's XXH3-128
    again = decode(data, key=KEY, fingerprint=FP)
    assert again.binary == BINARY and encode(again) == data


def test_release_directory_cache_is_a_miss_and_ages_out(tmp_path, capsys):
    root = tmp_path / "cache"
    shutil.copytree(DATA / "directory", root)
    root.chmod(0o700)
    hits = root / FP / f"{KEY}.hits"
    os.utime(hits, (1_700_000_500.0, 1_700_000_500.0))
    store = DirectoryStore.open(root)
    _a_miss_that_ages_out(store, capsys)
    assert not hits.exists()  # its hit counter went with it


def test_release_sqlite_cache_is_a_miss_and_ages_out(tmp_path, capsys):
    path = tmp_path / "cache.db"
    shutil.copy(DATA / "cache.db", path)
    path.chmod(0o600)
    store = SQLiteStore.open(path)
    _a_miss_that_ages_out(store, capsys)
    store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT format, count(*) FROM entries GROUP BY format"
                            ).fetchall() == [(FORMAT_VERSION, 1)]
        assert conn.execute("SELECT count(*) FROM usage WHERE format = 1").fetchone() == (0,)
    conn.close()


def test_release_redis_cache_is_a_miss(redis_server, capsys):
    """The release's hash lives under ``clmagic:v1``: this clmagic looks under its own prefix,
    so the old entries are misses and age out by their time to live (or Redis's eviction)."""
    fx = json.loads((DATA / "redis.json").read_text())
    assert fx["name"] == f"clmagic:v1:{FP}:{KEY}"
    c = redis_server.client
    c.flushall()
    fields = dict(fx["fields"], binary=bytes.fromhex(fx["fields"]["binary"]))
    c.hset(fx["name"], mapping=fields)
    c.sadd(fx["index"], KEY)
    c.sadd(fx["devices"], FP)
    store = RedisStore(redis_server.url)
    assert store.get(FP, KEY) is None and list(store.entries()) == []
    assert c.exists(fx["name"])  # left alone: an older clmagic may still use it
    assert "clmagic" not in capsys.readouterr().err


def test_the_release_metadata_read_as_format_1_still_parses():
    """The release's stored metadata, with its checksum field renamed as format 2 names it,
    parses with every field the release wrote (what it stored is what this clmagic reads)."""
    raw = json.loads(json.loads((DATA / "redis.json").read_text())["fields"]["meta"])
    raw["binary_xxh3"] = xxhash.xxh3_128_hexdigest(BINARY)
    del raw["binary_sha256"]
    _check(Entry(check_meta(raw), Usage(store="redis", stored_bytes=len(BINARY)), BINARY), 0,
           1_700_000_000.0, "redis")


@pytest.mark.parametrize("field", ["device_version", "platform_version", "headers"])
def test_optional_fields_may_be_absent(field):
    """Entries written before these fields existed (and by other writers) still parse."""
    from clmagic.entry import check_meta

    raw = json.loads(json.loads((DATA / "redis.json").read_text())["fields"]["meta"])
    raw["binary_xxh3"] = raw.pop("binary_sha256")  # the one field format 2 renamed
    del raw[field]
    assert check_meta(raw).to_json()[field] in ("", [])


def test_release_sqlite_file_gains_the_code_index_and_rekeys(tmp_path):
    """A 0.1.0 file has no ``code_keys`` table: opening it writable adds the table; its entries
    have no code key (never found by code), new ones are."""
    path = tmp_path / "cache.db"
    shutil.copy(DATA / "cache.db", path)
    path.chmod(0o600)
    store = SQLiteStore.open(path)
    assert store.find_code(FP, "c" * 64) is None
    assert store.get(FP, KEY) is None  # format 1: a miss
    coded = Entry.create("d" * 64, FP, BINARY, code_key="c" * 64, kernels=["saxpy"],
                         options="-O3", device="d", platform="p", driver="1", source_bytes=3,
                         build_ms=1.0, created=1e9)
    assert store.put(coded)
    assert store.find_code(FP, "c" * 64).key == "d" * 64
    store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT key FROM code_keys").fetchall() == [("d" * 64,)]
    conn.close()
