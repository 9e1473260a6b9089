"""``%clcache`` through a real IPython InteractiveShell, over real POCL and Oclgrind entries."""

from __future__ import annotations

import os
import time

import pytest
from conftest import SAXPY
from IPython.utils.capture import capture_output

import clmagic
from clmagic.show import text_of

SOURCES = [
    SAXPY,
    "__kernel void twice(__global float *y) { y[get_global_id(0)] *= 2.0f; }\n",
    "__kernel void add1(__global int *y) { y[get_global_id(0)] += 1; }\n",
]


@pytest.fixture
def filled(compiler, pocl, oclgrind):
    """Three entries on POCL and one on Oclgrind; returns {name: BuildResult}."""
    built = {f"p{i}": compiler.build(src, device=pocl) for i, src in enumerate(SOURCES)}
    built["o0"] = compiler.build(SOURCES[0], device=oclgrind)
    compiler.flush()  # saves run in the background
    return built


def stored(compiler) -> set[str]:
    return {e.key for e in compiler.store.entries()}


def size_of(cache_dir, r) -> int:
    """An entry's size as every number of the cache counts it (listing, eviction, clear): its
    file, its ``.hits`` and the code index that names it (``<code key>.code``, holding the key)."""
    base = cache_dir / r.device.fingerprint / r.key
    hits = base.with_suffix(".hits")
    index = sum(c.stat().st_size for c in base.parent.glob("*.code") if c.read_text() == r.key)
    assert index, "no code index names the entry"
    return (base.with_suffix(".clbin").stat().st_size
            + (hits.stat().st_size if hits.exists() else 0) + index)


def clcache(shell, line: str):
    return shell.run_line_magic("clcache", line)


def test_no_subcommand_is_the_dataframe(shell, compiler, filled, oclgrind):
    df = clcache(shell, "")
    assert set(df["key"]) == {r.key for r in filled.values()}
    assert df.equals(clmagic.cache_frame(compiler=compiler))
    assert list(clcache(shell, f"--device {oclgrind}")["key"]) == [filled["o0"].key]


def test_clear_by_key_prefix_removes_exactly_those(shell, compiler, cache_dir, filled):
    gone = filled["p1"]
    expected_bytes = size_of(cache_dir, gone)
    with capture_output() as cap:
        shell.run_cell(f"%clcache clear {gone.key[:10]}")
    assert f"removed 1 entry ({clmagic._format.fmt_bytes(expected_bytes)})" in cap.stdout
    assert stored(compiler) == {r.key for r in filled.values()} - {gone.key}
    two = [filled["p0"].key[:8], filled["p2"].key[:12]]
    both = size_of(cache_dir, filled["p0"]) + size_of(cache_dir, filled["p2"])
    removed = clcache(shell, "clear " + " ".join(two))
    assert (removed.entries, sorted(removed.keys)) == (2, sorted([filled["p0"].key,
                                                                   filled["p2"].key]))
    assert removed.bytes == both
    assert stored(compiler) == {filled["o0"].key}
    assert clcache(shell, f"clear {gone.key[:10]}").entries == 0


def test_clear_reports_entries_and_bytes(shell, compiler, cache_dir, filled, pocl):
    want = sum(size_of(cache_dir, filled[k]) for k in ("p0", "p1", "p2"))
    removed = clcache(shell, f"clear --device {pocl}")
    assert (removed.entries, removed.bytes) == (3, want)
    assert text_of(removed).startswith(f"removed 3 entries ({clmagic._format.fmt_bytes(want)})")
    assert stored(compiler) == {filled["o0"].key}


def test_an_entrys_size_is_one_number(shell, compiler, cache_dir, filled):
    """The table, the eviction's sizes (the size limit, the panel's total) and a clear count an
    entry alike (issue 24, item 5): its file, its hit counter and its code index."""
    want = {r.key: size_of(cache_dir, r) for r in filled.values()}
    listed = clcache(shell, "")
    assert dict(zip(listed["key"], listed["stored_bytes"], strict=True)) == want
    assert {u.key: u.size for u in compiler.store.usage_list()} == want
    assert clcache(shell, "clear").bytes == sum(want.values())


def test_clear_by_device_leaves_the_other_device(shell, compiler, filled, oclgrind):
    assert clcache(shell, f"clear --device {oclgrind}").entries == 1
    assert stored(compiler) == {filled[k].key for k in ("p0", "p1", "p2")}
    # by fingerprint, and the memory cache forgets the removed programs too
    fp = filled["p0"].device.fingerprint
    assert clcache(shell, f"clear -d {fp}").entries == 3
    assert stored(compiler) == set()
    assert compiler.build(SOURCES[0]).outcome == "MISS"


