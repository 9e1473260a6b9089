"""clmagic.check_kernel on real drivers: kernels built on POCL, each launch checked under the
real Oclgrind in the checker's child process (its checks switched on there), its log read
back into findings. Nothing here is mocked: each test's bug is one Oclgrind must find."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest

import clmagic
from clmagic.cache.checker.run import check_kernel
from clmagic.errors import OptionsError
from clmagic.show.check import check_frame, check_text

SRC = """\
__kernel void oob(__global const float *x, __global float *y)
{
    int i = get_global_id(0);
    y[i + 1] = 2.0f * x[i];
}

__kernel void fixed(__global const float *x, __global float *y)
{
    int i = get_global_id(0);
    y[i] = 2.0f * x[i];
}

__kernel void count(__global int *c)
{
    c[0] = c[0] + 1;
}

__kernel void count_atomic(__global int *c)
{
    atomic_inc(c);
}

__kernel void stale(__global float *y, __local float *t)
{
    int i = get_local_id(0);
    y[get_global_id(0)] = t[i];
}

__kernel void before(__global const int *a, __global int *b, const int shift)
{
    int i = get_global_id(0);
    b[i] = a[i - shift];
}

__kernel void spin(__global int *a)
{
    while (a[0] >= 0)
        a[1] = a[1] + 1;
}

