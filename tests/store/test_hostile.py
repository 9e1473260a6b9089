"""Hostile directories and hostile entry files: refused folders, planted symlinks, exclusive
temp files, strictly parsed and bounded metadata, nothing executable in the load path."""

from __future__ import annotations

import json
import os
import re
import struct
import zlib
from pathlib import Path

import pytest
from conftest import ROOT
from test_faults import SRC, check

from clmagic import Compiler, CorruptEntry, DirectoryStore
from clmagic.config import Settings
from clmagic.entry import FORMAT_VERSION, MAX_META, Entry
from clmagic.entry_file import HEADER, MAGIC, decode, encode, read_meta


def _settings(cache: Path, pocl: str, **extra: str) -> Settings:
    return Settings.from_env({"CLMAGIC_CACHE_DIR": str(cache), "CLMAGIC_DEVICE": pocl, **extra})


@pytest.mark.parametrize(
    "make, why",
    [(lambda p: p.chmod(0o777), "world-writable (mode 0777)"),
     (lambda p: p.chmod(0o1777), "world-writable (mode 1777)"),
     (lambda p: os.chown(p, 65534, 65534), "owned by another user (uid 65534")],
    ids=["world-writable", "world-writable-sticky", "other-owner"],
)
def test_hostile_cache_folder_is_refused(tmp_path, pocl, capsys, make, why):
    cache = tmp_path / "cache"
    cache.mkdir()
    make(cache)
    c = Compiler(_settings(cache, pocl))
    assert c.store is None
    assert [c.build(SRC).outcome, c.build(SRC).outcome] == ["MISS", "MEMORY"]
    err = capsys.readouterr().err
    (warning,) = [ln for ln in err.splitlines() if ln.startswith("clmagic: warning")]
    assert why in warning and "memory only" in warning and "CLMAGIC_CACHE_TRUST=1" in warning
    assert not list(cache.iterdir())
    trusted = Compiler(_settings(cache, pocl, CLMAGIC_CACHE_TRUST="1"))
    assert isinstance(trusted.store, DirectoryStore)
    assert trusted.build(SRC).saved


def test_symlink_at_the_entry_path_is_replaced_not_written_through(tmp_path, pocl):
    cache = tmp_path / "cache"
    c = Compiler(_settings(cache, pocl))
    r = c.build(SRC)
    entry = c.store.get(r.device.fingerprint, r.key)
    path = cache / r.device.fingerprint / f"{r.key}.clbin"
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    path.unlink()
    path.symlink_to(victim)
    with pytest.raises(CorruptEntry, match="symlink"):
        c.store.get(r.device.fingerprint, r.key)
    assert c.store.put(entry)
    assert victim.read_bytes() == b"precious"
    assert not path.is_symlink() and decode(path.read_bytes()).key == r.key


def test_temp_files_are_exclusive_and_refuse_planted_symlinks(tmp_path):
    """The store opens temp files O_CREAT|O_EXCL|O_NOFOLLOW: a name that exists, symlink or
    not, is never opened for writing."""
    target = tmp_path / "target"
    target.write_bytes(b"x")
    link = tmp_path / "link"
    link.symlink_to(target)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with pytest.raises(FileExistsError):
        os.open(link, flags, 0o600)
    # every temp file the stores write (the entry, the code index, the zeroed lifetime counts,
    # the manifest, a sweep's results) is made by _fs.create_new, with those flags (no other
    # open of a cache file exists: tests/store/test_fs_only.py), and refuses the link too
    from clmagic.store import _fs

    with pytest.raises(FileExistsError):
        _fs.create_new(link)
    with pytest.raises(FileExistsError):
        _fs.write_private(tmp_path / "file", b"y", link)
    assert "create_new(tmp)" in (ROOT / "clmagic/store/directory/store.py").read_text()
    assert target.read_bytes() == b"x"


