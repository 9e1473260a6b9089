"""The magics' tuning parts in a real IPython shell on POCL: %%clkernel --sweep/--run (the best
variant's kernels bound, the DataFrame as the cell's value), --show ptx (what POCL's binary is),
%cltime (a launch timed, checked by its result), %clcache kernels (the stored facts), and the
kernel facts folded under the result line."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest

import clmagic
from clmagic.errors import OptionsError
from clmagic.show.line import result_html

SRC = """\
__kernel void scaled(__global const float *x, __global float *y)
{ y[get_global_id(0)] = SCALE * x[get_global_id(0)]; }
"""
N = 256


def _launch(r):
    x = np.arange(N, dtype=np.float32)
    mf = cl.mem_flags
    xb = cl.Buffer(r.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    yb = cl.Buffer(r.context, mf.WRITE_ONLY, x.nbytes)
    t = clmagic.time_kernel(r.kernels["scaled"], r.queue, N, None, xb, yb, repeats=2)
    y = np.empty_like(x)
    cl.enqueue_copy(r.queue, y, yb)
    scale = int(r.options.effective.split("=")[1])
    np.testing.assert_allclose(y, scale * x)
    return t


def test_a_sweep_cell_binds_the_best_variant(shell, compiler, pocl, capsys):
    shell.user_ns["launch"] = _launch
    df = shell.run_cell_magic("clkernel", f"--device {pocl} --sweep SCALE=2,3 --run launch", SRC)
    assert list(df["SCALE"]) == ["2", "3"] and df["median_us"].notna().all()
    assert isinstance(shell.user_ns["scaled"], cl.Kernel)
    best = compiler.build(SRC, df.attrs["best_options"], pocl)
    assert best.outcome == "MEMORY" and shell.user_ns["scaled"] is best.kernels["scaled"]
    assert "best: -DSCALE=" in capsys.readouterr().out
    with pytest.raises(OptionsError):
        shell.run_cell_magic("clkernel", "--sweep SCALE", SRC)
    with pytest.raises(OptionsError):
        shell.run_cell_magic("clkernel", "--sweep SCALE=1 --run nothing_here", SRC)


def test_show_ptx_says_what_pocl_keeps_and_the_facts_fold(shell, compiler, pocl):
    shell.run_cell_magic("clkernel", f"--device {pocl} --show ptx --opts -DSCALE=2", SRC)
    r = compiler.build(SRC, "-DSCALE=2", pocl)
    assert r.ptx is None and "poclbin" in r.code.note
    html = result_html(r)
    assert 'class="clmagic-facts"' in html and "scaled · wg ≤ " in html


def test_cltime_times_a_launch(shell, pocl):
    shell.run_cell_magic("clkernel", f"--device {pocl} --opts -DSCALE=4", SRC)
    ctx = shell.user_ns["cl_ctx"]
    x = np.ones(N, np.float32)
    mf = cl.mem_flags
    shell.user_ns.update(xb=cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x),
                         yb=cl.Buffer(ctx, mf.WRITE_ONLY, x.nbytes), N=N)
    t = shell.run_line_magic("cltime", "-r 3 scaled(cl_queue, (N,), None, xb, yb)")
    assert isinstance(t, clmagic.Timing) and t.repeats == 3 and t.min_us <= t.median_us
    y = np.empty_like(x)
    cl.enqueue_copy(shell.user_ns["cl_queue"], y, shell.user_ns["yb"])
    assert (y == 4).all()
    with pytest.raises(OptionsError):
        shell.run_line_magic("cltime", "scaled")


def test_clcache_kernels_lists_the_stored_facts(shell, compiler, pocl):
    r = shell.run_cell_magic("clkernel", f"--device {pocl} --opts -DSCALE=5", SRC)
    assert r is None
    compiler.flush()
    df = shell.run_line_magic("clcache", "kernels")
    row = df[df["options"] == "-DSCALE=5"].iloc[0]
    assert row["kernel"] == "scaled" and row["work_group_size"] > 0
    assert row["registers"] is pd_na()


def pd_na():
    import pandas as pd

    return pd.NA


@pytest.mark.parametrize(("line", "said"), [
    ("scaled(cl_queue, (N,), (7,), xb, yb)", "local size (7,) does not go with global size"),
    ("scaled(cl_queue, (N,), None, xb)", "scaled takes 2 arguments, 1 given"),
    ("-r 0 scaled(cl_queue, (N,), None, xb, yb)", "need at least one launch"),
    ("scaled(cl_queue, (N,), None, xb, nothere)", "nothere: NameError"),
    ("scaled(cl_queue, (N, N, N, N), None, xb, yb)", "1 to 3 dimensions"),
    ("scaled(cl_queue, (N,), (16, 16), xb, yb)", "has 2 dimensions, the global size"),
    ("scaled(cl_queue, (2.5,), None, xb, yb)", "give a whole number"),
    ("scaled(cl_queue, (N,), None, xb, np.float32(1))", "argument 2 does not fit"),
    ("cl_queue(cl_queue, (N,), None, xb, yb)", "is not a kernel"),
    ("scaled", "usage: %cltime"),
])
def test_a_bad_cltime_line_is_one_line(shell, pocl, line, said):
    """A launch %cltime cannot make is one line saying what to change, never a traceback
    through clmagic's code; the launch it can make afterwards is timed."""
    from IPython.utils.capture import capture_output

    shell.run_cell_magic("clkernel", f"--device {pocl} --opts -DSCALE=2", SRC)
    ctx = shell.user_ns["cl_ctx"]
    x = np.ones(N, np.float32)
    mf = cl.mem_flags
    shell.user_ns.update(xb=cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x),
                         yb=cl.Buffer(ctx, mf.WRITE_ONLY, x.nbytes), N=N, np=np)
    with capture_output() as cap:
        res = shell.run_cell(f"%cltime {line}")
    assert isinstance(res.error_in_exec, OptionsError)
    shown = [ln for ln in (cap.stdout + cap.stderr).splitlines() if ln.strip()]
    assert len(shown) == 1 and said in shown[0], shown
    assert shell.run_line_magic("cltime", "-r 1 scaled(cl_queue, (N,), None, xb, yb)").repeats == 1