__kernel void shared(__global int *out, __local int *scratch, __local float *unused)
{
    __local int total[1];
    int i = get_local_id(0);
    scratch[i] = i;
    total[0] = total[0] + i;
    out[get_global_id(0)] = scratch[(i + 1) % get_local_size(0)] + total[0];
}
"""
N = 64


@pytest.fixture
def built(compiler, pocl):
    return compiler.build(SRC, device=pocl, line_offset=1)


def _buffers(r, *arrays):
    mf = cl.mem_flags
    return [cl.Buffer(r.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=a) for a in arrays]


def _read(r, buf, like):
    out = np.empty_like(like)
    cl.enqueue_copy(r.queue, out, buf)
    return out


def _check(r, name, *args, compiler, **kw):
    return check_kernel(r.kernels[name], r.queue, (N,), (16,), *args, compiler=compiler,
                        note=None, **kw)


def test_an_off_by_one_write_is_found_at_its_line_and_element(built, compiler):
    x, y = _buffers(built, np.arange(N, dtype=np.float32), np.zeros(N, np.float32))
    report = _check(built, "oob", x, y, compiler=compiler)
    assert report.summary == "1 problem: 1 invalid write"
    (f,) = report.findings
    assert f.what == "invalid write of 4 bytes past the end of argument `y` (index 64 of 64)"
    assert f.who == "work-item 63 (group 3)" and f.argument == "y"
    # the cell's line (the source's 4th, under the magic's line), the store's column: its "="
    assert (f.line, f.column) == (5, 14)
    text = check_text(report)
    assert "line 5:14: invalid write" in text and "   5 |     y[i + 1] = 2.0f * x[i];" in text
    assert "     | " + " " * 13 + "^" in text


def test_the_fixed_kernel_is_clean_and_says_so_in_one_line(built, compiler):
    x, y = _buffers(built, np.arange(N, dtype=np.float32), np.zeros(N, np.float32))
    report = _check(built, "fixed", x, y, compiler=compiler)
    assert report.clean and report.findings == ()
    assert check_text(report) == "CLEAN   fixed: no problems found in 64 work-items"
    assert check_frame(report).empty


def test_a_racy_counter_is_one_data_race_however_often_oclgrind_says_it(built, compiler):
    (c,) = _buffers(built, np.zeros(1, np.int32))
    report = _check(built, "count", c, compiler=compiler)
    assert report.summary == "1 problem: 1 data race"
    (f,) = report.findings
    assert f.what == "data race on argument `c` (index 0 of 1)" and f.line == 16
    assert f.times > 1 and f.who.startswith("work-items ")
    frame = check_frame(report)
    assert list(frame["kind"]) == ["data race"] and frame.attrs["summary"] == report.summary
    assert _check(built, "count_atomic", c, compiler=compiler).clean


def test_an_uninitialised_local_read_is_found(built, compiler):
    (y,) = _buffers(built, np.zeros(N, np.float32))
    report = _check(built, "stale", y, cl.LocalMemory(16 * 4), compiler=compiler)
    assert [f.kind for f in report.findings] == ["uninitialised value"]
    assert report.findings[0].line == 27
    assert report.findings[0].what.startswith("uninitialised value written to argument `y`")


def test_a_negative_index_is_before_the_start_and_a_scalar_is_passed_as_given(built, compiler):
    a, b = _buffers(built, np.arange(N, dtype=np.int32), np.zeros(N, np.int32))
    report = _check(built, "before", a, b, np.int32(2), compiler=compiler)
    # Oclgrind also says the stray read's value is stored uninitialised: the read's doing
    assert report.summary == "1 problem: 1 invalid read"
    (f,) = report.findings
    assert f.what == "invalid read of 4 bytes before the start of argument `a` (index -2 of 64)"
    assert f.times == 2 and f.who == "work-item 0 (group 0)" and f.line == 33
    assert _check(built, "before", a, b, 0, compiler=compiler).clean  # a number, typed int


def test_the_users_buffers_are_not_changed_and_the_oclgrind_build_is_cached(built, compiler):
    x0, y0 = np.arange(N, dtype=np.float32), np.full(N, 7.0, np.float32)
    x, y = _buffers(built, x0, y0)
    first = _check(built, "fixed", x, y, compiler=compiler)
    again = _check(built, "fixed", x, y, compiler=compiler)
    assert (_read(built, x, x0) == x0).all() and (_read(built, y, y0) == y0).all()
    assert first.built == "MISS" and again.built == "HIT"


def test_a_launch_that_runs_away_is_stopped_and_says_so_in_one_line(built, compiler):
    (a,) = _buffers(built, np.zeros(2, np.int32))
    report = check_kernel(built.kernels["spin"], built.queue, (1,), None, a,
                          compiler=compiler, note=None, timeout=8)
    assert report.timed_out and not report.clean
    assert report.summary.startswith("stopped after 8 s: the launch of 1 work-item did not "
                                     "finish under Oclgrind (the checker was killed)")
    assert "\n" not in report.summary


@pytest.mark.parametrize("what, make", [
    ("a cl.Image", lambda r: cl.image_from_array(r.context, np.zeros((4, 4), np.float32))),
    ("a sub-buffer", lambda r: _buffers(r, np.zeros(4096, np.uint8))[0][1024:2048]),
    ("a str", lambda r: "seven"),
])
def test_an_argument_it_cannot_copy_is_one_clear_line(built, compiler, what, make):
    with pytest.raises(OptionsError) as err:
        _check(built, "fixed", make(built), _buffers(built, np.zeros(N, np.float32))[0],
               compiler=compiler)
    assert str(err.value).startswith(f"argument 0 is {what}: %clcheck copies buffers")
    assert "images, samplers, pipes, SVM pointers and sub-buffers are not supported" in \
        str(err.value) and "\n" not in str(err.value)


def test_a_kernel_clmagic_did_not_build_from_a_source_it_knows_is_refused(pocl, compiler):
    r = compiler.build(SRC, device=pocl)
    prg = cl.Program(r.context, [r.queue.device], [r.program.get_info(
        cl.program_info.BINARIES)[0]]).build()
    (c,) = _buffers(r, np.zeros(1, np.int32))
    with pytest.raises(OptionsError, match="clmagic does not know the source of kernel 'count'"):
        check_kernel(cl.Kernel(prg, "count"), r.queue, (N,), None, c, compiler=compiler)


def test_the_public_name_and_a_wrong_argument_count(built, compiler):
    assert clmagic.check_kernel is check_kernel
    with pytest.raises(OptionsError, match="fixed takes 2 arguments, 1 given"):
        _check(built, "fixed", None, compiler=compiler)


def test_local_memory_is_named_by_its_argument_and_a_local_array_as_the_kernels(built, compiler):
    (out,) = _buffers(built, np.zeros(N, np.int32))
    report = _check(built, "shared", out, cl.LocalMemory(16 * 4), cl.LocalMemory(8),
                    compiler=compiler)
    races = [f for f in report.findings if f.kind == "data race"]
    assert [f.what for f in races] == ["data race on a __local array of the kernel (byte 0)",
                                       "data race on argument `scratch` (index 1 of 16)"]
    assert (races[0].line, races[0].argument) == (47, None)
    assert races[1].line == 46 and races[1].other_line == 48 and races[1].argument == "scratch"
    # the races come first: what they leave uninitialised after them
    assert [f.kind for f in report.findings][:2] == ["data race", "data race"]


def test_a_long_launch_is_announced_before_it_starts(built, compiler):
    (c,) = _buffers(built, np.zeros(1, np.int32))
    said: list[str] = []
    report = check_kernel(built.kernels["count_atomic"], built.queue, (1 << 16,), (64,), c,
                          compiler=compiler, note=said.append)
    assert report.clean
    assert said == ["checking count_atomic over 65536 work-items under Oclgrind, an "
                    "interpreter: about 1 s or more (stopped after 60 s)"]


def test_a_kernel_of_a_program_built_from_source_elsewhere_is_checked_from_the_drivers_text(
        built, compiler):
    prg = cl.Program(built.context, SRC).build()  # pyopencl's own build, not clmagic's
    x, y = _buffers(built, np.arange(N, dtype=np.float32), np.zeros(N, np.float32))
    report = check_kernel(cl.Kernel(prg, "oob"), built.queue, (N,), (16,), x, y,
                          compiler=compiler, note=None)
    (f,) = report.findings
    assert f.line == 4 and "past the end of argument `y`" in f.what  # the source's own line


def test_a_flood_of_messages_says_that_oclgrind_stopped_reporting(built, compiler):
    (c,) = _buffers(built, np.zeros(1, np.int32))
    report = check_kernel(built.kernels["count"], built.queue, (1024,), (256,), c,
                          compiler=compiler, note=None)
    assert report.capped and report.summary == ("1 problem: 1 data race (Oclgrind stopped "
                                                 "reporting: more may be hidden)")
