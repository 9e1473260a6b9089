"""The validators' contract, fuzzed on the parsers of stored entries: metadata JSON (an entry
file's, a Redis hash's), entry files (the directory store's and a bundle's format), SQLite rows
(a SQLite store's and a bundle's: the same row reader) and Redis hashes on a real redis-server.
Each returns a valid value or raises CorruptEntry (an entry file of an older format:
OtherFormat, a miss), never anything else (see tests/fuzzing.py)."""

from __future__ import annotations

import json
import sqlite3
import struct
import zlib

import pytest
from fuzzing import FUZZ, holds, hostile_bytes, json_texts, mutations
from fuzzing import fuzz_report as _report
from hypothesis import given
from hypothesis import strategies as st
from stores import synthetic

from clmagic.entry import FORMAT_VERSION, Entry, EntryMeta, OtherFormat, parse_json
from clmagic.entry_file import HEADER, MAGIC, decode, encode
from clmagic.errors import CorruptEntry
from clmagic.store import SQLiteStore

ENTRY = synthetic(1)
META = ENTRY.meta.to_json()


@pytest.fixture(scope="module", autouse=True)
def fuzz_report(request):
    yield from _report(request)


def _meta_text(doc: object) -> bytes:
    return json.dumps(doc, allow_nan=True).encode()


@FUZZ
@given(st.one_of(mutations(META).map(_meta_text), hostile_bytes))
def test_metadata_json(raw):
    got = holds("metadata JSON", lambda: parse_json(raw), CorruptEntry)
    assert got is None or isinstance(got, EntryMeta)


def _file(meta: bytes, binary: bytes = b"\x01" * 16, version: int = FORMAT_VERSION) -> bytes:
    """An entry file around ``meta`` whose header and CRC are right: the parse gets to it."""
    head = HEADER.pack(MAGIC, version, len(meta), zlib.crc32(meta), 0, len(binary))
    return head + meta + binary + bytes(16)


_GOOD = encode(ENTRY)


@FUZZ
@given(st.one_of(
    mutations(META).map(_meta_text).map(_file),
    hostile_bytes,
    hostile_bytes.map(lambda b: _GOOD[:32] + b),
    st.tuples(st.integers(0, len(_GOOD) - 1), st.integers(0, 255)).map(
        lambda at: _GOOD[:at[0]] + bytes([at[1]]) + _GOOD[at[0] + 1:]),
    st.integers(0, len(_GOOD)).map(lambda n: _GOOD[:n]),
    st.tuples(st.integers(0, 2 ** 32 - 1), st.integers(0, 2 ** 32 - 1),
              st.integers(0, 2 ** 64 - 1)).map(
        lambda t: struct.pack("<8sIIIIQ", MAGIC, FORMAT_VERSION, t[0], t[1], 0, t[2])
        + _GOOD[32:]),
))
def test_entry_files(data):
    got = holds("entry file", lambda: decode(data), CorruptEntry, OtherFormat)
    assert got is None or isinstance(got, Entry)


# -- SQLite rows: a store's and a bundle's --------------------------------------------------------

#: any value a SQLite column can hold (it keeps any type in any column)
_SQL_VALUES = (st.none() | st.integers(-(2 ** 63), 2 ** 63 - 1) | st.floats(allow_nan=False)
               | st.sampled_from([float("inf"), float("-inf"), "9" * 500, "nan", "²", ""])
               | st.text(max_size=60) | st.binary(max_size=60) | json_texts)
_COLUMNS = ("kernels", "options", "device", "platform", "driver", "build_ms", "source_bytes",
            "binary_bytes", "created", "extra", "fingerprint", "key", "binary")
_USAGE = ("hits", "last_used")


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory):
    store = SQLiteStore(tmp_path_factory.mktemp("fuzz") / "cache.db")
    yield store
    store.close()


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(_COLUMNS + _USAGE), _SQL_VALUES), min_size=1,
                max_size=3))
