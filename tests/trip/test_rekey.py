"""REKEYED: a source whose code is a stored entry's (comments or spacing changed) loads that
entry's binary without a build, is saved under its own key, and says so everywhere outcomes are
shown; where comments or spacing could matter, it is a MISS."""

from __future__ import annotations

import re

import pytest
from conftest import SAXPY
from test_build import _saxpy  # runs saxpy: does it compute 2 x + 1?

import clmagic
from clmagic import Compiler, Outcome, Settings
from clmagic.show import html_of, text_of

EDITED = """\
// saxpy: y = a x + y
__kernel void saxpy(const float a, __global const float *x, __global float *y)
{
    const int i = get_global_id(0);   /* one item per element */
    y[i] = a * x[i]
         + y[i];
}


__kernel void scale(const float a,
                    __global float *y)
{
        y[get_global_id(0)] *= a;
}
"""


def test_comment_and_spacing_edit_is_rekeyed_loaded_and_saved(compiler, settings):
    first = compiler.build(SAXPY)
    assert first.outcome == Outcome.MISS
    r = compiler.build(EDITED)
    assert r.outcome == Outcome.REKEYED
    assert r.key != first.key and r.record.code_key == first.record.code_key != ""
    assert r.note.startswith(f"same code as {first.key[:4]}…: only comments or spacing")
    assert r.saved and r.build_ms == pytest.approx(first.build_ms, abs=1e-3)
    assert r.record.rekeyed_from == first.key
    assert _saxpy(r) and _saxpy(first)
    text = text_of(r)
    assert text.startswith("REKEYED saxpy, scale · same code as") and "loaded in" in text
    assert 'data-outcome="REKEYED"' in html_of(r)
    # saved under the new key: a fresh process's compiler finds it as a plain HIT
    again = Compiler(settings).build(EDITED)
    assert again.outcome == Outcome.HIT and again.key == r.key
    assert again.record.rekeyed_from == first.key  # the log's line numbers are still not its own
    assert compiler.build(EDITED).outcome == Outcome.MEMORY
    stored = compiler.store.get(r.device.fingerprint, r.key)
    assert stored.binary == compiler.store.get(first.device.fingerprint, first.key).binary
    assert stored.meta.code_key == r.record.code_key and stored.meta.rekeyed_from == first.key


def test_a_rekey_is_counted_in_the_lifetime_statistics(compiler, settings):
    compiler.build(SAXPY)
    r = compiler.build(EDITED)
    assert r.outcome == Outcome.REKEYED
    life = clmagic.stats(Compiler(settings)).lifetime  # as another process reads the store
    assert life is not None and (life["REKEYED"], life["MISS"], life["HIT"]) == (1, 1, 0)


def test_rekeying_a_rekeyed_entry_points_at_the_first_build(compiler):
    first = compiler.build(SAXPY)
    second = compiler.build(EDITED)
    third = compiler.build("  " + EDITED.replace("    ", "\t"))
    assert (second.outcome, third.outcome) == (Outcome.REKEYED, Outcome.REKEYED)
    assert third.record.rekeyed_from == first.key


WARNS = """\
#warning this kernel is old
__kernel void k(__global int *a) { a[get_global_id(0)] = 7; }
"""


def test_a_rekeyed_build_log_is_labelled_as_the_first_builds(compiler):
    first = compiler.build(WARNS)
    if "this kernel is old" not in first.build_log:
        pytest.fail(f"POCL gave no warning in the log: {first.build_log!r}")
    moved = "// three lines\n// of comments\n// on top\n" + WARNS
    r = compiler.build(moved)
    assert r.outcome == Outcome.REKEYED
    assert r.build_log == first.build_log  # the log of the build that made the binary
    label = f"build log of {first.key[:4]}… (the first build of this code: its line numbers)"
    assert label in text_of(r)
    assert f"({label})</summary>" in html_of(r)  # "N warnings (build log of …)"
    assert re.search(r"<summary>\d+ warnings?</summary>", html_of(first))  # counted
    assert "warning" in text_of(first) and "build log of" not in text_of(first)


