"""A working folder removed under the process (``os.rmdir`` of the current folder): it holds no
files, so the search finds none there, the drivers neither; builds go on, keyed as such, and a
source that includes a header from it fails with the driver's own error, one clear line."""

from __future__ import annotations

import os

import pytest
from conftest import kernel_value, outcome_line, run

from clmagic.errors import BuildError
from clmagic.key.includes import find_headers, working_folder

PLAIN = "__kernel void k(__global int *a) { a[0] = 3; }\n"
INCLUDES = '#include "x.h"\n__kernel void k(__global int *a) { a[0] = X; }\n'


@pytest.fixture
def removed(tmp_path, monkeypatch):
    """The current folder, removed (the test's folder is restored afterwards)."""
    here = tmp_path / "here"
    here.mkdir()
    (here / "x.h").write_text("#define X 4\n")
    monkeypatch.chdir(here)
    (here / "x.h").unlink()
    os.rmdir(here)
    return here


def test_the_search_finds_nothing_in_a_removed_folder(removed):
    assert working_folder() == ""
    found = find_headers(INCLUDES, options="-I inc -I .")
    assert list(found) == []


def test_builds_in_a_removed_folder(removed, compiler):
    r = compiler.build(PLAIN)
    assert kernel_value(r) == 3 and r.outcome == "MISS"
    assert compiler.build(PLAIN).outcome == "MEMORY"
    with pytest.raises(BuildError) as err:
        compiler.build(INCLUDES)
    assert "x.h" in err.value.log


def test_the_magic_in_a_removed_folder(shell, removed):
    _result, cap = run(shell, "", PLAIN)
    assert outcome_line(cap).startswith("MISS"), cap.stdout
    result, cap = run(shell, "", INCLUDES)
    assert "Traceback" not in cap.stdout + cap.stderr
    assert "FileNotFoundError" not in cap.stdout + cap.stderr
    assert "x.h" in cap.stdout + cap.stderr + "".join(
        o.data.get("text/plain", "") for o in cap.outputs)