def test_sqlite_rows(sqlite_store, changes):
    """A stored row with some columns set to anything: get, the listing, the sizes for
    eviction and a bundle's read all hold to the contract."""
    store = sqlite_store
    store.clear()
    assert store.put(ENTRY)
    store.record_hit(ENTRY.fingerprint, ENTRY.key)
    with sqlite3.connect(store.path) as conn:
        for column, value in changes:
            table = "usage" if column in _USAGE else "entries"
            try:
                conn.execute(f"UPDATE {table} SET {column} = ?", (value,))
            except sqlite3.IntegrityError:  # NOT NULL: a value no file holds
                continue
    fp, key = ENTRY.fingerprint, ENTRY.key
    got = holds("SQLite row (get)", lambda: store.get(fp, key), CorruptEntry)
    assert got is None or isinstance(got, Entry)
    listed = holds("SQLite row (listing)", lambda: list(store.entries()))
    assert listed is not None and all(isinstance(e, Entry) for e in listed)
    uses = holds("SQLite row (eviction sizes)", store.usage_list)
    assert uses is not None and all(u.size >= 0 for u in uses)
    read = holds("SQLite row (bundle read)", lambda: store.read(fp, key), CorruptEntry)
    assert read is None or isinstance(read, Entry)


# -- Redis hashes on a real server -------------------------------------------------------------

_REDIS_VALUES = (st.binary(max_size=80) | json_texts.map(str.encode)
                 | mutations(META).map(_meta_text)
                 | st.sampled_from([b"9" * 5000, b"1e999", b"nan", b"-1", "²".encode(), b""]))


@pytest.fixture(scope="module")
def redis_store(redis_server):
    from clmagic.store import open_store

    redis_server.client.flushall()
    store = open_store(redis_server.url)
    assert store is not None
    yield store
    store.close()


@FUZZ
@given(st.dictionaries(st.sampled_from(["meta", "binary", "hits", "last_used"]),
                       _REDIS_VALUES, min_size=1, max_size=4))
def test_redis_hashes(redis_server, redis_store, fields):
    """An entry's hash with some fields set to anything (the meta parsed before its signature
    is checked): get and the listing hold to the contract."""
    store = redis_store
    redis_server.client.flushall()
    assert store.put(ENTRY)
    name = f"clmagic:v{FORMAT_VERSION}:{ENTRY.fingerprint}:{ENTRY.key}"
    redis_server.client.hset(name, mapping=fields)
    got = holds("Redis hash (get)", lambda: store.get(ENTRY.fingerprint, ENTRY.key),
                CorruptEntry)
    assert got is None or isinstance(got, Entry)
    listed = holds("Redis hash (listing)", lambda: list(store.entries()))
    assert listed is not None and all(isinstance(e, Entry) for e in listed)


# -- a bundle's manifest rows -------------------------------------------------------------------

@pytest.fixture(scope="module")
def empty_bundle(tmp_path_factory):
    """A bundle of no entries (its import reads the manifest rows and nothing to vet)."""
    import clmagic

    folder = tmp_path_factory.mktemp("bundle")
    clmagic.export_bundle(folder / "b.clbundle", store=clmagic.open_store(str(folder / "from")))
    return folder


_ROW_VALUES = (st.text(max_size=60) | st.binary(max_size=60) | json_texts
               | st.integers(-(2 ** 63), 2 ** 63 - 1) | st.floats(allow_nan=False))


@FUZZ
@given(st.lists(st.tuples(st.text(max_size=12) | st.integers(-(2 ** 63), 2 ** 63 - 1),
                          _ROW_VALUES), min_size=1, max_size=4))
def test_bundle_manifest_rows(empty_bundle, rows):
    """A bundle whose manifest rows hold anything: the import reports them or leaves them out."""
    import clmagic
    from clmagic.cache.bundle import ImportReport
    from clmagic.errors import ClmagicError

    path = empty_bundle / "b.clbundle"
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM manifest WHERE name NOT IN ('format', 'schema')")
        conn.executemany("INSERT OR REPLACE INTO manifest (name, value) VALUES (?, ?)", rows)
    target = clmagic.open_store(str(empty_bundle / "to"))
    got = holds("bundle manifest rows", lambda: clmagic.import_bundle(path, store=target),
                ClmagicError)
    assert got is None or isinstance(got, ImportReport)
