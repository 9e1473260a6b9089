"""A cache written by the release before the typed entry (clmagic 0.1.0 at d2328e9) still loads,
in every backend, with its usage, and a rewrite keeps the stored names.

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
from pathlib import Path

import pytest

from clmagic.entry import FORMAT_VERSION, Entry
from clmagic.entry_file import decode, encode
from clmagic.store import DirectoryStore, RedisStore, SQLiteStore, Store

DATA = Path(__file__).parent / "data" / "release-0.1.0"
FP = "0123456789abcdef"
KEY = "c47d78a636afdbbaebce1800e626b8feac29d4e3567e1661eee3bfb0cb756126"
BINARY = bytes(range(256)) * 2


def _check(entry: Entry | None, hits: int, last_used: float, store: str) -> None:
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


def _loads(store: Store, hits: int, last_used: float) -> Entry:
    """The fixture's entry, read whole and listed, with the same metadata and usage."""
    got = store.get(FP, KEY)
    _check(got, hits, last_used, store.kind)
    assert got is not None and got.binary == BINARY
    (listed,) = store.entries()
    _check(listed, hits, last_used, store.kind)
    assert listed.binary is None and listed.usage == got.usage
    return got


def test_release_entry_file_decodes_and_reencodes_to_the_same_bytes():
    path = DATA / "directory" / FP / f"{KEY}.clbin"
    data = path.read_bytes()
    entry = decode(data, key=KEY, fingerprint=FP)
    assert entry.binary == BINARY
    assert encode(entry) == data  # same keys, same values, same layout: the format is unchanged


def test_release_directory_cache_loads(tmp_path):
    root = tmp_path / "cache"
    shutil.copytree(DATA / "directory", root)
    root.chmod(0o700)
    hits = root / FP / f"{KEY}.hits"
    os.utime(hits, (1_700_000_500.0, 1_700_000_500.0))
    store = DirectoryStore.open(root)
    got = _loads(store, 3, 1_700_000_500.0)


def test_release_sqlite_cache_loads_and_rewrites_the_same_columns(tmp_path):
    path = tmp_path / "cache.db"
    shutil.copy(DATA / "cache.db", path)
    path.chmod(0o600)
    with sqlite3.connect(path) as conn:
        before = conn.execute("SELECT * FROM entries").fetchall()
    conn.close()
    store = SQLiteStore.open(path)
    got = _loads(store, 2, 1_700_000_600.0)
    assert store.put(Entry(got.meta, binary=got.binary))
    store.close()
    with sqlite3.connect(path) as conn:
        after = conn.execute("SELECT * FROM entries").fetchall()
    conn.close()
    assert after != before and _unsealed(after) == _unsealed(before)  # the seal added


def _unsealed(rows: list[tuple]) -> list[tuple]:
    """Rows with the seal a rewrite adds (``digest`` in the ``extra`` JSON) taken out."""
    out = []
    for row in rows:
        cells = []
        for cell in row:
            if isinstance(cell, str) and cell.startswith("{"):
                doc = json.loads(cell)
                doc.pop("digest", None)
                cell = json.dumps(doc, separators=(",", ":"), sort_keys=True)
            cells.append(cell)
        out.append(tuple(cells))
    return out


def test_release_redis_cache_loads(redis_server):
    fx = json.loads((DATA / "redis.json").read_text())
    assert fx["name"] == f"clmagic:v{FORMAT_VERSION}:{FP}:{KEY}"
    c = redis_server.client
    c.flushall()
    fields = dict(fx["fields"], binary=bytes.fromhex(fx["fields"]["binary"]))
    c.hset(fx["name"], mapping=fields)
    c.sadd(fx["index"], KEY)
    c.sadd(fx["devices"], FP)
    store = RedisStore(redis_server.url)
    got = _loads(store, 4, 1_700_000_700.0)
    assert store.put(Entry(got.meta, binary=got.binary))
    rewritten = json.loads(c.hget(fx["name"], "meta"))
    assert rewritten.pop("digest") and rewritten == json.loads(fx["fields"]["meta"])


@pytest.mark.parametrize("field", ["device_version", "platform_version", "headers"])
def test_optional_fields_may_be_absent(field):
    """Entries written before these fields existed (and by other writers) still parse."""
    from clmagic.entry import check_meta

    raw = json.loads(json.loads((DATA / "redis.json").read_text())["fields"]["meta"])
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
    got = store.get(FP, KEY)
    coded = Entry.create("d" * 64, FP, got.binary, code_key="c" * 64, **{
        f: getattr(got.meta, f) for f in ("kernels", "options", "device", "platform", "driver",
                                          "source_bytes", "build_ms", "created", "build_log")})
    assert store.put(coded)
    assert store.find_code(FP, "c" * 64).key == "d" * 64
    store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT key FROM code_keys").fetchall() == [("d" * 64,)]
    conn.close()