@pytest.mark.parametrize("original,edited,why", [
    ("#define S(x) #x\n__kernel void k(__global char *a) { a[0] = S(a + b)[1]; }\n",
     "#define S(x) #x\n__kernel void k(__global char *a) { a[0] = S(a+b)[1]; }\n",
     "stringizes"),
    ("__kernel void k(__global int *a) { a[0] = __LINE__; }\n",
     "// moved down\n__kernel void k(__global int *a) { a[0] = __LINE__; }\n", "__LINE__"),
    ("#define V 1 + \\\n 2\n__kernel void k(__global int *a) { a[0] = V; }\n",
     "#define V 1 + \\\n 2 // three\n__kernel void k(__global int *a) { a[0] = V; }\n",
     "continuation"),
    ("#pragma clang diagnostic ignored \"-Wunused\"\n__kernel void k(__global int *a) {}\n",
     "#pragma clang diagnostic ignored \"-Wunused\"\n\n__kernel void k(__global int *a) {}\n",
     "#pragma clang"),
    ('__kernel void k(__global char *a) { constant char *s = "a  b"; a[0] = s[2]; }\n',
     '__kernel void k(__global char *a) { constant char *s = "a b"; a[0] = s[2]; }\n', None),
    ("#define F(x) (x)\n__kernel void k(__global int *a) { a[0] = F(1); }\n",
     "#define F (x) (x)\nint x = 0;\n__kernel void k(__global int *a) { a[0] = F(1); }\n", None),
])
def test_no_rekey_where_comments_or_spacing_can_matter(compiler, original, edited, why, capsys):
    compiler.history.debug = True
    try:
        assert compiler.build(original).outcome == Outcome.MISS
    except clmagic.BuildError:
        pass  # a source POCL refuses still shows the refusal is the code key's, below
    err = capsys.readouterr().err
    if why:
        assert "NOREKEY" in err and why in err
    try:
        r = compiler.build(edited)
    except clmagic.BuildError:
        return
    assert r.outcome == Outcome.MISS


def test_options_that_expose_line_numbers_are_not_rekeyed(compiler):
    first = compiler.build(SAXPY, "-g")
    assert first.record.code_key == ""
    assert compiler.build(EDITED, "-g").outcome == Outcome.MISS


def test_rekey_in_every_backend(store_factory, tmp_path, pocl):
    store, location = store_factory(tmp_path)
    settings = Settings.from_env({"CLMAGIC_DEVICE": pocl, "CLMAGIC_CACHE_DIR": "off"})
    first = Compiler(settings, store=store).build(SAXPY)
    r = Compiler(settings, store=store_factory.reopen(location)).build(EDITED)
    assert r.outcome == Outcome.REKEYED and r.saved and _saxpy(r) and _saxpy(first)
    hit = Compiler(settings, store=store_factory.reopen(location)).build(EDITED)
    assert hit.outcome == Outcome.HIT


def test_a_damaged_original_or_a_stale_index_is_a_build(compiler, cache_dir):
    first = compiler.build(SAXPY)
    compiler.flush()  # the save runs in the background
    path = cache_dir / first.device.fingerprint / f"{first.key}.clbin"
    data = bytearray(path.read_bytes())
    data[-40] ^= 0xFF  # the binary no longer matches its checksum
    path.write_bytes(bytes(data))
    fresh = Compiler(compiler.settings)
    r = fresh.build(EDITED)
    assert r.outcome == Outcome.MISS and _saxpy(r) and r.saved
    path.unlink()  # the code index now names the edited entry; remove that one too
    (cache_dir / r.device.fingerprint / f"{r.key}.clbin").unlink()
    assert Compiler(compiler.settings).build(SAXPY).outcome == Outcome.MISS


def test_rekeyed_appears_in_stats_history_trace_and_plot(compiler, capsys):
    compiler.history.debug = True
    compiler.build(SAXPY)
    compiler.flush()  # the original's save is in (as before the next cell): a REKEYED loads it
    compiler.build(EDITED)
    err = capsys.readouterr().err
    assert "clmagic: REKEYED" in err and "rekeyed 1" in err and "same code as" in err
    s = clmagic.stats(compiler)
    assert (s.misses, s.rekeyed, s.hits) == (1, 1, 0)
    assert s.hit_rate == pytest.approx(0.5)
    assert re.search(r"^rekeyed +1 +1$", text_of(s), re.M)  # this session, and the lifetime
    assert "<th>rekeyed</th><td>1</td>" in html_of(s)
    df = clmagic.history_frame(compiler=compiler)
    assert list(df["outcome"]) == ["MISS", "REKEYED"]
    assert df["saved_ms"].iloc[1] > 0
    import matplotlib

    matplotlib.use("Agg")
    fig = clmagic.plot_history(compiler=compiler)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "REKEYED ms taken" in labels


def test_the_magic_shows_rekeyed_under_the_cell(shell):
    from conftest import outcome_line, run

    run(shell, "")
    res, cap = run(shell, "", EDITED)
    assert res.success, res.error_in_exec
    line = outcome_line(cap)
    assert line.startswith("REKEYED saxpy, scale · same code as")
    assert "only comments or spacing changed" in line and "loaded in" in line
