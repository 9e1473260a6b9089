"""The store contract, run against every backend: directory, SQLite, Redis, local+remote."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import child_env
from stores import FP, FP2, synthetic

from clmagic.entry import Entry
from clmagic.errors import CorruptEntry


def test_put_get_roundtrip_and_absent(store_factory, tmp_path):
    store, _ = store_factory(tmp_path)
    e = synthetic(1)
    assert store.get(FP, e.key) is None
    assert store.put(e) is True
    got = store.get(FP, e.key)
    assert got.binary == e.binary and got.key == e.key and got.fingerprint == FP
    assert got.meta == e.meta
    assert got.usage.hits == 0 and got.usage.stored_bytes >= len(e.binary)
    assert got.usage.store == store_factory.name.replace("layered", "directory")
    assert got.kernels == ["k1", "scale"]


def test_put_replaces_and_reopened_store_sees_it(store_factory, tmp_path):
    store, location = store_factory(tmp_path)
    first, second = synthetic(1), synthetic(1)
    store.put(first)
    store.put(second)
    again = store_factory.reopen(location)
    assert again.get(FP, first.key).binary == second.binary != first.binary
    assert [e.key for e in again.entries()] == [first.key]


def test_delete(store_factory, tmp_path):
    store, _ = store_factory(tmp_path)
    a, b = synthetic(1), synthetic(2)
    store.put_many([a, b])
    assert store.delete(FP, a.key) is True
    assert store.get(FP, a.key) is None
    assert store.delete(FP, a.key) is False
    assert store.get(FP, b.key).binary == b.binary


def test_entries_are_metadata_only_and_filter_by_device(store_factory, tmp_path):
    store, _ = store_factory(tmp_path)
    mine = [synthetic(i) for i in range(3)]
    other = synthetic(9, fingerprint=FP2)
    assert store.put_many([*mine, other]) == 4
    listed = {e.key: e for e in store.entries()}
    assert set(listed) == {e.key for e in [*mine, other]}
    for e in [*mine, other]:
        got = listed[e.key]
        assert got.binary is None
        assert got.meta == e.meta
        assert got.usage.stored_bytes >= len(e.binary) and got.usage.hits == 0
        assert got.last_used >= e.meta.created
    assert {e.key for e in store.entries(FP2)} == {other.key}


def test_record_hit_counts_without_rewriting_the_binary(store_factory, tmp_path):
    store, _ = store_factory(tmp_path)
    e = synthetic(1)
    store.put(e)
    before = next(iter(store.entries()))
    store.record_hit(FP, e.key)
    store.record_hit(FP, e.key)
    store.record_hit(FP, "f" * 64)  # an absent entry: nothing happens, nothing is created
    after = next(iter(store.entries()))
    assert store.get(FP, e.key).binary == e.binary
    assert [x.key for x in store.entries()] == [e.key]
    got = store.get(FP, e.key)
    for seen in (after, got):  # every backend counts, in get and in entries alike
        assert seen.usage.hits == before.usage.hits + 2
        assert seen.last_used >= before.last_used
        assert seen.usage.stored_bytes >= before.usage.stored_bytes
    when = before.last_used + 1234.5  # a hit counted later, in a batch, keeps its own time
    store.record_hit(FP, e.key, when)
    for seen in (next(iter(store.entries())), store.get(FP, e.key)):
        assert seen.usage.hits == before.usage.hits + 3
        assert abs(seen.last_used - when) < 0.01


def test_clear_one_device_then_all(store_factory, tmp_path):
    store, _ = store_factory(tmp_path)
    store.put_many([synthetic(1), synthetic(2), synthetic(3, fingerprint=FP2)])
    count, freed = store.clear(FP)
    assert count == 2 and freed >= 2 * 256
    assert [e.fingerprint for e in store.entries()] == [FP2]
    assert store.clear()[0] == 1
    assert list(store.entries()) == []
    assert store.clear() == (0, 0)


def test_corrupt_entry_raises_corrupt_entry(store_factory, tmp_path):
    store, _ = store_factory(tmp_path)
    e = synthetic(1)
    store.put(e)
    data = bytearray(store_factory.raw(store, FP, e.key))
    data[-40] ^= 0xFF  # a byte of the binary
    store_factory.write_raw(store, FP, e.key, bytes(data))
    with pytest.raises(CorruptEntry, match="checksum"):
        store.get(FP, e.key)
    store.delete(FP, e.key)
    assert store.get(FP, e.key) is None
    assert store.put(e) and store.get(FP, e.key).binary == e.binary


WRITER = """
import json, os, sys
sys.path.insert(0, os.environ["TESTS"])
from stores import synthetic, FP
from clmagic.config import Settings
from clmagic.store import store_for
store = store_for(Settings.from_env())
who = int(os.environ["WHO"])
ok = 0
for n in range(who * 10, who * 10 + 20):  # the two writers overlap on 10 keys
    ok += store.put(synthetic(n, tag="x"))
    store.get(FP, synthetic(n, tag="x").key)
