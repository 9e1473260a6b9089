"""Hit counting, fast listing, DataFrames and statistics over real POCL and Oclgrind entries."""

from __future__ import annotations

import os
import re
import time

import pandas as pd
import pyopencl as cl
import pytest
from conftest import SAXPY

import clmagic
from clmagic.config import Settings
from clmagic.entry_file import HEADER
from clmagic.errors import CorruptEntry
from clmagic.show import html_of, text_of
from clmagic.show.frames import CACHE_COLUMNS, HISTORY_COLUMNS

OTHER = "__kernel void twice(__global float *y) { y[get_global_id(0)] *= 2.0f; }\n"


def _entry_path(cache_dir, r):
    return cache_dir / r.device.fingerprint / f"{r.key}.clbin"


def _footprint(cache_dir, r) -> int:
    """The entry file's bytes and its code index's (the index counts for the entry it names)."""
    size = _entry_path(cache_dir, r).stat().st_size
    codes = (cache_dir / r.device.fingerprint).glob("*.code")
    return size + sum(c.stat().st_size for c in codes if c.read_text() == r.key)


def _binary(r) -> bytes:
    return bytes(r.program.get_info(cl.program_info.BINARIES)[0])


def test_store_hits_are_counted_beside_the_entry_which_is_never_rewritten(compiler, cache_dir):
    first = compiler.build(SAXPY)
    compiler.flush()  # saves and hit counts run in the background
    path = _entry_path(cache_dir, first)
    before = (path.read_bytes(), path.stat().st_mtime_ns, path.stat().st_ino)
    for expected in (1, 2):
        fresh = clmagic.Compiler(compiler.settings)
        hit = fresh.build(SAXPY)
        fresh.flush()
        assert hit.outcome == "HIT"
        assert path.with_suffix(".hits").stat().st_size == expected
    assert compiler.build(SAXPY).outcome == "MEMORY"  # a memory hit is not a store hit
    assert (path.read_bytes(), path.stat().st_mtime_ns, path.stat().st_ino) == before
    [entry] = compiler.store.entries()
    assert entry.binary is None
    assert entry.usage.hits == 2
    assert entry.usage.last_used == path.with_suffix(".hits").stat().st_mtime
    code = path.with_name(entry.meta.code_key + ".code")  # the code index, for rekeying
    assert code.read_bytes() == entry.key.encode()
    assert entry.usage.stored_bytes == path.stat().st_size + 2 + code.stat().st_size
    assert compiler.store.delete(first.device.fingerprint, first.key)
    assert not path.exists() and not path.with_suffix(".hits").exists()


