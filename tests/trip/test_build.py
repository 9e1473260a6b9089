"""The library API against real drivers: keys, outcomes, stores, devices, options."""

from __future__ import annotations

import hashlib
import os
import stat

import numpy as np
import pyopencl as cl
import pytest
from conftest import SAXPY, last_json, run_child

import clmagic
from clmagic.config import Settings
from clmagic.entry import FORMAT_VERSION
from clmagic.entry_file import MAGIC, decode
from clmagic.key.digest import cache_key
from clmagic.key.options import parse_options

CHILD = """
import json, os, numpy as np, pyopencl as cl, clmagic
src = os.environ["SRC"]
r = clmagic.build(src, os.environ.get("OPTS"), os.environ["DEV"])
x = np.arange(256, dtype=np.float32); y = np.ones_like(x)
mf = cl.mem_flags
xb = cl.Buffer(r.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
yb = cl.Buffer(r.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=y)
r.kernels["saxpy"](r.queue, x.shape, None, np.float32(3), xb, yb)
cl.enqueue_copy(r.queue, y, yb)
print(json.dumps({"outcome": r.outcome, "kernels": sorted(r.kernels), "key": r.key,
                  "ms": r.ms, "build_ms": r.build_ms, "y": y[:5].tolist(),
                  "correct": bool(np.allclose(y, 3 * x + 1))}))
"""


