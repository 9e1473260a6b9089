"""Sweeps through the cache (clmagic/cache/sweep.py, clmagic/show/sweep.py) on POCL: six
variants built in worker processes, one refused by the driver (skipped with its first error
line), launches timed here and checked against numpy, a sweep stopped after three launches and
resumed (the finished timings kept, a re-run all HITs), the best variant bound."""

from __future__ import annotations

import html
import json

import numpy as np
import pyopencl as cl
import pytest
from hypothesis import given
from hypothesis import strategies as st

import clmagic
from clmagic.cache import warm as warm_module
from clmagic.cache.sweep import results_folder, sweep_run, variants, with_register_report
from clmagic.cache.warm import warm_up
from clmagic.errors import OptionsError
from clmagic.key.options import parse_options
from clmagic.show.sweep import plot_sweep, sweep_frame

SRC = """\
#if SCALE == 3
#error "SCALE 3 is not supported"
#endif
__kernel void scaled(__global const float *x, __global float *y)
{
    const int i = get_global_id(0) * VEC;
    for (int v = 0; v < VEC; v++)
        y[i + v] = SCALE * x[i + v];
}
"""
PARAMS = {"SCALE": [2, 3, 4], "VEC": [1, 2]}
N = 1024


class Launch:
    """The user's launch callable: runs the variant, checks it against numpy, times it; raises
    KeyboardInterrupt at launch ``stop_at`` (a user pressing Ctrl-C mid-sweep)."""

    def __init__(self, stop_at: int | None = None):
        self.calls: list[str] = []
        self.stop_at = stop_at

    def __call__(self, r):
        if self.stop_at is not None and len(self.calls) == self.stop_at:
            raise KeyboardInterrupt
        scale, vec = (int(o.split("=")[1]) for o in r.options.effective.split())
        x = np.arange(N, dtype=np.float32)
        mf = cl.mem_flags
        xb = cl.Buffer(r.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
        yb = cl.Buffer(r.context, mf.WRITE_ONLY, x.nbytes)
        t = clmagic.time_kernel(r.kernels["scaled"], r.queue, N // vec, None, xb, yb, repeats=3)
        y = np.empty_like(x)
        cl.enqueue_copy(r.queue, y, yb)
        np.testing.assert_allclose(y, scale * x)
        self.calls.append(r.options.effective)
        return t


def test_variants_and_bad_parameters():
    vs = variants(PARAMS, "-cl-fast-relaxed-math")
    assert [v.options for v in vs][:2] == ["-cl-fast-relaxed-math -DSCALE=2 -DVEC=1",
                                          "-cl-fast-relaxed-math -DSCALE=2 -DVEC=2"]
    assert len(vs) == 6 and vs[5].label == "SCALE=4 VEC=2"
    with pytest.raises(OptionsError):
        variants({"1X": [1]})
    with pytest.raises(OptionsError):
        variants({"X": "12"})


def test_a_sweep_stopped_midway_resumes_where_it_stopped(compiler, pocl):
    first = Launch(stop_at=3)
    stopped = sweep_run(SRC, PARAMS, first, device=pocl, compiler=compiler, jobs=2)
    assert stopped.interrupted and len(first.calls) == 3
    by = {v.label: v for v in stopped.variants}
    failed = by["SCALE=3 VEC=1"]
    assert failed.outcome == "FAILED" and "SCALE 3 is not supported" in failed.error
    assert by["SCALE=3 VEC=2"].outcome == "FAILED"
    built = [v for v in stopped.variants if v.outcome != "FAILED"]
    assert {v.outcome for v in built} == {"MISS"} and len(built) == 4
    assert sum(v.median_us is not None for v in stopped.variants) == 3
    kept = json.loads(stopped.results.read_text())["rows"]
    assert len(kept) == 3  # the three timings: a failed build is tried again next time
    assert stopped.results.parent == results_folder(compiler)

    second = Launch()
    resumed = sweep_run(SRC, PARAMS, second, device=pocl, compiler=clmagic.Compiler(
        compiler.settings), jobs=2)
    assert not resumed.interrupted
    assert len(second.calls) == 1  # only the launch the first sweep did not make
    ok = [v for v in resumed.variants if v.outcome != "FAILED"]
    assert {v.outcome for v in ok} == {"HIT"}  # a new process's view: every build cached
    assert all(v.median_us is not None and v.median_us > 0 for v in ok)
    assert sum(v.resumed for v in ok) == 3
    assert resumed.best is not None and resumed.best_result is not None
    best = resumed.variants[resumed.best]
    assert best.median_us == min(v.median_us for v in ok)
    assert resumed.best_result.options.effective == best.options
    assert ok[0].facts is not None and ok[0].facts.name == "scaled"
    assert ok[0].facts.work_group_size == ok[0].facts.work_group_size  # the driver's figure


def test_the_frame_and_the_plot(compiler, pocl):
    done = sweep_run(SRC, {"SCALE": [2, 3], "VEC": [1]}, Launch(), device=pocl,
                     compiler=compiler, jobs=1)
    df = sweep_frame(done)
    assert list(df["SCALE"]) == [2, 3] and list(df["outcome"]) == ["MISS", "FAILED"]
    assert df.attrs["best"] == {"SCALE": 2, "VEC": 1} and df.attrs["kernel"] == "scaled"
    assert df["median_us"].notna().tolist() == [True, False]
    assert df["work_group_size"].iloc[0] == done.variants[0].facts.work_group_size
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    assert plot_sweep(df, ax=ax) is None  # nothing printed above the plot in a notebook
    assert len(ax.patches) == 1 and "1 failed" in ax.get_title()
    plt.close(fig)
    # the notebook's table: POCL gives no registers, so that column is left out and named; the
    # failed variant's error is cut to its start, in full in the tooltip; the best one starred
    page = df._repr_html_()
    assert "regs" not in page and "not reported by this driver: registers" in page
    assert "wg ≤" in page and "★ best: SCALE=2 VEC=1" in page
    error = df["error"].iloc[1]
    assert len(error) > 40 and f'title="{html.escape(error)}"' in page
    assert error not in page.replace(f'title="{html.escape(error)}"', "")
    assert type(df[df["outcome"] == "MISS"]).__name__ == "DataFrame"


def test_registers_asked_of_nvidia_only():
    assert with_register_report("-O2", "NVIDIA CUDA") == "-O2 -cl-nv-verbose"
    assert with_register_report("-cl-nv-verbose", "NVIDIA CUDA") == "-cl-nv-verbose"
    assert with_register_report("-O2", "Portable Computing Language") == "-O2"


# -- a variant is exactly its defines (issue 34.5) ------------------------------------------------


@pytest.mark.parametrize("name, value, says", [
    ("X", "1 -DEVIL", "holds a space"),  # an option pasted after a value
    ("X", "1\t-DEVIL", "holds a space"),
    ("X", "1\n-DEVIL", "line break"),
    ("X", "-DEVIL", "starts with '-'"),
    ("X", "-", "starts with '-'"),
    ("X", '"ab"', "quoting"),
    ("X", "'a'", "quoting"),
    ("X", "a\\b", "quoting"),
    ("X", "", "is empty"),
    ("X", "a;b", "holds ';'"),
    ("X", "#x", "holds '#'"),
    ("X", "é", "holds 'é'"),
    ("X", True, "is a bool"),
    ("X", np.bool_(False), "is a bool"),
    ("X", None, "is not a value"),
    ("X", b"1", "is not a value"),
    ("X", float("nan"), "not a finite number"),
    ("X", float("inf"), "not a finite number"),
    pytest.param("X", 10**5000, "beyond a 64-bit integer", id="int-of-5000-digits"),
    ("X", -(1 << 63) - 1, "beyond a 64-bit integer"),
    ("X=1", 1, "not a macro name"),
    ("-DX", 1, "not a macro name"),
    ("1X", 1, "not a macro name"),
    ("é", 1, "not a macro name"),
    ("X Y", 1, "not a macro name"),
])
def test_a_value_that_is_not_one_define_is_refused_in_one_line(name, value, says):
    with pytest.raises(OptionsError) as exc:
        variants({name: [value]})
    message = str(exc.value)
    assert says in message and "\n" not in message
    if isinstance(value, str) and value:
        assert repr(value)[:20] in message  # the bad value is named


def test_values_are_passed_as_written():
    vs = variants({"X": [1, -2, 1e-3, 1e-5, np.int64(7), np.float32(0.5), "0.5f", "(2*T)",
                         "-1.5", "a<b?a:b", "float4", "0x1F", (1 << 64) - 1]})
    assert [v.options for v in vs] == [
        "-DX=1", "-DX=-2", "-DX=0.001", "-DX=1e-05", "-DX=7", "-DX=0.5", "-DX=0.5f",
        "-DX=(2*T)", "-DX=-1.5", "-DX=a<b?a:b", "-DX=float4", "-DX=0x1F",
        "-DX=18446744073709551615"]
    assert vs[2].label == "X=0.001"  # the label is what the driver gets
    with pytest.raises(OptionsError, match="given twice"):
        variants({"X": [1, "1"]})  # one define, two variants
    with pytest.raises(OptionsError, match="list of values"):
        variants({"X": []})


@given(st.one_of(st.text(), st.integers(), st.floats(), st.booleans(), st.none(),
                 st.text(alphabet="0123456789abcXYZ_.+-*/()<>=!? \t\n'\"\\#;,")))
def test_any_value_is_one_define_or_one_line(value):
    """Whatever a value holds: refused in one line, or the driver receives exactly one option
    ``-DX=<its text>`` (the options as clmagic splits them, as the driver does)."""
    try:
        variant, = variants({"X": [value]}, "-O2")
    except OptionsError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("sweep parameter X: ")
        return
    text = variant.options.removeprefix("-O2 -DX=")
    assert parse_options(variant.options).tokens == ("-DX=" + text,)  # (-O2 is mapped away)
    assert variant.label == f"X={text}" and text == str(value) and text.strip() == text


VALUE_SRC = """\
#ifdef EVIL
#error "EVIL is defined"
#endif
__kernel void value(__global float *y) { y[0] = (float)(X); }
"""


def test_the_driver_receives_each_value_exactly(compiler, pocl):
    """Each accepted value is one define the driver reads as written (what the kernel computes
    from it says so), and a value with an option pasted in never reaches the driver."""
    def read(r):
        y = np.zeros(1, np.float32)
        yb = cl.Buffer(r.context, cl.mem_flags.WRITE_ONLY, y.nbytes)
        r.kernels["value"](r.queue, (1,), None, yb)
        cl.enqueue_copy(r.queue, y, yb)
        seen[r.options.effective] = float(y[0])
        return 1.0

    seen: dict[str, float] = {}
    values = [3, -2, 1e-3, "(2*3)", "-1.5f", "4>3?7:9"]
    done = sweep_run(VALUE_SRC, {"X": values}, read, device=pocl, compiler=compiler, jobs=1)
    assert [v.error for v in done.variants] == [""] * len(values)
    assert [seen[v.options] for v in done.variants] == pytest.approx(
        [3, -2, 1e-3, 6, -1.5, 7], rel=1e-6)
    with pytest.raises(OptionsError, match="holds a space"):
        sweep_run(VALUE_SRC, {"X": ["1 -DEVIL"]}, read, device=pocl, compiler=compiler)
    assert len(seen) == len(values)  # nothing built for the refused sweep


def test_the_magic_refuses_a_pasted_option_in_one_line(shell, pocl, capsys):
    shell.user_ns["launch"] = lambda r: 1.0
    for line in (f'--device {pocl} --sweep "X=1 -DEVIL" --run launch',
                 f"--device {pocl} --sweep X=1,-DEVIL --run launch"):
        with pytest.raises(OptionsError) as exc:
            shell.run_cell_magic("clkernel", line, VALUE_SRC)
        assert "sweep parameter X:" in str(exc.value) and "\n" not in str(exc.value)
        assert "sweep:" not in capsys.readouterr().err  # refused before a progress bar
    with pytest.raises(OptionsError, match="--fresh goes with --sweep"):
        shell.run_cell_magic("clkernel", f"--device {pocl} --fresh", VALUE_SRC)


# -- a failed launch is never kept; outcomes are this run's (issue 35.1) ------------------------


def test_a_failed_launch_is_tried_again_and_outcomes_are_this_runs(compiler, pocl):
    params = {"SCALE": [2, 4], "VEC": [1]}

    def broken(r):
        return clmagic.time_kernel(r.kernels["scaled"], r.queue, N)  # forgot the arguments

    first = sweep_run(SRC, params, broken, device=pocl, compiler=compiler, jobs=2)
    assert [v.error[:18] for v in first.variants] == ["run failed: TypeEr"] * 2
    assert first.best is None and first.best_result is None
    assert {v.outcome for v in first.variants} == {"MISS"}
    assert not (first.results.exists() and json.loads(first.results.read_text())["rows"])

    fixed = Launch()  # the function fixed, the same cell run again (a restarted kernel)
    again = sweep_run(SRC, params, fixed, device=pocl, compiler=clmagic.Compiler(
        compiler.settings), jobs=2)
    assert len(fixed.calls) == 2 and not any(v.resumed for v in again.variants)
    assert [v.error for v in again.variants] == ["", ""]
    assert {v.outcome for v in again.variants} == {"HIT"}  # the builds were cached
    assert again.best is not None and again.best_result is not None  # something to bind

    kept = Launch()  # once more: the timings are kept now, nothing launched
    third = sweep_run(SRC, params, kept, device=pocl, compiler=compiler, jobs=2)
    assert kept.calls == [] and all(v.resumed for v in third.variants)
    assert {v.outcome for v in third.variants} <= {"HIT", "MEMORY"}  # not the kept row's MISS

    fresh = Launch()  # fresh: the kept timings ignored, every variant timed again
    fourth = sweep_run(SRC, params, fresh, device=pocl, compiler=compiler, jobs=2, fresh=True)
    assert len(fresh.calls) == 2 and not any(v.resumed for v in fourth.variants)


def test_a_failed_row_an_earlier_version_kept_is_timed_again(compiler, pocl):
    """A results file written before failed launches stopped being kept (its row says "run
    failed", no timing): the variant is launched again, not reported failed from the file."""
    params = {"SCALE": [2], "VEC": [1]}
    done = sweep_run(SRC, params, Launch(), device=pocl, compiler=compiler, jobs=1)
    doc = json.loads(done.results.read_text())
    (row,) = doc["rows"].values()
    row.update(error="run failed: TypeError: set_args() missing 1 required positional argument",
               median_us=None, min_us=None, spread_us=None, outcome="MISS")
    done.results.write_text(json.dumps(doc))
    fixed = Launch()
    again = sweep_run(SRC, params, fixed, device=pocl, compiler=compiler, jobs=1)
    (v,) = again.variants
    assert len(fixed.calls) == 1 and v.error == "" and not v.resumed and v.median_us > 0
    assert v.outcome == "MEMORY" and again.best_result is not None  # this run's outcome


@pytest.mark.parametrize("got", [float("nan"), float("inf"), "fast", None, True])
def test_a_launch_that_returns_no_time_is_a_failed_launch(compiler, pocl, got):
    done = sweep_run(SRC, {"SCALE": [2], "VEC": [1]}, lambda r: got, device=pocl,
                     compiler=compiler, jobs=1)
    (v,) = done.variants
    assert v.error.startswith("run returned") and v.median_us is None and done.best is None
    assert not done.results.exists()  # nothing kept: the next run launches it again


def test_the_magic_re_runs_a_fixed_launch_and_fresh_times_again(shell, pocl, capsys):
    cell = f"--device {pocl} --sweep SCALE=2,4 --sweep VEC=1 --run launch"
    shell.user_ns["launch"] = lambda r: clmagic.time_kernel(r.kernels["scaled"], r.queue, N)
    df = shell.run_cell_magic("clkernel", cell, SRC)
    assert df["error"].str.startswith("run failed: TypeError").all()
    assert "scaled" not in shell.user_ns  # nothing bound, and the cell says so
    assert "no variant was timed, nothing bound" in capsys.readouterr().out
    shell.user_ns["launch"] = Launch()
    df = shell.run_cell_magic("clkernel", cell, SRC)
    assert (df["error"] == "").all() and not df["resumed"].any()
    assert isinstance(shell.user_ns["scaled"], cl.Kernel)  # the best one bound
    df = shell.run_cell_magic("clkernel", cell, SRC)
    assert df["resumed"].all() and len(shell.user_ns["launch"].calls) == 2
    df = shell.run_cell_magic("clkernel", cell + " --fresh", SRC)
    assert not df["resumed"].any() and len(shell.user_ns["launch"].calls) == 4


# -- a sweep's own builds are not cache hits (issue 35.2) -----------------------------------------


def _counts(compiler):
    s = clmagic.stats(compiler)
    return s.session, s.lifetime, sum(d.hits for d in s.devices)


def test_a_first_sweep_counts_no_hits_and_a_second_counts_each_once(settings, pocl):
    params = {"SCALE": [2, 4], "VEC": [1, 2]}  # four variants, all built
    first = clmagic.Compiler(settings)
    sweep_run(SRC, params, Launch(), device=pocl, compiler=first, jobs=2)
    session, lifetime, entry_hits = _counts(first)
    assert session["HIT"] == 0 and session.saved_ms == 0 and session["MISS"] == 4
    assert session.hit_rate == 0
    assert lifetime["HIT"] == 0 and lifetime["MISS"] == 4 and lifetime.saved_ms == 0
    assert entry_hits == 0
    # the cache panel reads the same as stats() (and %clcache stats, which is stats()): no
    # hit, nothing saved, in this session and in the lifetime
    status = clmagic.CacheWidget(first, plot=False).status.value
    assert "session on it: hit rate <b>0%</b>, <b>0 ms</b> saved" in status
    assert "lifetime on" in status and "rate <b>0%</b>, <b>0 ms</b> saved" in status

    # the same sweep in a new process, its kept timings ignored: its workers find every
    # build in the store; each is one HIT, in the session, the lifetime and the entries
    second = clmagic.Compiler(settings)
    done = sweep_run(SRC, params, None, device=pocl, compiler=second, jobs=2, fresh=True)
    assert {v.outcome for v in done.variants} == {"HIT"}
    session, lifetime, entry_hits = _counts(second)
    assert session["HIT"] == 4 and session["MISS"] == 0 and session.hit_rate == 1
    assert lifetime["HIT"] == 4 and lifetime["MISS"] == 4 and entry_hits == 4
    notes = {r.note for r in second.history.records}
    assert notes == {"found by a sweep worker"}

    # and timed again in a new process with its timings kept: no workers, this process's HITs
    third = clmagic.Compiler(settings)
    sweep_run(SRC, params, Launch(), device=pocl, compiler=third, jobs=2)
    session, lifetime, entry_hits = _counts(third)
    assert session["HIT"] == 4 and lifetime["HIT"] == 8 and entry_hits == 8


# -- line numbers as a plain build's; each worker's driver warmed up (issue 35.5) -----------------


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_sweeps_build_error_has_the_cells_line_numbers(shell, compiler, pocl, jobs):
    done = sweep_run(SRC, {"SCALE": [3], "VEC": [1, 2]}, None, device=pocl, compiler=compiler,
                     jobs=jobs, line_offset=1)
    cell = shell.run_cell(f"%%clkernel --device {pocl} --opts -DSCALE=3 -DVEC=1\n{SRC}")
    plain = cell.error_in_exec.log
    assert "line 3:2" in plain  # the %%clkernel line is line 1, the #error line 3
    assert all("line 3:2:" in v.error for v in done.variants), [v.error for v in done.variants]
    df = shell.run_cell_magic("clkernel", f"--device {pocl} --sweep SCALE=3 --sweep VEC=1", SRC)
    assert "line 3:2:" in df["error"].iloc[0]


def test_each_worker_warms_its_driver_before_its_first_build(compiler, pocl):
    done = sweep_run(SRC, {"SCALE": [2, 4, 5], "VEC": [1, 2]}, None, device=pocl,
                     compiler=compiler, jobs=2)
    assert {v.outcome for v in done.variants} == {"MISS"}
    # one warm-up per worker that built (two workers; the pool may hand all to one), timed
    # apart from every variant's build time
    assert 1 <= len(done.warm_up_ms) <= 2 and all(ms > 0 for ms in done.warm_up_ms)
    df = sweep_frame(done)
    assert df.attrs["warm_up_ms"] == done.warm_up_ms
    assert "the driver set up before the first build" in df._repr_html_()
    again = sweep_run(SRC, {"SCALE": [2, 4, 5], "VEC": [1, 2]}, None, device=pocl,
                      compiler=clmagic.Compiler(compiler.settings), jobs=2, fresh=True)
    assert {v.outcome for v in again.variants} == {"HIT"}
    assert again.warm_up_ms == []  # the workers found every build: nothing compiled
    assert "set up before" not in sweep_frame(again)._repr_html_()


def test_this_process_warms_its_driver_once_and_not_for_a_hit(compiler, pocl, monkeypatch):
    monkeypatch.setattr(warm_module, "_warmed", set())  # as a new process
    assert compiler.build(SRC, "-DSCALE=2 -DVEC=1", pocl).saved
    assert warm_up(compiler, SRC, "-DSCALE=2 -DVEC=1", pocl) == 0.0  # a HIT compiles nothing
    here = sweep_run(SRC, {"SCALE": [6, 7], "VEC": [1]}, None, device=pocl, compiler=compiler,
                     jobs=1)  # built in this process, which warms its driver first, once
    assert {v.outcome for v in here.variants} == {"MISS"}
    assert len(here.warm_up_ms) == 1 and here.warm_up_ms[0] > 0
    assert warm_up(compiler, SRC, "-DSCALE=8 -DVEC=1", pocl) == 0.0  # once per process
