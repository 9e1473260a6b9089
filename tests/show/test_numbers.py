"""Numbers that count one thing (issue 35): statistics of one origin filter every figure they
show, "hits" (HIT trips) and "loads" (an entry's own use count) are two names for two counts,
a FAILED build shows the time its attempt took, a rekeyed copy's build is counted once, and
an entry has one size in every view (powers of 1024 throughout). Real POCL builds, real
directory and SQLite stores."""

from __future__ import annotations

import math
import subprocess
import sys

import pyopencl as cl
import pytest
from conftest import SAXPY, child_env

import clmagic
from clmagic._format import fmt_bytes
from clmagic.cache.manage import cache_info, to_clear, zero_stats
from clmagic.config import Settings
from clmagic.errors import BuildError
from clmagic.outcome import Outcome
from clmagic.process import hook
from clmagic.show import html_of, text_of
from clmagic.show.frames import cache_frame, frame_html, history_frame

OTHER = SAXPY.replace("a * x[i]", "x[i] * a")


def test_stats_of_one_origin_filter_every_figure_they_show(compiler, pocl):
    dev = clmagic.resolve_device(pocl)[1]
    hook.install(compiler)
    try:
        cl.Program(cl.Context([dev]), OTHER).build()  # its origin: this module
    finally:
        hook.uninstall()
    compiler.build(SAXPY, None, pocl)  # a cell's
    compiler.flush()
    every = clmagic.stats(compiler)
    assert (every.misses, every.entries, every.lifetime["MISS"]) == (2, 2, 2)
    mine = clmagic.stats(compiler, origin=__name__)
    assert (mine.misses, mine.entries, [d.entries for d in mine.devices]) == (1, 1, [1])
    assert mine.lifetime is None and all(d.lifetime is None for d in mine.devices)
    cells = clmagic.stats(compiler, origin="cell")
    assert (cells.misses, cells.entries) == (1, 1)
    text, page = text_of(mine), html_of(mine)
    table = text.split(f"only {__name__}:")[0]
    assert "lifetime" not in table and "evictions" not in table  # not kept per origin
    assert "not per origin" in text and "limit" not in text  # the limit is the whole store's
    assert "<th>lifetime</th>" not in page and "not per origin" in page
    assert "<th>lifetime</th>" in html_of(every) and "only " not in text_of(every)


def test_hits_count_trips_and_loads_count_an_entrys_own_uses(compiler, pocl):
    compiler.build(SAXPY, None, pocl)
    compiler.flush()
    compiler.forget()  # the next build is served by the store, not by memory
    assert compiler.build(SAXPY, None, pocl).outcome == Outcome.HIT
    compiler.flush()
    assert zero_stats(compiler)  # trips counted from here; the entry keeps its count
    s = clmagic.stats(compiler)
    assert (s.hits, s.lifetime["HIT"], s.devices[0].hits) == (1, 0, 1)
    text, page = text_of(s), html_of(s)
    assert "1 load" in text and "lifetime 0 hits" in text and "1 hit," not in text
    assert ">loads</th><th>evictions</th>" in page and "<th>hits</th><th>evictions" not in page


def test_a_failed_build_shows_the_time_its_attempt_took(compiler, pocl):
    with pytest.raises(BuildError):
        compiler.build("__kernel void k(__global int *a) { a[0] = nope; }", None, pocl)
    (rec,) = compiler.history.records
    assert rec.outcome == Outcome.FAILED and rec.build_ms > 0.0
    assert history_frame(compiler=compiler)["build_ms"].iloc[0] == rec.build_ms


def test_a_rekeyed_copy_counts_its_build_once(compiler, pocl):
    first = compiler.build(SAXPY, None, pocl)
    copy = compiler.build("// the same code, a comment more\n" + SAXPY, None, pocl)
    assert copy.outcome == Outcome.REKEYED
    compiler.flush()
    df = cache_frame(compiler=compiler)
    rows = {k: r for k, r in zip(df["key"], df.itertuples(), strict=True)}
    assert rows[copy.key].rekeyed_from == first.key and math.isnan(rows[copy.key].build_ms)
    built = rows[first.key].build_ms
    assert built > 0 and df["build_ms"].sum() == built  # a total counts the build once
    slowest = df.sort_values("build_ms", ascending=False)["key"].head(2)
    assert list(slowest) == [first.key, copy.key]  # listed once, the copy after it
    page = frame_html(df, "cache")  # the table says why the copy has no build time
    assert ">rekeyed<" in page and f"the binary of {first.key[:12]}…, reused" in page
    clmagic.clear_cache(keys=[first.key[:16]], compiler=compiler)
    (alone,) = cache_frame(compiler=compiler).itertuples()
    assert alone.key == copy.key and alone.build_ms == built  # the build it still stands for


@pytest.mark.parametrize("where", ["cache", "cache.db"])
def test_an_entry_has_one_size_in_every_view(tmp_path, pocl, where):
    """ls, info, the statistics, the cache table, the panel, eviction's sizes, a clear and an
    export give the same entries the same size."""
    location = str(tmp_path / where)
    c = clmagic.Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": location}))
    c.build(SAXPY, None, pocl)
    c.build(OTHER, None, pocl)
    c.flush()
    c.forget()
    assert c.build(SAXPY, None, pocl).outcome == Outcome.HIT  # a use count beside one entry
    c.flush()
    size = sum(e.usage.stored_bytes for e in c.store.entries())
    assert size > 2048  # shown in KiB below
    shown = fmt_bytes(size)
    assert clmagic.stats(c).bytes == size and shown in text_of(clmagic.stats(c))
    info = cache_info(c)
    assert [u.bytes for _, u in info.devices if u is not None] == [size]
    assert shown in text_of(info)
    assert cache_frame(compiler=c)["stored_bytes"].sum() == size
    assert sum(u.size for u in c.store.usage_list()) == size
    assert to_clear(compiler=c).bytes == size
    panel = clmagic.CacheWidget(c, plot=False)
    panel.device.value = clmagic.resolve_device(pocl)[0].spec
    panel.refresh()
    assert f"<b>{shown}</b>" in panel.status.value
    ls = subprocess.run([sys.executable, "-m", "clmagic", "ls"], capture_output=True, text=True,
                        env=child_env(CLMAGIC_CACHE_DIR=location, COLUMNS="200"), timeout=240)
    assert ls.returncode == 0 and shown in ls.stdout, ls.stdout + ls.stderr
    exported = clmagic.export_bundle(tmp_path / "b.clbundle", store=c.store)
    assert exported.bytes == size and shown in text_of(exported)
    assert clmagic.clear_cache(compiler=c).bytes == size