def _saxpy(result, n=64):
    x = np.arange(n, dtype=np.float32)
    y = np.ones_like(x)
    mf = cl.mem_flags
    xb = cl.Buffer(result.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    yb = cl.Buffer(result.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=y)
    result.kernels["saxpy"](result.queue, x.shape, None, np.float32(2), xb, yb)
    cl.enqueue_copy(result.queue, y, yb)
    return np.allclose(y, 2 * x + 1)


def test_two_processes_miss_then_hit_with_correct_results(cache_dir, pocl):
    env = dict(SRC=SAXPY, DEV=pocl, OPTS="-O3", CLMAGIC_CACHE_DIR=str(cache_dir))
    first = last_json(run_child(CHILD, **env))
    second = last_json(run_child(CHILD, **env))
    assert (first["outcome"], second["outcome"]) == ("MISS", "HIT")
    assert first["kernels"] == second["kernels"] == ["saxpy", "scale"]
    assert first["key"] == second["key"]
    assert second["correct"] and second["y"] == [1.0, 4.0, 7.0, 10.0, 13.0]
    # the HIT reports the original build time, not its own
    assert second["build_ms"] == pytest.approx(first["build_ms"], abs=1e-3)


def test_same_process_rerun_is_a_memory_hit(compiler, cache_dir):
    first = compiler.build(SAXPY)
    compiler.flush()  # the save runs in the background
    files = sorted(cache_dir.rglob("*.clbin"))
    mtimes = [f.stat().st_mtime_ns for f in files]
    again = compiler.build(SAXPY)
    assert (first.outcome, again.outcome) == ("MISS", "MEMORY")
    assert again.program is first.program and again.kernels["saxpy"] is first.kernels["saxpy"]
    assert [f.stat().st_mtime_ns for f in files] == mtimes and len(files) == 1
    assert _saxpy(again)


@pytest.mark.parametrize(
    "change",
    [
        ("source", lambda s: (s.replace("a * x[i]", "x[i] * a"), None)),
        ("option", lambda s: (s, "-cl-mad-enable")),
        ("define", lambda s: (s, "-DUNUSED=1")),
    ],
    ids=lambda c: c[0],
)
def test_a_change_of_source_or_options_is_a_miss(compiler, change):
    base = compiler.build(SAXPY)
    src, opts = change[1](SAXPY)
    other = compiler.build(src, opts)
    assert other.outcome == "MISS" and other.key != base.key
    assert compiler.build(src, opts).outcome == "MEMORY"


def test_switching_device_pocl_oclgrind_is_a_miss_with_its_own_folder(compiler, cache_dir,
                                                                       pocl, oclgrind):
    a = compiler.build(SAXPY, device=pocl)
    b = compiler.build(SAXPY, device=oclgrind)
    compiler.flush()  # saves run in the background
    assert (a.outcome, b.outcome) == ("MISS", "MISS")
    assert a.key != b.key and a.device.fingerprint != b.device.fingerprint
    folders = sorted(p.name for p in cache_dir.iterdir() if p.name != "stats")
    assert folders == sorted([a.device.fingerprint, b.device.fingerprint])
    assert _saxpy(b)
    fresh = clmagic.Compiler(compiler.settings)
    assert fresh.build(SAXPY, device=oclgrind).outcome == "HIT"
    assert fresh.build(SAXPY, device=pocl).outcome == "HIT"


def test_disabled_cache_misses_every_time_and_writes_nothing(tmp_path, pocl):
    home = tmp_path / "home"
    for value in ("0", "off", "none", "disable", "disabled"):
        env = dict(SRC=SAXPY, DEV=pocl, CLMAGIC_CACHE_DIR=value, HOME=str(home),
                   XDG_CACHE_HOME=str(home / ".cache"))
        runs = [last_json(run_child(CHILD, **env))["outcome"] for _ in range(2)]
        assert runs == ["MISS", "MISS"], value
    assert not [p for p in home.rglob("*") if "clmagic" in str(p) or p.suffix == ".clbin"]


@pytest.mark.parametrize(
    "raw, expected",
    [(None, "default"), ("", "default"), ("1", "default"), ("default", "default"),
     ("0", None), ("off", None), ("none", None), ("disable", None), ("DISABLED", None),
     ("/x/y", "/x/y")],
)
def test_cache_dir_values(raw, expected):
    env = {} if raw is None else {"CLMAGIC_CACHE_DIR": raw}
    s = Settings.from_env({**env, "XDG_CACHE_HOME": "/xdg"})
    if expected == "default":
        assert s.cache is not None and s.cache.endswith(os.path.join("clmagic", "programs"))
    else:
        assert s.cache == expected


def test_key_is_sha256_over_the_documented_fields(compiler):
    r = compiler.build(SAXPY, "-O3 -cl-mad-enable")
    d = r.device
    fields = [SAXPY, "-cl-mad-enable", d.device_name, d.driver_version, d.device_version,
              d.platform_version, str(FORMAT_VERSION)]
    assert r.key == hashlib.sha256("\0".join(fields).encode()).hexdigest()
    assert cache_key(SAXPY.encode(), "-cl-mad-enable", d) == r.key


def test_entry_file_is_self_describing_and_private(compiler, cache_dir):
    r = compiler.build(SAXPY, "-O3")
    compiler.flush()  # the save runs in the background
    path = cache_dir / r.device.fingerprint / f"{r.key}.clbin"
    data = path.read_bytes()
    assert data.startswith(MAGIC)
    entry = decode(data, key=r.key, fingerprint=r.device.fingerprint)
    assert entry.kernels == ["saxpy", "scale"]
    assert entry.meta.options == "" and entry.meta.device == r.device.device_name
    assert entry.meta.driver == r.device.driver_version
    assert entry.meta.platform == r.device.platform_name
    assert entry.meta.source_bytes == len(SAXPY.encode())
    assert entry.meta.build_ms == pytest.approx(r.build_ms, abs=1e-3)
    # the driver's own binary of this program (on POCL read out by clmagic's helper process
    # from its own build of the same source: the same code, under another temp name)
    own = bytes(r.program.get_info(cl.program_info.BINARIES)[0])
    assert entry.binary[:8] == own[:8] and abs(len(entry.binary) - len(own)) < len(own) // 10
    loaded = cl.Program(r.context, r.context.devices, [entry.binary]).build()
    assert sorted(loaded.kernel_names.split(";")) == ["saxpy", "scale"]
    for folder in (cache_dir, path.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert not [p for p in path.parent.iterdir() if ".tmp." in p.name]


def test_flipped_binary_byte_is_caught_before_the_driver_and_rebuilt(compiler, cache_dir, capsys):
    r = compiler.build(SAXPY)
    compiler.flush()  # the save runs in the background
    path = cache_dir / r.device.fingerprint / f"{r.key}.clbin"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    fresh = clmagic.Compiler(compiler.settings)
    again = fresh.build(SAXPY)
    assert again.outcome == "CORRUPT" and _saxpy(again)
    assert "damaged" in capsys.readouterr().err
    assert clmagic.Compiler(compiler.settings).build(SAXPY).outcome == "HIT"


def test_unusable_cache_dir_warns_once_and_runs_memory_only(tmp_path, pocl, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    s = Settings.from_env({"CLMAGIC_CACHE_DIR": str(blocker / "cache"), "CLMAGIC_DEVICE": pocl})
    c = clmagic.Compiler(s)
    clmagic.Compiler(s)
    assert c.store is None
    assert [c.build(SAXPY).outcome, c.build(SAXPY).outcome] == ["MISS", "MEMORY"]
    err = capsys.readouterr().err
    assert err.count("cannot be used") == 1 and "memory only" in err


def test_debug_prints_hit_miss_save_with_tally(cache_dir, pocl):
    env = dict(SRC=SAXPY, DEV=pocl, CLMAGIC_CACHE_DIR=str(cache_dir), CLMAGIC_CACHE_DEBUG="1")
    first = run_child(CHILD, **env)
    second = run_child(CHILD, **env)
    key = last_json(first)["key"][:12]
    lines = [ln for ln in first.stderr.splitlines() if ln.startswith("clmagic:")]
    assert [ln.split()[1] for ln in lines] == ["MISS", "SAVE"]
    assert all(key in ln for ln in lines) and "misses 1, saves 1" in lines[-1]
    hit = [ln for ln in second.stderr.splitlines() if ln.startswith("clmagic:")]
    assert [ln.split()[1] for ln in hit] == ["HIT"] and "hits 1" in hit[0]


def test_build_error_carries_the_log_mapped_to_lines_and_stores_nothing(compiler, cache_dir):
    bad = "__kernel void f(__global float *a)\n{\n    a[0] = ;\n}\n"
    with pytest.raises(clmagic.BuildError) as info:
        compiler.build(bad, line_offset=1)
    assert "line 4:" in info.value.log  # source line 3, shifted by the magic line
    assert ".cl:" not in info.value.log
    assert not list(cache_dir.rglob("*.clbin"))


@pytest.mark.parametrize(
    "written, effective",
    [("-O3", ""), ("-O0", "-cl-opt-disable"), ("-O2 -cl-mad-enable", "-cl-mad-enable"),
     ("-D N=4 -DM", "-DN=4 -DM"), ("  -cl-fast-relaxed-math   -O1 ", "-cl-fast-relaxed-math")],
)
def test_option_levels_map_to_what_drivers_accept(written, effective):
    assert parse_options(written).effective == effective


@pytest.mark.parametrize("opts", ["-O3", "-O0 -cl-mad-enable", "-O2"])
def test_pocl_builds_with_mapped_levels(compiler, opts):
    assert compiler.build(SAXPY, opts).outcome == "MISS"


@pytest.mark.parametrize("bad", ["-D", "-D 1X=2", "-I", "'unclosed"])
def test_bad_options_are_one_line_errors(bad):
    with pytest.raises(clmagic.OptionsError):
        parse_options(bad)


def test_device_specs(pocl, oclgrind):
    assert clmagic.resolve_device(pocl)[0].spec == pocl
    assert clmagic.resolve_device("OCLGRIND")[0].spec == oclgrind
    assert clmagic.resolve_device("pocl")[0].label.startswith("POCL")  # the label's short name
    info = clmagic.resolve_device(oclgrind)[0]
    assert clmagic.resolve_device(info.fingerprint)[0] == info
    for bad in ("no-such-device", "9:9", "0:99"):
        with pytest.raises(clmagic.DeviceError, match="devices:"):
            clmagic.resolve_device(bad)


def test_default_device_prefers_a_real_driver_over_the_simulator():
    from clmagic.opencl.devices import default_device

    assert default_device()[0].type in ("GPU", "CPU")
    assert "oclgrind" in default_device("oclgrind")[0].platform_name.lower()


def test_library_and_magic_share_a_key_despite_trailing_whitespace(compiler, ipshell):
    from clmagic.ipython.magics import CLMagics

    spaced = SAXPY.replace("{\n", "{   \n").replace("\n\n", "\n    \n") + "\n\n"
    built = compiler.build(spaced)
    ipshell.register_magics(CLMagics(shell=ipshell, compiler=compiler))
    assert ipshell.run_cell("%%clkernel --quiet\n" + spaced).success
    assert compiler.history.records[-1].key == built.key
    assert compiler.history.records[-1].outcome == "MEMORY"


def test_key_method_predicts_the_build_key(compiler, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "scale.h").write_text("#define SCALE 2.0f\n")
    src = '#include "scale.h"\n__kernel void k(__global float *a) { a[0] = SCALE; }'
    predicted = compiler.key(src, "-O3 -Iinc")
    assert compiler.build(src, "-O3 -Iinc").key == predicted
    (tmp_path / "inc" / "scale.h").write_text("#define SCALE 3.0f\n")
    assert compiler.key(src, "-O3 -Iinc") != predicted


def test_remembered_preparation_still_follows_headers(compiler, tmp_path, monkeypatch):
    """Sources without #include skip re-preparation; an included header is re-read each time."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "v.h").write_text("#define V 1\n")
    src = '#include "v.h"\n__kernel void k(__global int *a) { a[0] = V; }'
    first = compiler.build(src)
    (tmp_path / "v.h").write_text("#define V 2\n")
    assert compiler.build(src).key != first.key
    plain = compiler.build(SAXPY)
    assert compiler.build(SAXPY).key == plain.key == compiler.key(SAXPY)


def test_option_splitting_fast_path_agrees_with_shlex():
    import random
    import shlex
    import string

    from clmagic.key.options import _split

    rng = random.Random(7)
    alphabet = string.printable + "\xa0\x1c\x0b"
    checked = 0
    for _ in range(5000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24)))
        try:
            expected = shlex.split(s)
        except ValueError:
            continue
        assert _split(s)[1] == expected, repr(s)
        checked += 1
    assert checked > 1000


def test_options_as_a_generator_and_a_bytearray_source(compiler):
    opts = (o for o in ["-DUNUSED=1", "-cl-mad-enable"])
    r = compiler.build(bytearray(SAXPY.encode()), opts)
    assert r.options.effective == "-DUNUSED=1 -cl-mad-enable"
    assert compiler.build(SAXPY, ["-DUNUSED=1", "-cl-mad-enable"]).key == r.key


def test_includes_past_what_a_key_covers_build_without_the_cache(compiler, tmp_path,
                                                                  monkeypatch, capsys):
    import clmagic.key.includes as inc

    monkeypatch.chdir(tmp_path)
    (tmp_path / "big.h").write_text("#define BIG 1\n" + "// padding\n" * 200)
    monkeypatch.setattr(inc, "MAX_HEADER_BYTES", 100)
    src = '#include "big.h"\n__kernel void k(__global int *a) { a[0] = BIG; }'
    first = compiler.build(src)
    assert first.outcome == "BYPASS" and "not cached" in first.note
    assert compiler.build(src).outcome == "BYPASS"  # never served from a partial key
    assert "not cached: the includes go past" in capsys.readouterr().err


def test_select_device_recovers_from_an_unusable_default(settings, oclgrind):
    import dataclasses

    broken = clmagic.Compiler(dataclasses.replace(settings, device="no-such-device"))
    info = broken.select_device(oclgrind)
    assert broken.build(SAXPY).device == info