def test_nothing_in_the_load_path_can_execute_code():
    # builtins that run code and unpicklers; a method of that name (``def compile(``, TripState's
    # build step) is no builtin call
    pattern = re.compile(
        r"(?<![\w.])(?<!def )(?:eval|exec|compile|__import__)\s*\(|"
        r"\b(?:pickle|marshal|shelve|dill)\b"
    )
    # the load path since the move: the entry and its file format, the keys (includes too), the
    # trip (compiler, records, rekey) and every store; each must exist (a moved module fails
    # here rather than silently leaving the check)
    for name in ("entry.py", "entry_file.py", "key", "trip", "store"):
        path = ROOT / "clmagic" / name
        assert path.exists(), path
        for f in [path] if path.is_file() else sorted(path.rglob("*.py")):
            code = "\n".join(ln for ln in f.read_text().splitlines()
                             if not ln.strip().startswith(("#", '"', "'")))
            hits = [m.group(0) for m in pattern.finditer(code)]
            assert not hits, (f, hits)


def _entry_bytes(meta: bytes, binary: bytes = b"\x01\x02", version: int = FORMAT_VERSION,
                 meta_len: int | None = None) -> bytes:
    import xxhash

    n = len(meta) if meta_len is None else meta_len
    head = HEADER.pack(MAGIC, version, n, zlib.crc32(meta), 0, len(binary))
    return head + meta + binary + xxhash.xxh3_128_digest(binary)


def _good_meta(**over) -> dict:
    e = Entry.create("a" * 64, "b" * 16, b"\x01\x02", kernels=["k"], options="", device="d",
                     platform="p", driver="1", source_bytes=1, build_ms=1.0, created=1.0)
    return {**e.meta.to_json(), **over}


@pytest.mark.parametrize(
    "meta, message",
    [
        (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
        (b'{"key": NaN}', "not valid JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b"\xff\xfe", "not valid JSON"),
        (json.dumps(_good_meta(kernels="k")).encode(), "'kernels'"),
        (json.dumps(_good_meta(build_ms=True)).encode(), "'build_ms'"),
        (json.dumps(_good_meta(kernels=[1])).encode(), "non-string"),
    ],
    ids=["deep-nesting", "nan", "array", "not-utf8", "kernels-type", "bool-number", "kernel-int"],
)
def test_metadata_is_parsed_strictly(meta, message):
    with pytest.raises(CorruptEntry, match=message):
        decode(_entry_bytes(meta))


def test_metadata_and_binary_sizes_are_bounded_before_reading(tmp_path):
    huge = HEADER.pack(MAGIC, FORMAT_VERSION, MAX_META + 1, 0, 0, 1)
    (tmp_path / "huge").write_bytes(huge)
    fd = os.open(tmp_path / "huge", os.O_RDONLY)
    try:
        with pytest.raises(CorruptEntry, match="over the"):
            read_meta(fd)
    finally:
        os.close(fd)
    huge_bin = HEADER.pack(MAGIC, FORMAT_VERSION, 10, 0, 0, 1 << 40)
    with pytest.raises(CorruptEntry, match="binary of"):
        decode(huge_bin)
    good = encode(Entry.create("a" * 64, "b" * 16, b"\x01\x02", **{
        k: v for k, v in _good_meta().items()
        if k not in ("key", "fingerprint", "binary_bytes", "binary_xxh3")}))
    assert decode(good).kernels == ["k"]
    with pytest.raises(CorruptEntry, match="another key"):
        decode(good, key="c" * 64)
    assert struct.unpack_from("<I", good, 8)[0] == FORMAT_VERSION


def test_entries_listing_skips_damage_without_raising(tmp_path, pocl):
    cache = tmp_path / "cache"
    c = Compiler(_settings(cache, pocl))
    r = c.build(SRC)
    assert check(r) and r.saved  # (waits for the background save)
    folder = cache / r.device.fingerprint
    (folder / ("f" * 64 + ".clbin")).write_bytes(b"garbage")
    (folder / ("e" * 64 + ".clbin")).mkdir()
    assert [e.key for e in c.store.entries()] == [r.key]
