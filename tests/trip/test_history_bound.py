"""Memory that only grows (issue 22, class 8): the session history keeps the newest
``CLMAGIC_HISTORY_MAX`` trips and says how many older ones it dropped, the lifetime figures
count every trip, and a long loop of MEMORY hits through ``clmagic.build`` does not grow the
process. The bounded memo behind the key's memos stays bounded and keeps the newest."""

from __future__ import annotations

import gc
import tracemalloc
from collections import OrderedDict

import pytest
from conftest import SAXPY

import clmagic
from clmagic import _memo
from clmagic.config import DEFAULT_HISTORY_MAX, Settings
from clmagic.show.cache import stats_html, stats_text


@pytest.fixture
def small_history(monkeypatch, cache_dir, pocl):
    """The process-wide compiler (what ``clmagic.build`` uses), keeping 50 trips."""
    monkeypatch.setenv("CLMAGIC_CACHE_DIR", str(cache_dir))
    monkeypatch.setenv("CLMAGIC_DEVICE", pocl)
    monkeypatch.setenv("CLMAGIC_HISTORY_MAX", "50")
    compiler = clmagic.reset()  # the process-wide compiler, from these variables
    assert clmagic.get_compiler() is compiler
    yield compiler
    clmagic.get_compiler().flush()


def test_the_setting_is_read_with_a_sensible_default_and_a_bad_value_warned(capsys):
    assert Settings.from_env({}).history_max == DEFAULT_HISTORY_MAX == 10_000
    assert Settings.from_env({"CLMAGIC_HISTORY_MAX": "7"}).history_max == 7
    bad = Settings.from_env({"CLMAGIC_HISTORY_MAX": "-3"})
    assert bad.history_max == DEFAULT_HISTORY_MAX
    assert "CLMAGIC_HISTORY_MAX" in capsys.readouterr().err
    assert "not usable" in dict((r[0], r[3]) for r in bad.describe())["history_max"]


def test_the_history_keeps_the_newest_and_counts_the_older_ones(cache_dir, pocl):
    c = clmagic.Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": str(cache_dir),
                                            "CLMAGIC_DEVICE": pocl,
                                            "CLMAGIC_HISTORY_MAX": "3"}))
    sources = [SAXPY.replace("scale", f"scale{i}") for i in range(5)]  # 5 MISSes
    keys = [c.build(s).key for s in sources]
    history = c.history
    assert [r.key for r in history.records] == keys[2:]  # the newest three, oldest first
    assert history.dropped == 2
    assert history.summary() == "3 trips kept; 2 older trips not kept"
    stats = clmagic.stats(c)
    assert stats.dropped == 2 and stats.session["MISS"] == 3  # the session: the trips kept
    assert "2 older trips not kept" in stats_text(stats)
    assert "2 older trips not kept" in stats_html(stats)
    assert clmagic.history_frame(compiler=c)["key"].tolist() == keys[2:]
    # the lifetime figures count every trip, kept in the history or not
    assert stats.lifetime is not None and stats.lifetime["MISS"] == 5
    history.clear()
    assert (history.records, history.dropped, history.summary()) == ([], 0, "0 trips kept")


def test_a_saved_trip_dropped_before_its_save_ends_is_settled_without_error(pocl, cache_dir):
    c = clmagic.Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": str(cache_dir),
                                            "CLMAGIC_DEVICE": pocl,
                                            "CLMAGIC_HISTORY_MAX": "1"}))
    first = c.build(SAXPY)  # a MISS: saved in the background
    for _ in range(3):
        assert c.build(SAXPY).outcome == "MEMORY"
    assert first.saved  # the save ends although its record left the history
    assert [r.outcome for r in c.history.records] == ["MEMORY"] and c.history.dropped == 3


def test_a_new_generation_carries_the_history_and_its_dropped_count(small_history, monkeypatch):
    for _ in range(60):
        clmagic.build(SAXPY)
    assert small_history.history.dropped == 10
    monkeypatch.setenv("CLMAGIC_MEMORY_MAX", "9")  # a watched variable: a new compiler
    now = clmagic.get_compiler()
    assert now is not small_history
    assert len(now.history.records) == 50 and now.history.dropped == 10
    monkeypatch.setenv("CLMAGIC_HISTORY_MAX", "20")  # watched too: the newest 20 go on
    smaller = clmagic.get_compiler()
    assert smaller is not now and smaller.history.limit == 20
    assert smaller.history.records == now.history.records[-20:]
    assert smaller.history.dropped == 40


def test_twenty_thousand_memory_hits_do_not_grow_the_process(small_history):
    """0.43 KB a call before the bound: 20,000 calls grew the process by 8.6 MiB."""
    for _ in range(200):  # warm-up: the history full, every memo and counter made
        assert clmagic.build(SAXPY).outcome in ("MISS", "MEMORY")
    small_history.flush()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(20_000):
            clmagic.build(SAXPY)
        small_history.flush()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert small_history.history.records[-1].outcome == "MEMORY"
    assert len(small_history.history.records) == 50
    assert grown < 256 << 10, f"{grown} bytes more after 20,000 MEMORY hits"


def test_the_bounded_memo_keeps_the_newest_and_its_size():
    memo: OrderedDict[int, int] = OrderedDict()
    for i in range(10_000):
        _memo.remember(memo, i, i * i, 100)
    assert list(memo) == list(range(9_900, 10_000))
    _memo.remember(memo, 9_950, -1, 100)  # a key already there keeps its place
    assert len(memo) == 100 and memo[9_950] == -1 and next(iter(memo)) == 9_900
    _memo.remember(memo, -5, 0, 100)
    assert len(memo) == 100 and next(iter(memo)) == 9_901 and next(reversed(memo)) == -5
