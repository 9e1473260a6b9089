"""Entries kept in memory in front of the directory store's files (clmagic/store/recent.py): a
second read of an unchanged file reads nothing, and any change to the file (replaced, edited in
place, removed, a symlink put there) is seen at once; memory is bounded."""

from __future__ import annotations

import os
import time

import pytest
from stores import FP, synthetic

from clmagic.errors import CorruptEntry
from clmagic.store.directory.store import DirectoryStore
from clmagic.store.recent import Recent, stamp_of


def _store(tmp_path) -> tuple[DirectoryStore, object, str]:
    store = DirectoryStore(tmp_path / "cache")
    e = synthetic(1, size=4096)
    assert store.put(e)
    return store, e, str(tmp_path / "cache" / FP / (e.key + ".clbin"))


def test_an_unchanged_file_is_served_from_memory_with_fresh_use_counts(tmp_path):
    store, e, _ = _store(tmp_path)
    first = store.get(FP, e.key)
    store.record_hit(FP, e.key)
    again = store.get(FP, e.key)
    assert again.binary is first.binary  # the same bytes: nothing was read again
    assert again.meta == first.meta and again.binary == e.binary
    assert again.usage.hits == first.usage.hits + 1  # the counts are the file's, now
    assert again.usage.stored_bytes == first.usage.stored_bytes + 1


def test_close_lets_go_of_what_was_kept(tmp_path):
    """After ``close`` the next ``get`` reads the file (as a new process does)."""
    store, e, _ = _store(tmp_path)
    first = store.get(FP, e.key)
    store.close()
    again = store.get(FP, e.key)
    assert again.binary == first.binary and again.binary is not first.binary
    assert store.get(FP, e.key).binary is again.binary  # kept again after that read


def test_a_file_edited_in_place_is_read_again(tmp_path):
    """Same size, same inode, its modification time put back: the change time still moves, so
    the damage is found (the copy in memory is never preferred to a changed file)."""
    store, e, path = _store(tmp_path)
    store.get(FP, e.key)
    before = os.stat(path)
    time.sleep(0.05)  # past the file system's clock tick (an edit within it: the copy is served)
    with open(path, "r+b") as fh:
        fh.seek(before.st_size - 40)
        byte = fh.read(1)
        fh.seek(before.st_size - 40)
        fh.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(CorruptEntry):
        store.get(FP, e.key)


def test_a_replaced_removed_or_linked_file_is_what_get_sees(tmp_path):
    store, e, path = _store(tmp_path)
    assert store.get(FP, e.key).binary == e.binary
    other = synthetic(1, size=4096)  # same key, another binary, renamed into place
    assert other.key == e.key and other.binary != e.binary
    assert store.put(other)
    assert store.get(FP, e.key).binary == other.binary
    aside = path + ".aside"
    os.rename(path, aside)
    assert store.get(FP, e.key) is None  # removed (another process's clear): a miss
    os.symlink(aside, path)
    with pytest.raises(CorruptEntry, match="symbolic link|not a file"):
        store.get(FP, e.key)


def test_memory_is_bounded_least_recently_used_first(tmp_path):
    store = DirectoryStore(tmp_path / "cache")
    entries = [synthetic(n, size=1000) for n in range(4)]
    recent = Recent(max_bytes=2500)  # room for two binaries
    for e in entries:
        store.put(e)
        path = str(tmp_path / "cache" / FP / (e.key + ".clbin"))
        recent.keep((FP, e.key), stamp_of(os.lstat(path)), e)
        if e is entries[2]:
            assert recent.get((FP, entries[1].key), str(tmp_path / "cache" / FP /
                                                         (entries[1].key + ".clbin")))
    assert len(recent) == 2
    kept = {k for k in (e.key for e in entries)
            if recent.get((FP, k), str(tmp_path / "cache" / FP / (k + ".clbin")))}
    assert kept == {entries[1].key, entries[3].key}  # 1 was used after 2 came
    big = synthetic(9, size=3000)
    recent.keep((FP, big.key), (0, 0, 0, 0, 0), big)  # larger than the whole bound: not kept
    assert len(recent) == 2