def test_listing_reads_header_and_metadata_only(compiler, cache_dir):
    r = compiler.build(SAXPY)
    compiler.flush()
    path = _entry_path(cache_dir, r)
    data = path.read_bytes()
    meta_len = HEADER.unpack_from(data)[2]
    path.write_bytes(data[: HEADER.size + meta_len + 10])  # binary cut short
    [listed] = compiler.store.entries()
    assert listed.key == r.key and listed.usage.hits == 0
    assert listed.last_used == listed.meta.created
    with pytest.raises(CorruptEntry):  # the full read still checks everything
        compiler.store.get(r.device.fingerprint, r.key)
    path.write_bytes(data[: HEADER.size + meta_len // 2])  # metadata cut short: not listed
    assert list(compiler.store.entries()) == []


def test_cache_frame_columns_dtypes_and_values(compiler, cache_dir, pocl, oclgrind):
    t0 = time.time()
    a = compiler.build(SAXPY, "-O2 -cl-mad-enable", device=pocl)
    b = compiler.build(OTHER, device=oclgrind)
    c = compiler.build(OTHER, "-DN=4", device=pocl)
    fresh = clmagic.Compiler(compiler.settings)
    assert fresh.build(SAXPY, "-O2 -cl-mad-enable", device=pocl).outcome == "HIT"
    t1 = time.time()

    df = clmagic.cache_frame(compiler=fresh)
    assert list(df.columns) == list(CACHE_COLUMNS)
    assert {k: str(v) for k, v in df.dtypes.items()} == CACHE_COLUMNS
    assert len(df) == 3
    assert df["key"].iloc[0] == a.key  # the hit is the most recent use
    rows = df.set_index("key")
    for r, src, kernels, hits in ((a, SAXPY, "saxpy, scale", 1), (b, OTHER, "twice", 0),
                                  (c, OTHER, "twice", 0)):
        row = rows.loc[r.key]
        assert row["kernels"] == kernels
        assert row["options"] == r.options.effective
        assert row["device"] == r.device.device_name
        assert row["platform"] == r.device.platform_name
        assert row["driver"] == r.device.driver_version
        assert row["fingerprint"] == r.device.fingerprint
        assert row["source_bytes"] == len(src.encode())
        assert row["binary_bytes"] == len(_binary(r))
        assert row["build_ms"] == pytest.approx(r.build_ms, abs=1e-3)
        assert row["hits"] == hits
        assert row["stored_bytes"] == _footprint(cache_dir, r) + hits
        assert row["created"].tzinfo is not None
        assert t0 - 1 <= row["created"].timestamp() <= row["last_used"].timestamp() <= t1 + 1
        assert row["store"] == f"directory:{cache_dir}"
    assert rows.loc[a.key, "options"] == "-cl-mad-enable"
    assert rows.loc[c.key, "options"] == "-DN=4"

    assert list(clmagic.cache_frame(oclgrind, compiler=fresh)["key"]) == [b.key]
    by_fp = clmagic.cache_frame(a.device.fingerprint, compiler=fresh)
    assert set(by_fp["key"]) == {a.key, c.key}
    with pytest.raises(clmagic.DeviceError):
        clmagic.cache_frame("no-such-device", compiler=fresh)


def test_cache_frame_of_a_memory_only_compiler_is_empty_but_typed(pocl):
    c = clmagic.Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": "off", "CLMAGIC_DEVICE": pocl}))
    c.build(OTHER)
    df = clmagic.cache_frame(compiler=c)
    assert df.empty and {k: str(v) for k, v in df.dtypes.items()} == CACHE_COLUMNS


def test_history_frame_rows_follow_the_trips(compiler, cache_dir, pocl, oclgrind):
    miss = compiler.build(SAXPY)
    memory = compiler.build(SAXPY)
    compiler.forget()
    hit = compiler.build(SAXPY)
    other = compiler.build(OTHER, device=oclgrind)
    compiler.flush()
    path = _entry_path(cache_dir, other)
    data = bytearray(path.read_bytes())
    data[-40] ^= 0xFF  # inside the binary
    path.write_bytes(bytes(data))
    compiler.forget()
    corrupt = compiler.build(OTHER, device=oclgrind)

    df = clmagic.history_frame(compiler=compiler)
    assert list(df.columns) == list(HISTORY_COLUMNS)
    assert {k: str(v) for k, v in df.dtypes.items()} == HISTORY_COLUMNS
    results = [miss, memory, hit, other, corrupt]
    assert list(df["outcome"]) == ["MISS", "MEMORY", "HIT", "MISS", "CORRUPT"]
    assert list(df["key"]) == [r.key for r in results]
    assert list(df["ms"]) == pytest.approx([r.ms for r in results])
    assert list(df["build_ms"]) == pytest.approx([r.build_ms for r in results])
    assert df["saved_ms"].iloc[2] == pytest.approx(max(hit.build_ms - hit.ms, 0))
    assert df["saved_ms"].iloc[1] == pytest.approx(max(miss.build_ms - memory.ms, 0))
    assert list(df["saved_ms"].iloc[[0, 3, 4]]) == [0, 0, 0]
    assert list(df["saved"]) == [True, False, False, True, True]
    assert list(df["kernels"]) == ["saxpy, scale"] * 3 + ["twice"] * 2
    assert df["device"].iloc[3] == other.device.label
    assert df["preview"].iloc[0] == SAXPY.splitlines()[0][:60]
    assert df["source"].isna().all()  # the default record level keeps no source
    assert df["time"].is_monotonic_increasing and str(df["time"].dt.tz) == "UTC"


def test_history_keeps_source_with_record_full(cache_dir, pocl):
    s = Settings.from_env({"CLMAGIC_CACHE_DIR": str(cache_dir), "CLMAGIC_DEVICE": pocl,
                           "CLMAGIC_RECORD": "full"})
    c = clmagic.Compiler(s)
    c.build(OTHER)
    assert list(clmagic.history_frame(compiler=c)["source"]) == [OTHER]


def test_stats_counts_and_store_usage(compiler, cache_dir, pocl, oclgrind):
    empty = clmagic.stats(compiler)
    assert empty.hit_rate is None and empty.entries == 0 and "n/a" in text_of(empty)
    compiler.build(SAXPY)
    compiler.build(SAXPY)
    compiler.forget()
    hit = compiler.build(SAXPY)
    b = compiler.build(OTHER, device=oclgrind)
    s = clmagic.stats(compiler)
    assert (s.hits, s.memory, s.misses, s.corrupt, s.bypass) == (1, 1, 2, 0, 0)
    assert s.hit_rate == pytest.approx(0.5)
    assert s.saved_ms == pytest.approx(sum(r.saved_ms for r in compiler.history.records))
    per = {d.fingerprint: d for d in s.devices}
    assert set(per) == {hit.device.fingerprint, b.device.fingerprint}
    pocl_use = per[hit.device.fingerprint]
    assert (pocl_use.entries, pocl_use.hits) == (1, 1)
    assert pocl_use.bytes == _footprint(cache_dir, hit) + 1
    entries = [p for p in cache_dir.rglob("*") if p.is_file() and p.parent.name != "stats"]
    assert s.bytes == sum(p.stat().st_size for p in entries)
    html = html_of(s)
    assert "clmagic-stats" in html and "50%" in html and b.device.fingerprint in html


def test_plot_history_draws_one_bar_per_trip(compiler, oclgrind):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from clmagic.show.line import COLOURS

    compiler.build(OTHER, device=oclgrind)
    compiler.build(OTHER, device=oclgrind)
    fig = Figure()
    assert clmagic.plot_history(compiler=compiler, ax=fig.add_subplot()) is fig
    ax = fig.axes[0]
    bars = ax.patches
    assert len(bars) == 2
    assert [matplotlib.colors.to_hex(b.get_facecolor()) for b in bars] == [
        COLOURS["MISS"].lower(), COLOURS["MEMORY"].lower()]
    assert [b.get_height() for b in bars] == pytest.approx(
        [r.ms for r in compiler.history.records])


def test_plot_history_names_bars_by_kernel_keeps_the_legend_off_the_bars_and_no_open_figure(
        compiler, oclgrind):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    compiler.build(OTHER, device=oclgrind)
    compiler.build(OTHER, device=oclgrind)
    open_before = plt.get_fignums()
    fig = clmagic.plot_history(compiler=compiler)
    assert plt.get_fignums() == open_before  # not left in pyplot: a notebook shows it once
    ax = fig.axes[0]
    names = [t.get_text() for t in ax.get_xticklabels()]
    assert names == [compiler.history.records[0].kernels[0]] * 2
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    for bar in ax.patches:  # the legend is beside the bars, not over any of them
        assert not legend.overlaps(bar.get_window_extent())
    assert legend.x0 > ax.get_window_extent().x1


def test_import_clmagic_stays_light_until_a_frame_is_asked_for():
    from conftest import last_json, run_child

    proc = run_child(
        "import json, sys, clmagic\n"
        "light = [m for m in ('pandas', 'ipywidgets', 'matplotlib') if m in sys.modules]\n"
        "n = len(clmagic.cache_frame())\n"
        "print(json.dumps({'light': light, 'pandas': 'pandas' in sys.modules, 'rows': n,"
        " 'all': sorted(set(clmagic.__all__) - set(dir(clmagic)))}))",
        CLMAGIC_CACHE_DIR="off",
    )
    assert last_json(proc) == {"light": [], "pandas": True, "rows": 0, "all": []}


def test_frames_are_plain_pandas(compiler):
    compiler.build(OTHER)
    df = clmagic.cache_frame(compiler=compiler)
    assert isinstance(df, pd.DataFrame)
    assert df.groupby("device")["binary_bytes"].sum().iloc[0] == df["binary_bytes"].iloc[0]
    assert os.fspath(compiler.store.location) in df["store"].iloc[0]


def test_clear_also_removes_use_counts_whose_entry_is_gone(compiler, cache_dir):
    r = compiler.build(OTHER)
    compiler.store.record_hit(r.device.fingerprint, r.key)
    orphan = "ab" * 32
    compiler.store.record_hit(r.device.fingerprint, orphan)  # its entry never existed
    entry_bytes = _footprint(cache_dir, r)  # the entry's size: its file and code index
    n, freed = compiler.store.clear(r.device.fingerprint)
    assert (n, freed) == (1, entry_bytes + 2)  # and its hit, and the orphan's
    assert list((cache_dir / r.device.fingerprint).iterdir()) == []


def test_frames_display_a_readable_table_and_keep_the_exact_data(compiler, pocl, oclgrind):
    import pandas as pd

    a = compiler.build(SAXPY, "-O3 -cl-mad-enable -D TILE=16", device=pocl)
    compiler.build(OTHER, device=oclgrind)
    compiler.build(OTHER, device=oclgrind)  # MEMORY
    cache, history = clmagic.cache_frame(compiler=compiler), clmagic.history_frame(
        compiler=compiler)
    assert isinstance(cache, pd.DataFrame)
    assert set(cache["key"]) >= {a.key} and len(a.key) == 64  # the data stays exact
    # rows and columns picked from a frame read the same way; a grouping is pandas' own
    picked = cache[cache["key"] == a.key][["key", "options"]]
    assert "clmagic-frame" in picked._repr_html_() and len(picked) == 1
    # a history's origin is shown where it is picked (notebook 5 teaches it), in every row
    by_whom = re.sub(r' (style|title)="[^"]*"', "", history[["outcome", "origin"]]._repr_html_())
    assert "<th>origin</th>" in by_whom and by_whom.count("<td>cell</td>") == len(history)
    assert "clmagic-frame" not in cache.groupby("device")[["hits"]].sum()._repr_html_()
    assert type(cache.describe()) is pd.DataFrame
    for df in (cache, history):
        page = df._repr_html_()
        shown = re.sub(r' title="[^"]*"', "", page)  # the text a reader sees, tooltips apart
        assert a.key[:12] + "…" in shown and a.key not in shown  # a short key
        assert f'title="{a.key}"' in page  # in full in its tooltip
        assert "white-space:nowrap" in page  # no value wrapped over lines
        assert a.device.label in page  # one device label in both tables
        assert "pthread" not in shown.replace(a.device.label, "")
        assert f"{a.build_ms:.1f} ms" in page  # ms to one decimal
        assert not re.search(r"\d\.\d{3,} ms", page)
        assert not re.search(r"\d\d:\d\d:\d\d\.\d", page)  # times to the second
        assert "also in the DataFrame:" in page
    assert "-cl-mad-enable -DTILE=16" in cache._repr_html_()
