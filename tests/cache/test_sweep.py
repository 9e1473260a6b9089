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

import clmagic
from clmagic.cache.sweep import results_folder, sweep_run, variants, with_register_report
from clmagic.errors import OptionsError
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
    assert len(kept) == 5  # three timings, two failures
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
    ax = plot_sweep(df)
    assert len(ax.patches) == 1 and "1 failed" in ax.get_title()
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
