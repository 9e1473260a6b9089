"""Files planted in the cache or an include path (issue 22, class 5): a FIFO, a device, a folder
or a giant where clmagic expects a file it wrote (a lifetime counter file, the zero baseline) or
a header, and counter files whose numbers cannot be right. Nothing may hang, raise or show a
number that is not one; every reader goes through the one safe read
(:func:`clmagic.store._fs.read_regular`)."""

from __future__ import annotations

import json
import math
import shutil
import socket
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from conftest import child_env, kernel_value
from stores import FP
from test_planted import KINDS, WORDS, _no_hang, _plant  # noqa: F401 - the fixture is used

from clmagic import Compiler
from clmagic.config import Settings
from clmagic.key.includes import Unkeyable, find_headers
from clmagic.store._fs import NotAFile, TooLarge, read_regular
from clmagic.store.lifetime import MAX_NUMBER, Counters

HOST = "".join(c if c.isalnum() or c == "-" else "_" for c in socket.gethostname() or "host")[:40]


def _dead_pid() -> int:
    """The id of a process that has ended (a child, waited for)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _slot(fp: str, name: str, count: float, value: float) -> bytes:
    body = struct.pack("<16s16sdd", fp.encode(), name.encode(), count, value)
    return body + struct.pack("<I12x", zlib.crc32(body))


def _build_in_child(cache: Path, device: str, value: int) -> str:
    """Build a kernel in a process of its own (its counts are in the folder when it ends);
    returns its outcome."""
    code = ("import json, clmagic\n"
            f"r = clmagic.build('__kernel void k(__global int *a) {{ a[0] = {value}; }}')\n"
            "print(json.dumps({'outcome': str(r.outcome)}))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=child_env(CLMAGIC_CACHE_DIR=str(cache),
                                                     CLMAGIC_DEVICE=device))
    assert proc.returncode == 0, proc.stderr
    return str(json.loads(proc.stdout.strip().splitlines()[-1])["outcome"])


@pytest.fixture(scope="module")
def built_once(tmp_path_factory, pocl):
    """``copy(value, to)``: ``to`` made a copy of a cache in which a process of its own built the
    kernel that writes ``value`` (a MISS, and its counts in the folder once it ended); that
    child runs once per value for the module, each test gets a private copy to plant in."""
    pristine: dict[int, Path] = {}

    def copy(value: int, to: Path) -> Path:
        if value not in pristine:
            cache = tmp_path_factory.mktemp(f"built-{value}") / "cache"
            assert _build_in_child(cache, pocl, value) == "MISS"
            pristine[value] = cache
        shutil.copytree(pristine[value], to, symlinks=True)
        return to

    return copy


def _clmagic(*args: str, cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clmagic", *args],
                          env=child_env(CLMAGIC_CACHE_DIR=str(cache), **env),
                          capture_output=True, text=True, timeout=120)


# -- the one safe read -------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_the_safe_read_never_waits_and_names_what_it_found(tmp_path, kind):
    path = tmp_path / "f"
    keep = _plant(path, kind, tmp_path)
    with pytest.raises(NotAFile, match=WORDS[kind]):
        read_regular(path, 1 << 20)
    del keep


def test_the_safe_read_bounds_what_it_reads(tmp_path):
    path = tmp_path / "big"
    with open(path, "wb") as fh:
        fh.truncate(1 << 30)  # sparse: costs nothing to plant, 1 GiB to read
    with pytest.raises(TooLarge, match="over the"):
        read_regular(path, 1 << 20)
    path.write_bytes(b"abc")
    data, st = read_regular(path, 3)
    assert data == b"abc" and st.st_size == 3
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "missing", 10)


# -- lifetime counters -------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_stats_file_never_hangs_clmagic_stats(tmp_path, built_once, kind):
    cache = built_once(5, tmp_path / "cache")  # a child built there: a MISS
    keep = _plant(cache / "stats" / "planted.cnt", kind, tmp_path)
    proc = _clmagic("stats", "--json", cache=cache)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)  # the real counts are still there
    if kind != "directory":  # (listing a folder named .cnt is not reading it)
        assert WORDS[kind] in proc.stderr and "Traceback" not in proc.stderr
    del keep


@pytest.mark.parametrize("kind", ["fifo", "device", "socket", "symlink-to-fifo"])
def test_a_planted_file_named_like_a_dead_process_counter_never_hangs_the_next(tmp_path, pocl,
                                                                                kind):
    cache = tmp_path / "cache"
    (cache / "stats").mkdir(parents=True)
    planted = cache / "stats" / f"{HOST}.{_dead_pid()}.abcd1234.cnt"
    keep = _plant(planted, kind, tmp_path)
    assert _build_in_child(cache, pocl, 6) == "MISS"
    assert _build_in_child(cache, pocl, 6) == "HIT"  # and the next process folds its own dead
    assert planted.is_symlink() or planted.exists()  # not claimed: it is no counter file
    del keep


@pytest.mark.parametrize("count,value", [(math.inf, 0.0), (1.0, math.inf), (-math.inf, 0.0),
                                         (math.nan, 1.0), (-5.0, 0.0), (1e300, 0.0),
                                         (MAX_NUMBER * 2, 0.0)])
def test_a_counter_that_cannot_be_right_is_left_out_with_one_warning(tmp_path, capfd, count,
                                                                      value):
    folder = tmp_path / "stats"
    c = Counters(folder)
    c.add(FP, "HIT", 5, 10.0)
    (folder / "otherhost.1.abcd1234.cnt").write_bytes(
        _slot(FP, "HIT", count, value) + _slot(FP, "MISS", 2, 3.0))
    for _ in range(2):
        got = c.lifetime()
        assert got[(FP, "HIT")] == [5, 10.0] and got[(FP, "MISS")] == [2, 3.0]
    assert capfd.readouterr().err.count("cannot be right") == 1


@pytest.mark.parametrize("count", [math.inf, 1e300, -1.0])
def test_a_damaged_counter_shows_in_the_statistics_as_nothing(tmp_path, built_once, count):
    cache = built_once(7, tmp_path / "cache")  # a child built there: a MISS
    fp = next(p.name for p in cache.iterdir() if p.is_dir() and p.name != "stats")
    (cache / "stats" / "otherhost.1.abcd1234.cnt").write_bytes(_slot(fp, "HIT", count, count))
    (cache / "stats" / "zero").write_bytes(_slot(fp, "MISS", count, 0.0))  # the baseline too
    for args in (("stats",), ("stats", "--json")):
        proc = _clmagic(*args, cache=cache)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr and "cannot be right" in proc.stderr
        assert "inf" not in proc.stdout.lower() and "e+" not in proc.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_zero_baseline_is_damage_not_a_hang(tmp_path, kind, capfd):
    folder = tmp_path / "stats"
    c = Counters(folder)
    c.add(FP, "HIT", 3)
    keep = _plant(folder / "zero", kind, tmp_path)
    assert c.lifetime()[(FP, "HIT")][0] == 3
    assert WORDS[kind] in capfd.readouterr().err
    del keep


# -- headers -----------------------------------------------------------------------------------

HEADER_SRC = '#include "v.h"\n__kernel void k(__global int *a) { a[0] = V; }\n'


@pytest.mark.parametrize("where", ["cwd", "source folder", "symlink to a folder"])
def test_a_folder_named_like_a_header_is_skipped_as_the_compiler_skips_it(
        tmp_path, monkeypatch, pocl, oclgrind, where):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "v.h").write_text("#define V 41\n")
    if where == "symlink to a folder":
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "v.h").symlink_to(tmp_path / "elsewhere")
    else:
        (tmp_path / "v.h").mkdir()
    headers = find_headers(HEADER_SRC, (), str(tmp_path), options="-Iinc")
    assert [n for n, _ in headers] == ['"v.h" @-Iinc']
    for device in (pocl, oclgrind):
        c = Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": str(tmp_path / "cache"),
                                        "CLMAGIC_DEVICE": device}))
        assert kernel_value(c.build(HEADER_SRC, "-Iinc")) == 41
        (tmp_path / "inc" / "v.h").write_text("#define V 42\n")  # an edit is a new key
        assert kernel_value(c.build(HEADER_SRC, "-Iinc")) == 42
        (tmp_path / "inc" / "v.h").write_text("#define V 41\n")


def test_a_folder_named_like_a_header_through_the_magic(tmp_path, monkeypatch, shell):
    import numpy as np
    import pyopencl as cl

    monkeypatch.chdir(tmp_path)
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "v.h").write_text("#define V 43\n")
    (tmp_path / "v.h").mkdir()
    res = shell.run_cell(f"%%clkernel --name prog --opts -Iinc\n{HEADER_SRC}")
    assert res.success, res.error_in_exec
    ns = shell.user_ns
    a = np.zeros(1, np.int32)
    buf = cl.Buffer(ns["cl_ctx"], cl.mem_flags.WRITE_ONLY, a.nbytes)
    ns["k"](ns["cl_queue"], (1,), None, buf)
    cl.enqueue_copy(ns["cl_queue"], a, buf)
    assert int(a[0]) == 43


@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "symlink-to-fifo"])
def test_a_header_that_is_not_a_file_is_cannot_tell_at_once(tmp_path, kind):
    keep = _plant(tmp_path / "v.h", kind, tmp_path)
    with pytest.raises(Unkeyable, match="cannot tell"):
        find_headers(HEADER_SRC, (), str(tmp_path))
    del keep


def test_a_giant_header_is_cannot_tell_without_reading_it(tmp_path):
    with open(tmp_path / "v.h", "wb") as fh:
        fh.truncate(1 << 40)  # sparse: 1 TiB that must not be read
    with pytest.raises(Unkeyable, match="MiB a header at most"):
        find_headers(HEADER_SRC, (), str(tmp_path))
