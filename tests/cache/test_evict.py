"""The size limit: least recently used entries evicted on save (directory, SQLite, a layered
store's local layer), by ``prune`` on every backend, and by the Redis server's own ``maxmemory``
with ``allkeys-lru``; the in-memory front bounded by a number of programs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SAXPY, child_env
from stores import BACKENDS, FP, RedisFactory, synthetic

import clmagic
from clmagic.cache import manage
from clmagic.config import Settings
from clmagic.errors import CorruptEntry, OptionsError
from clmagic.store import LayeredStore, open_store
from clmagic.store.base import FILL
from clmagic.store.lifetime import EVICT

TESTS = str(Path(__file__).parents[1])  # tests/: stores.py
SIZE = 4096  # binary bytes of each synthetic entry


@pytest.fixture(params=["directory", "sqlite", "layered"])
def bounded(request):
    """The backends that evict on save (a layered store: its local layer)."""
    factory = BACKENDS[request.param]()
    if isinstance(factory, RedisFactory):
        factory.server = request.getfixturevalue("redis_server")
    return factory


def _sizes(store) -> int:
    return sum(u.size for u in store.usage_list())


def _fill(store, n: int, start: int = 0) -> list:
    entries = [synthetic(i, size=SIZE, tag="evict") for i in range(start, start + n)]
    for e in entries:
        assert store.put(e)
    return entries


def _evictions(store, lifetime: bool = True) -> int:
    """Evictions counted: by every process (lifetime), or by this one."""
    counts = store.counters.lifetime() if lifetime else store.counters.session
    return int(sum(c for (_, name), (c, _) in counts.items() if name == EVICT))


def test_a_save_past_the_limit_evicts_least_recently_used_down_to_90_percent(bounded,
                                                                             tmp_path):
    store, _ = bounded(tmp_path)
    first = _fill(store, 10)
    one = _sizes(store) // 10
    store.max_size = 30 * one  # room for 30 entries
    for e in first[:3]:  # used again: these three are now the most recently used
        store.get(FP, e.key)
        store.record_hit(FP, e.key)
    local = store.local if isinstance(store, LayeredStore) else store
    later = _fill(local, 22, start=10)  # 32 entries' worth: past the limit
    held = {u.key for u in local.usage_list()}
    assert _sizes(local) <= store.max_size
    assert {e.key for e in first[:3] + later} <= held  # recently used: kept
    evicted = [e.key for e in first[3:] if e.key not in held]
    assert evicted == [e.key for e in first[3 : 3 + len(evicted)]]  # oldest first
    assert 32 - len(held) == len(evicted) >= 32 - int(30 * FILL) - 1  # down to 90 %
    assert _evictions(store) == len(evicted)
    for key in held:  # what stays loads whole
        assert local.get(FP, key).binary is not None


def test_layered_store_bounds_its_local_layer_only(redis_server, tmp_path):
    factory = BACKENDS["layered"]()
    factory.server = redis_server
    store, _ = factory(tmp_path)
    _fill(store, 4)
    store.max_size = _sizes(store.local) + 1
    _fill(store, 10, start=4)
    assert _sizes(store.local) <= store.max_size
    assert len(list(store.remote.entries())) == 14  # the team's copy: the server's own limit


def test_an_entry_larger_than_the_limit_is_not_saved_and_nothing_is_evicted(bounded, tmp_path,
                                                                            capfd):
    store, _ = bounded(tmp_path)
    local = store.local if isinstance(store, LayeredStore) else store  # the remote takes it
    kept = _fill(store, 3)
    store.max_size = 2 * SIZE
    big = synthetic(99, size=3 * SIZE, tag="big")
    assert not local.put(big)
    assert "larger than the cache's size limit" in capfd.readouterr().err
    assert {e.key for e in local.entries()} == {e.key for e in kept}
    assert local.writable  # one entry refused, the store still saves


def test_prune_by_size_and_age_on_every_backend(store_factory, tmp_path):
    store, location = store_factory(tmp_path)
    local = store.local if isinstance(store, LayeredStore) else store
    entries = _fill(store, 12)
    c = clmagic.Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": "0"}), store=store)
    one = max(u.size for u in store.usage_list())
    with pytest.raises(OptionsError, match="0 means no limit"):  # (below one entry: all go)
        manage.prune(max_size=0, compiler=c)
    assert len(list(local.entries())) == 12  # refused: nothing lost
    time.sleep(1.5)
    store.record_hit(FP, entries[0].key)  # the oldest save, used just now
    removed = manage.prune(max_size=6 * one, compiler=c)
    held = {e.key for e in local.entries()}
    assert removed.entries == 12 - len(held) >= 6 and entries[0].key in held
    assert _evictions(store, lifetime=False) == removed.entries
    if store_factory.name != "redis":  # a Redis store keeps no lifetime figures on this machine
        assert _evictions(store) == removed.entries
    removed = manage.prune(older_than="1s", compiler=c)  # the others were saved 1.5 s ago
    assert {e.key for e in local.entries()} == {entries[0].key}
    with pytest.raises(OptionsError, match="negative"):
        manage.prune(max_size="-1G", compiler=c)
    with pytest.raises(OptionsError, match="not understood"):
        manage.prune(older_than="soon", compiler=c)


def test_redis_server_maxmemory_allkeys_lru_bounds_the_shared_cache(redis_server, pocl,
                                                                    tmp_path):
    """The documented way for Redis: the server's own limit. Evicted entries are misses that
    rebuild; listing skips them; nothing breaks."""
    client = redis_server.client
    client.flushall()
    client.config_set("maxmemory-policy", "allkeys-lru")
    client.config_set("maxmemory", str(4 << 20))
    try:
        store = open_store(redis_server.url)
        for i in range(100):  # 100 x 64 KB: well past 4 MB
            store.put(synthetic(i, size=64 << 10, tag="lru"))
        listed = list(store.entries())
        assert 0 < len(listed) < 100
        got = [store.get(e.fingerprint, e.key) for e in listed]  # the server may evict on
        assert all(g is None or len(g.binary) == 64 << 10 for g in got)  # any command: whole
        assert any(g is not None for g in got)  # or gone, never damaged
        c = clmagic.Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": redis_server.url,
                                                "CLMAGIC_DEVICE": pocl}))
        assert c.build(SAXPY).outcome == "MISS"
        for i in range(100, 200):  # push the program's entry out
            store.put(synthetic(i, size=64 << 10, tag="lru"))
        c.forget()
        again = c.build(SAXPY)
        assert again.outcome in ("HIT", "MISS") and set(again.kernels) == {"saxpy", "scale"}
    finally:
        client.config_set("maxmemory", "0")
        client.config_set("maxmemory-policy", "noeviction")
        client.flushall()


EVICTOR = """
import json, os, sys
sys.path.insert(0, os.environ["TESTS"])
from clmagic.store import open_store
store = open_store(os.environ["WHERE"])
print(json.dumps({"gone": len(store.evict(int(os.environ["TARGET"])))}))
"""

READER = """
import json, os, sys
sys.path.insert(0, os.environ["TESTS"])
from stores import synthetic, FP
from clmagic.errors import CorruptEntry
from clmagic.store import open_store
store = open_store(os.environ["WHERE"])
keys = [synthetic(i, size=4096, tag="evict").key for i in range(200)]
whole = absent = 0
for _ in range(3):
    for k in keys:
        e = store.get(FP, k)  # CorruptEntry would fail the test
        if e is None:
            absent += 1
        else:
            assert len(e.binary) == 4096
            whole += 1
