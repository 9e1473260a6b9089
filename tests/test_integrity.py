"""Entry format 2's integrity and trust (issue 23): XXH3-128 catches damage, keyed BLAKE3 binds
the metadata and the binary to the team secret, an old bundle is reported as old."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import xxhash

from clmagic import ClmagicError
from clmagic._secret import Secret
from clmagic.cache.bundle import import_bundle
from clmagic.entry import Entry, seal, signed
from clmagic.entry_file import decode, encode
from clmagic.errors import CorruptEntry
from clmagic.store import open_store

DATA = Path(__file__).parent / "data" / "release-0.1.0"


def _entry(binary: bytes = b"\x01" * 4096) -> Entry:
    return Entry.create("a" * 64, "b" * 16, binary, kernels=["k"], options="", device="d",
                        platform="p", driver="1", source_bytes=1, build_ms=1.0, created=1e9)


@pytest.mark.parametrize("at", [40, -100, -1])  # metadata, binary, trailer
def test_every_flipped_byte_is_caught(at):
    data = bytearray(encode(Entry(seal(_entry().meta, None), binary=_entry().binary)))
    data[at] ^= 0x01
    with pytest.raises(CorruptEntry):
        decode(bytes(data))


def test_the_signature_covers_the_binary_not_only_its_checksum():
    """A signed entry given another binary, its XXH3 and digest recomputed and the signature
    kept: refused (XXH3 is no MAC, so the signature must cover the bytes themselves)."""
    secret = Secret(b"team secret 42")
    e = _entry()
    meta = seal(e.meta, secret, e.binary)
    assert signed(meta, secret, e.binary) is True
    other = b"\x02" * 4096
    moved = seal(dataclasses.replace(meta, binary_xxh3=xxhash.xxh3_128_hexdigest(other)), None)
    moved = dataclasses.replace(moved, signature=meta.signature)
    assert signed(moved, secret, other) is False
    assert signed(meta, secret, other) is False
    assert signed(meta, Secret(b"another team"), e.binary) is False  # a wrong secret
    with pytest.raises(ValueError):
        seal(e.meta, secret)  # a signature needs the binary


def test_a_bundle_of_an_older_clmagic_is_reported_as_old_not_tampered(tmp_path):
    bundle = tmp_path / "old.clbundle"
    shutil.copy(DATA / "cache.db", bundle)
    with sqlite3.connect(bundle) as conn:  # as 0.1.0's export sealed it
        conn.execute("CREATE TABLE manifest (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO manifest VALUES ('format', ?)", (json.dumps(1),))
    conn.close()
    store = open_store(str(tmp_path / "cache"))
    with pytest.raises(ClmagicError, match=r"made by an older clmagic \(format 1.*nothing "
                                           r"imported") as caught:
        import_bundle(bundle, store=store)
    assert "tamper" not in str(caught.value) and "damaged" not in str(caught.value)
    assert list(store.entries()) == []
