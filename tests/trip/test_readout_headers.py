"""On POCL a MISS's binary is read out by a helper process that builds the same text again
(clmagic/opencl/readout.py), sources that include headers too: the helper builds in the user's
working folder, and its binary is saved only while the include search finds exactly what the
key covered; a header changed while the helper built, a clock or a file name in a header, or a
header too new to trust keeps the helper out (or the entry unsaved)."""

from __future__ import annotations

import time

import pytest
from conftest import kernel_value

import clmagic
from clmagic.key import stamps
from clmagic.key.clock import rebuilt_alike
from clmagic.key.includes import find_headers
from clmagic.opencl import readout
from clmagic.outcome import Outcome

KERNEL = '#include "v.h"\n__kernel void k(__global int *a) { a[0] = V; }\n'
YOUNG_S = 0.05  # files count as too new to trust for this long (2 s outside the tests)


@pytest.fixture(autouse=True)
def young(monkeypatch):
    monkeypatch.setattr(stamps, "TOO_NEW_NS", int(YOUNG_S * 1e9))


@pytest.fixture
def asked(monkeypatch):
    """The jobs sent to the helper (the sources), the helper on (the default)."""
    monkeypatch.delenv("CLMAGIC_READOUT_HELPER", raising=False)
    jobs: list[tuple[str, str | None]] = []
    inner = readout.read_out

    def spy(fingerprint, source, options, build_ms=0.0, cwd=None, idle=False):
        jobs.append((source, cwd))
        return inner(fingerprint, source, options, build_ms, cwd, idle)

    monkeypatch.setattr(readout, "read_out", spy)
    return jobs


def _old_header(folder, value: int) -> None:
    """``inc/v.h`` defining ``V``, old enough to be trusted."""
    (folder / "inc").mkdir(exist_ok=True)
    (folder / "inc" / "v.h").write_text(f"#define V {value}\n")
    time.sleep(2 * YOUNG_S)


def test_a_relative_include_is_read_out_by_the_helper_in_the_users_folder(
        settings, pocl, tmp_path, monkeypatch, asked):
    clmagic.Compiler(settings).build("__kernel void k(__global int *a) { a[0] = 1; }\n")
    monkeypatch.chdir(tmp_path)  # the helper, started above, is elsewhere
    _old_header(tmp_path, 7)
    r = clmagic.Compiler(settings).build(KERNEL, "-I inc")
    assert r.outcome == Outcome.MISS and r.saved, r.note
    assert asked[-1] == (KERNEL, str(tmp_path))
    hit = clmagic.Compiler(settings).build(KERNEL, "-I inc")
    assert hit.outcome == Outcome.HIT and kernel_value(hit) == 7


def test_a_header_changed_while_the_helper_builds_saves_nothing(
        settings, pocl, tmp_path, monkeypatch, asked):
    monkeypatch.chdir(tmp_path)
    _old_header(tmp_path, 7)
    inner = readout.read_out

    def edit_then_read(fingerprint, source, options, build_ms=0.0, cwd=None, idle=False):
        (tmp_path / "inc" / "v.h").write_text("#define V 8 /* edited */\n")
        return inner(fingerprint, source, options, build_ms, cwd, idle)

    monkeypatch.setattr(readout, "read_out", edit_then_read)
    r = clmagic.Compiler(settings).build(KERNEL, "-I inc")
    assert r.outcome == Outcome.MISS and kernel_value(r) == 7  # the user's build: V was 7
    assert not r.saved and "changed during the binary's readout" in r.note, r.note
    again = clmagic.Compiler(settings).build(KERNEL, "-I inc")
    assert again.outcome == Outcome.MISS and kernel_value(again) == 8


@pytest.mark.parametrize("header, alike", [
    ("#define V 1\n", True),
    ("#define V __LINE__\n", True),
    ("#define V __FILE__\n", False),  # a file name: the helper's may differ
    ("#define V __BASE_FILE__\n", False),
    ("#define T __TIME__\n", False),
])
def test_what_a_header_holds_decides_whether_another_build_is_alike(tmp_path, header, alike):
    (tmp_path / "v.h").write_text(header)
    time.sleep(2 * YOUNG_S)
    found = find_headers(KERNEL, (), str(tmp_path), options=f"-I {tmp_path}")
    assert not rebuilt_alike(KERNEL, f"-I {tmp_path}")  # names a file: not without its headers
    assert rebuilt_alike(KERNEL, f"-I {tmp_path}", found) is alike


def test_a_header_too_new_to_trust_keeps_the_helper_out(tmp_path):
    (tmp_path / "v.h").write_text("#define V 1\n")  # just written
    found = find_headers(KERNEL, (), str(tmp_path), options=f"-I {tmp_path}")
    assert found.too_new and not rebuilt_alike(KERNEL, f"-I {tmp_path}", found)