print(json.dumps({"whole": whole, "absent": absent}))
"""


@pytest.mark.parametrize("backend", ["directory", "sqlite"])
def test_two_processes_evicting_at_once_with_a_reader(backend, tmp_path):
    """Two evictors to the same target remove about what one would; a reader meanwhile gets
    whole entries or none, never a damaged one."""
    store, location = BACKENDS[backend]()(tmp_path)
    _fill(store, 200)
    one = _sizes(store) // 200
    target = 100 * one
    env = child_env(TESTS=TESTS, WHERE=location, TARGET=str(target))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for code in (READER, EVICTOR, EVICTOR)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    gone = [json.loads(out.strip().splitlines()[-1])["gone"] for out, _ in outs[1:]]
    left = _sizes(store)
    assert target - 2 * one <= left <= target  # not past the target by more than a rounding
    assert sum(gone) == 200 - len(store.usage_list())  # each entry counted once
    assert _evictions(store) == sum(gone)


def test_memory_front_keeps_a_bounded_number_of_programs(cache_dir, pocl):
    c = clmagic.Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": str(cache_dir),
                                            "CLMAGIC_DEVICE": pocl, "CLMAGIC_MEMORY_MAX": "2"}))
    sources = [SAXPY.replace("scale", f"scale{i}") for i in range(3)]
    assert [c.build(s).outcome for s in sources] == ["MISS"] * 3
    assert len(c.state.in_memory()) == 2
    assert c.build(sources[2]).outcome == "MEMORY"  # recently used: still in memory
    assert c.build(sources[0]).outcome == "HIT"  # dropped from memory: a store hit, not a MISS
    assert c.build(sources[0]).outcome == "MEMORY"
    assert c.build(sources[1]).outcome == "HIT"


def test_settings_read_and_refuse_sizes(capfd):
    s = Settings.from_env({"CLMAGIC_CACHE_MAX_SIZE": "500M", "CLMAGIC_MEMORY_MAX": "8"})
    assert (s.max_size, s.memory_max) == (500_000_000, 8)
    assert Settings.from_env({"CLMAGIC_CACHE_MAX_SIZE": "2Gi"}).max_size == 2 << 30
    assert Settings.from_env({"CLMAGIC_CACHE_MAX_SIZE": "0"}).max_size == 0
    assert Settings.from_env({}).max_size == 1 << 30
    bad = Settings.from_env({"CLMAGIC_CACHE_MAX_SIZE": "-5G", "CLMAGIC_MEMORY_MAX": "lots"})
    assert (bad.max_size, bad.memory_max) == (1 << 30, 256)
    err = capfd.readouterr().err
    assert "CLMAGIC_CACHE_MAX_SIZE='-5G' cannot be used" in err and "negative" in err
    assert "CLMAGIC_MEMORY_MAX='lots' cannot be used" in err
    assert "not usable" in dict((r[0], r[3]) for r in bad.describe())["max_size"]


def test_a_bounded_store_still_reports_corrupt_entries(bounded, tmp_path):
    store, _ = bounded(tmp_path)
    e = _fill(store, 1)[0]
    store.max_size = 1 << 20
    bounded.write_raw(store, FP, e.key, b"garbage" * 10)
    with pytest.raises(CorruptEntry):
        store.get(FP, e.key)


def test_config_sets_the_limits_of_the_magics_compiler(shell, compiler, caplog):
    shell.run_line_magic("config", "CLMagics.max_size = '3M'")
    shell.run_line_magic("config", "CLMagics.memory_max = 5")
    magics = shell.magics_manager.registry["CLMagics"]
    assert magics.compiler is compiler
    assert (compiler.store.max_size, compiler.memory_max) == (3_000_000, 5)
    shell.run_line_magic("config", "CLMagics.max_size = '-3M'")  # %config logs the one line
    assert compiler.store.max_size == 3_000_000  # and the limit stays
    assert "negative" in caplog.text
    shell.run_line_magic("config", "CLMagics.max_size = ''")  # the shell is shared: put back
    shell.run_line_magic("config", "CLMagics.memory_max = 0")
