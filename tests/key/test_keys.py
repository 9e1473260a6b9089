"""Correct keys: included headers (found the way compilers find them) and the options exactly
as the driver receives them."""

from __future__ import annotations

import os

import pyopencl as cl
import pytest
from conftest import kernel_value

from clmagic import Compiler, Outcome
from clmagic.key.includes import find_headers, includes_of

MAIN = '#include "params.h"\n__kernel void k(__global int *a) { a[get_global_id(0)] = VAL; }\n'


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A cell's working directory with a header, and an include folder."""
    work = tmp_path / "work"
    (work / "inc" / "sub").mkdir(parents=True)
    (work / "params.h").write_text('#include "common.h"\n#define VAL (BASE + 1)\n')
    (work / "inc" / "common.h").write_text('#include "sub/deep.h"\n#define BASE 41\n')
    (work / "inc" / "sub" / "deep.h").write_text("#define DEEP 1\n")
    monkeypatch.chdir(work)
    return work


def test_headers_are_found_recursively_in_order(project):
    found = find_headers(MAIN, ["inc"], str(project))
    assert [name for name, _ in found] == ['"params.h" @.', '"common.h" @-Iinc',
                                           '"sub/deep.h" @.']
    assert found[1][1] == (project / "inc" / "common.h").read_bytes()


def test_includes_in_comments_are_covered_too_and_cycles_end(project):
    """A superset costs at most a MISS: names in comments are covered after the real ones."""
    text = ('// #include "a.h"\n/* #include "b.h"\n#include "c.h" */\n'
            '  #  include <d.h>\nconst char *s = "/* not a comment */";\n#include "e.h"\n')
    assert includes_of(text) == ["<d.h>", '"e.h"', '"a.h"', '"b.h"', '"c.h"']
    (project / "a.h").write_text('#include "b.h"\n')
    (project / "b.h").write_text('#include "a.h"\n#include "a.h"\n')
    assert [n for n, _ in find_headers('#include "a.h"\n', [], str(project))] == [
        '"a.h" @.', '"b.h" @.']


def test_a_missing_header_is_left_to_the_compiler(project, compiler):
    assert find_headers('#include "nowhere.h"\n', ["inc"], str(project)) == []
    with pytest.raises(Exception) as info:
        compiler.build('#include "nowhere.h"\n' + MAIN, "-Iinc")
    assert "nowhere.h" in getattr(info.value, "log", str(info.value))


def test_editing_a_header_misses_touching_it_hits(project, compiler, settings):
    first = compiler.build(MAIN, "-Iinc")
    assert first.outcome == Outcome.MISS and kernel_value(first) == 42
    deep = project / "inc" / "common.h"
    st = deep.stat()
    os.utime(deep, ns=(st.st_atime_ns + 10**9, st.st_mtime_ns + 10**9))  # touch, same bytes
    fresh = Compiler(settings)
    same = fresh.build(MAIN, "-Iinc")
    assert same.outcome == Outcome.HIT and same.key == first.key
    deep.write_text('#include "sub/deep.h"\n#define BASE 99\n')
    edited = fresh.build(MAIN, "-Iinc")
    assert edited.outcome == Outcome.MISS and edited.key != first.key
    assert kernel_value(edited) == 100
    (project / "inc" / "sub" / "deep.h").write_text("#define DEEP 2\n")  # two levels down
    assert fresh.build(MAIN, "-Iinc").outcome == Outcome.MISS


def test_relative_include_folders_follow_the_working_directory(tmp_path, monkeypatch,
                                                                compiler):
    """``-Iinc`` is resolved by the driver against the working directory: two folders with
    different ``inc/params.h`` give different keys and different results."""
    keys, values = [], []
    for n in (1, 2):
        work = tmp_path / f"w{n}"
        (work / "inc").mkdir(parents=True)
        (work / "inc" / "params.h").write_text(f"#define VAL {n}\n")
        monkeypatch.chdir(work)
        r = compiler.build(MAIN.replace('"params.h"', "<params.h>"), "-Iinc")
        keys.append(r.key)
        values.append(kernel_value(r))
    assert keys[0] != keys[1] and values == [1, 2]


@pytest.mark.parametrize(
    "a, b, same",
    [("-D N=4", "-DN=4", True), ("-cl-mad-enable  -DN=4", " -cl-mad-enable -DN=4", True),
     ("-I /tmp", "-I/tmp", True), ("-O3 -DN=4", "-DN=4", True),
     ("-DN=4 -DM=1", "-DM=1 -DN=4", False), ("-DN=4", "-DN=04", False),
     ("-DN=4", "-DN", False)],
)
def test_key_follows_the_driver_input_exactly(compiler, a, b, same):
    """What the driver reports it received (CL_PROGRAM_BUILD_OPTIONS) decides the key."""
    src = "__kernel void k(__global int *a) { a[0] = 1; }\n"
    ra, rb = compiler.build(src, a), compiler.build(src, b)
    got = [r.program.get_build_info(r.context.devices[0], cl.program_build_info.OPTIONS)
           for r in (ra, rb)]
    assert got[0].strip() == ra.options.effective and got[1].strip() == rb.options.effective
    assert (ra.key == rb.key) is same is (got[0] == got[1])