def test_clear_older_than_uses_the_last_use(shell, compiler, cache_dir, filled, pocl):
    # p1 was last used ten days ago (its last hit); everything else was built just now
    fresh = clmagic.Compiler(compiler.settings)
    assert fresh.build(SOURCES[1], device=pocl).outcome == "HIT"
    fresh.flush()  # the hit is counted in the background
    hits = cache_dir / filled["p1"].device.fingerprint / f"{filled['p1'].key}.hits"
    old = time.time() - 10 * 86400
    os.utime(hits, (old, old))
    assert clcache(shell, "clear --older-than 11d").entries == 0
    assert clcache(shell, "clear --older-than 7d --device oclgrind").entries == 0
    removed = clcache(shell, "clear --older-than 7d")
    assert removed.keys == [filled["p1"].key]
    assert stored(compiler) == {filled[k].key for k in ("p0", "p2", "o0")}
    assert compiler.build(SOURCES[1], device=pocl).outcome == "MISS"  # not served from memory


def test_clear_everything(shell, compiler, filled):
    assert clcache(shell, "clear").entries == 4
    assert stored(compiler) == set() and not compiler.state.in_memory()


def test_stats_history_info_widget(shell, compiler, filled, cache_dir, pocl, oclgrind):
    s = clcache(shell, "stats")
    assert (s.misses, s.entries) == (4, 4)
    h = clcache(shell, "history")
    assert list(h["outcome"]) == ["MISS"] * 4
    info = text_of(clcache(shell, "info"))
    assert f"cache:   {cache_dir} (directory)" in info
    assert f"CLMAGIC_CACHE_DIR={cache_dir}" in info
    lines = {ln[2:].split()[0]: ln for ln in info.splitlines() if ln[:1] in "* "}
    assert lines[pocl].startswith("*") and "3 entries" in lines[pocl]
    assert lines[oclgrind].startswith(" ") and "1 entry," in lines[oclgrind]
    widget = clcache(shell, "widget")
    assert type(widget).__name__ == "CacheWidget" and len(widget.rows) == 3


@pytest.mark.parametrize("term", ["xterm-256color", "dumb"])
def test_help_documents_every_subcommand(shell, monkeypatch, term):
    """``%clcache?`` lists every subcommand and option where the output goes: with ``TERM``
    naming a terminal (a newcomer's shell) IPython would page it through ``less``, which writes
    to the terminal past a redirected ``sys.stdout`` (the capture was empty)."""
    from clmagic.ipython.pager import print_unless_terminal

    monkeypatch.setenv("TERM", term)
    with capture_output() as cap:
        shell.run_cell("%clcache?")
    text = cap.stdout
    for word in ("stats", "history", "info", "clear", "widget", "--device", "--older-than",
                 "KEY_PREFIX", "7d"):
        assert word in text, word
    pagers = [getattr(hook, "__func__", hook) for _, hook in shell.hooks.show_in_pager.chain]
    assert pagers.count(print_unless_terminal) == 1  # once, however many magics were made


def test_help_is_paged_by_ipython_on_a_terminal(shell, monkeypatch):
    """On a terminal, paging is what its user asked for: clmagic's pager passes the text on to
    IPython's (no hook takes it, so IPython's own pager runs), here with a pty as stdout."""
    import contextlib
    import pty

    from IPython.core.error import TryNext

    monkeypatch.setenv("TERM", "xterm-256color")
    leader, follower = pty.openpty()
    try:
        with open(follower, "w", closefd=False) as tty, contextlib.redirect_stdout(tty):
            assert tty.isatty()
            with pytest.raises(TryNext):
                shell.hooks.show_in_pager("a long help text\n" * 200, start=0, screen_lines=0)
    finally:
        os.close(follower)
        os.close(leader)


@pytest.mark.parametrize(
    "line, message",
    [
        ("bogus", "invalid choice: 'bogus'"),
        ("clear --older-than soon", "age 'soon' not understood"),
        ("clear xyz", "key prefix 'xyz' is not hexadecimal"),
        ("stats abc", "go with %clcache clear only"),
        ("info --device 0:0", "--device goes with"),
        ("clear --device no-such-device", "no OpenCL device matches"),
    ],
)
def test_bad_input_is_one_line_and_removes_nothing(shell, compiler, filled, line, message):
    before = stored(compiler)
    with capture_output() as cap:
        res = shell.run_cell(f"%clcache {line}")
    assert not res.success
    out = (cap.stdout + cap.stderr).strip()
    assert message in out and "Traceback" not in out and len(out.splitlines()) == 1, out
    assert stored(compiler) == before