print(json.dumps({"stored": ok}))
"""


def test_two_processes_write_at_once(store_factory, tmp_path):
    import subprocess
    from pathlib import Path

    store, location = store_factory(tmp_path)
    env = child_env(TESTS=str(Path(__file__).parents[1]), **store_factory.env(location))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER], env={**env, "WHO": str(w)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1])["stored"] == 20
        assert "warning" not in err
    keys = {e.key for e in store_factory.reopen(location).entries()}
    assert len(keys) == 30
    for n in range(30):
        assert store.get(FP, synthetic(n, tag="x").key) is not None


def _coded(n: int, code: str, fingerprint: str = FP) -> object:
    """A synthetic entry that carries a code key."""
    e = synthetic(n, fingerprint=fingerprint)
    return Entry.create(e.key, e.fingerprint, e.binary, code_key=code,
                        **{f: getattr(e.meta, f) for f in ("kernels", "options", "device",
                                                           "platform", "driver", "source_bytes",
                                                           "build_ms", "created", "build_log")})


CODE, CODE2 = "c" * 64, "d" * 64


def test_find_code_names_the_latest_entry_of_that_code(store_factory, tmp_path):
    store, location = store_factory(tmp_path)
    assert store.find_code(FP, CODE) is None
    first = _coded(1, CODE)
    store.put_many([first, _coded(2, CODE2), synthetic(3)])
    got = store.find_code(FP, CODE)
    assert got is not None and got.key == first.key and got.binary == first.binary
    assert got.meta.code_key == CODE
    assert store.find_code(FP2, CODE) is None  # another device's code is not this one's
    assert store.find_code(FP, "e" * 64) is None
    second = _coded(4, CODE)
    store.put(second)
    assert store_factory.reopen(location).find_code(FP, CODE).key == second.key


def test_find_code_after_delete_and_clear_is_none(store_factory, tmp_path):
    store, _ = store_factory(tmp_path)
    a, b = _coded(1, CODE), _coded(2, CODE2)
    store.put_many([a, b])
    store.delete(FP, a.key)  # the index still names it: a stale name is a miss, not an error
    assert store.find_code(FP, CODE) is None
    store.clear()
    assert store.find_code(FP, CODE2) is None
    store.put(_coded(5, CODE2))
    assert store.find_code(FP, CODE2).key == _coded(5, CODE2).key


def _indexed(store: object, code: str, fingerprint: str = FP) -> bool:
    """Whether the backend still holds a code index for ``code`` (its file, row or string)."""
    from clmagic.store import DirectoryStore, LayeredStore, RedisStore, SQLiteStore

    if isinstance(store, LayeredStore):
        return _indexed(store.local, code, fingerprint) or _indexed(store.remote, code, fingerprint)
    if isinstance(store, DirectoryStore):
        return (store.root / fingerprint / f"{code}.code").exists()
    if isinstance(store, SQLiteStore):
        return bool(store._query("SELECT count(*) FROM code_keys WHERE fingerprint = ? AND "
                                 "code_key = ?", (fingerprint, code))[0][0])
    assert isinstance(store, RedisStore)
    return bool(store.client.exists(store._code(fingerprint, code)))


def test_a_deleted_entry_takes_its_code_index_along_not_a_newer_ones(store_factory, tmp_path):
    store, _ = store_factory(tmp_path)
    a, b, c = _coded(1, CODE), _coded(2, CODE2), _coded(3, CODE2)
    store.put_many([a, b])
    assert _indexed(store, CODE) and _indexed(store, CODE2)
    assert store.delete(FP, a.key)
    assert not _indexed(store, CODE) and _indexed(store, CODE2)
    store.put(c)  # the index of CODE2 now names c: deleting b leaves it
    assert store.delete(FP, b.key)
    assert _indexed(store, CODE2) and store.find_code(FP, CODE2).key == c.key
    assert store.delete(FP, c.key) and not _indexed(store, CODE2)


def test_an_evicted_entry_takes_its_code_index_along(store_factory, tmp_path):
    store, _ = store_factory(tmp_path)
    evicting = getattr(store, "local", store)  # a layered store evicts its local copy
    old, new = _coded(1, CODE), _coded(2, CODE2)
    store.put_many([old, new])
    uses = evicting.usage_list()
    total = sum(u.size for u in uses)
    gone = evicting.evict(total - 1, uses=[u._replace(last_used=float(u.key != old.key))
                                           for u in uses])
    assert [u.key for u in gone] == [old.key]
    assert not _indexed(evicting, CODE) and _indexed(evicting, CODE2)


@pytest.mark.parametrize("bad", ["", "C" * 64, "../" + "c" * 61, "c" * 63, "c" * 65])
def test_find_code_refuses_names_the_cache_never_files(store_factory, tmp_path, bad):
    store, _ = store_factory(tmp_path)
    store.put(_coded(1, CODE))
    assert store.find_code(FP, bad) is None


def test_entries_without_a_code_key_are_never_found_by_code(store_factory, tmp_path):
    store, _ = store_factory(tmp_path)
    store.put_many([synthetic(i) for i in range(3)])
    assert store.find_code(FP, CODE) is None
    assert all(e.meta.code_key == "" for e in store.entries())
