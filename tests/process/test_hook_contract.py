"""The hook's contract (issue 22, class 6): whatever pyopencl allows on a ``Program`` made from
source behaves the same with the hook installed, cold and warm, on POCL and on Oclgrind.

Each sequence below is one use of pyopencl (building again, with other options, ``compile`` and
``link``, build info after a rebuild, kernels after a second build, ``all_kernels()``, attribute
access, ``devices=``, programs made from binaries, ``cache_dir``, ``PYOPENCL_NO_CACHE``, ...); it
returns what the caller can see: kernel results, build info, exception types, warnings. All of
them run in a child process (this file run as a script), so a driver that aborts fails a test
instead of killing pytest: once without the hook, once with it and an empty cache (MISS), once
with it and the same cache (HIT). Every sequence must see the same in the three.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl as cl

SOURCE = """\
#ifndef V
#define V 1
#endif
__kernel void k(__global int *a) { a[0] = V; }
__kernel void k2(__global int *a) { a[0] = V + 10; }
"""
NEEDS_OK = "#ifndef OK\n#error OK is not defined\n#endif\n" + SOURCE
WARNS = "#warning a warning of the test\n" + SOURCE

Seen = list[Any]


def _value(ctx: cl.Context, prg: cl.Program | None = None, name: str = "k",
           kernel: cl.Kernel | None = None) -> int:
    """Run one kernel on one work-item: the int it writes."""
    queue = cl.CommandQueue(ctx)
    a = np.zeros(1, np.int32)
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, a.nbytes)
    (kernel if kernel is not None else cl.Kernel(prg, name))(queue, (1,), None, buf)
    cl.enqueue_copy(queue, a, buf)
    return int(a[0])


def _try(seen: Seen, step: Callable[[], Any]) -> Any:
    """Do ``step``; note its exception's type (what a caller would catch) or ``"ok"``."""
    try:
        out = step()
    except Exception as exc:  # noqa: BLE001 - the type is what is compared
        seen.append(f"raised {type(exc).__name__}")
        return None
    seen.append("ok")
    return out


def _info(seen: Seen, prg: cl.Program, dev: cl.Device) -> None:
    seen.append(prg.get_build_info(dev, cl.program_build_info.STATUS))
    seen.append(prg.get_build_info(dev, cl.program_build_info.OPTIONS))


# -- the sequences: each gets a fresh context on the child's device -------------------------------

def seq_build_twice(ctx: cl.Context, dev: cl.Device, seen: Seen) -> None:
    p = cl.Program(ctx, SOURCE)
    p.build()
    _try(seen, p.build)
    seen.append(_try(seen, lambda: _value(ctx, p)))
    seen.append(_try(seen, lambda: _value(ctx, p, "k2")))


def seq_other_options(ctx: cl.Context, dev: cl.Device, seen: Seen) -> None:
    p = cl.Program(ctx, SOURCE).build()
    seen.append(_value(ctx, p))
    _try(seen, lambda: p.build(options=["-DV=2"]))
    seen.append(_try(seen, lambda: _value(ctx, p)))
    _try(seen, lambda: p.build(options="-DV=3"))
    seen.append(_try(seen, lambda: _value(ctx, p, "k2")))


def seq_build_info_after_rebuild(ctx: cl.Context, dev: cl.Device, seen: Seen) -> None:
    p = cl.Program(ctx, SOURCE).build(options=["-DV=4"])
    _info(seen, p, dev)
    _try(seen, lambda: p.build(options=["-DV=5"]))
    _try(seen, lambda: _info(seen, p, dev))


def seq_kernels_after_second_build(ctx: cl.Context, dev: cl.Device, seen: Seen) -> None:
    p = cl.Program(ctx, SOURCE).build()
    _try(seen, lambda: p.build(options=["-DV=6"]))
    k = _try(seen, lambda: cl.Kernel(p, "k"))
    seen.append(_try(seen, lambda: _value(ctx, kernel=k)))
    seen.append(_try(seen, lambda: sorted(x.function_name for x in p.all_kernels())))


def seq_rebuild_while_a_kernel_lives(ctx: cl.Context, dev: cl.Device, seen: Seen) -> None:
    p = cl.Program(ctx, SOURCE).build()
    k = cl.Kernel(p, "k")
    _try(seen, lambda: p.build(options=["-DV=7"]))
    seen.append(_value(ctx, kernel=k))  # the kernel made before keeps the first build
    seen.append(_try(seen, lambda: _value(ctx, p)))


def seq_all_kernels_and_attributes(ctx: cl.Context, dev: cl.Device, seen: Seen) -> None:
    p = cl.Program(ctx, SOURCE).build()
    seen.append(sorted(x.function_name for x in p.all_kernels()))
    seen.append(sorted(p.kernel_names.split(";")))
    seen.append(p.num_kernels)
    seen.append(_value(ctx, kernel=p.k2))
    _try(seen, lambda: p.no_such_kernel)
    seen.append(p.get_info(cl.program_info.NUM_DEVICES))
    seen.append(p.context == ctx and p.devices == [dev])


def seq_devices_argument(ctx: cl.Context, dev: cl.Device, seen: Seen) -> None:
    p = cl.Program(ctx, SOURCE).build(devices=[dev])
    seen.append(_value(ctx, p))
    _try(seen, lambda: p.build(options=["-DV=8"], devices=ctx.devices))
    seen.append(_try(seen, lambda: _value(ctx, p)))


def seq_from_binaries(ctx: cl.Context, dev: cl.Device, seen: Seen) -> None:
    binary = cl.Program(ctx, SOURCE).build(options=["-DV=9"]).binaries[0]
    p = cl.Program(ctx, [dev], [binary])
    _try(seen, p.build)
    seen.append(_try(seen, lambda: _value(ctx, p)))
    _try(seen, lambda: p.build(options=["-DV=2"]))
    seen.append(_try(seen, lambda: _value(ctx, p)))


def seq_compile_and_link(ctx: cl.Context, dev: cl.Device, seen: Seen) -> None:
    p = cl.Program(ctx, SOURCE)
    _try(seen, lambda: p.compile(options=["-DV=3"]))
    linked = _try(seen, lambda: cl.link_program(ctx, [p]))
    seen.append(_try(seen, lambda: _value(ctx, linked)))


def seq_compile_after_build(ctx: cl.Context, dev: cl.Device, seen: Seen) -> None:
    p = cl.Program(ctx, SOURCE).build()
    _try(seen, lambda: p.compile(options=["-DV=4"]))
    linked = _try(seen, lambda: cl.link_program(ctx, [p]))
    seen.append(_try(seen, lambda: _value(ctx, linked)))
    _try(seen, lambda: p.build(options=["-DV=5"]))
    seen.append(_try(seen, lambda: _value(ctx, p)))


def seq_link_a_built_program(ctx: cl.Context, dev: cl.Device, seen: Seen) -> None:
    p = cl.Program(ctx, SOURCE).build()
    linked = _try(seen, lambda: cl.link_program(ctx, [p]))
    seen.append(_try(seen, lambda: _value(ctx, linked)))


def seq_error_then_options_that_fix_it(ctx: cl.Context, dev: cl.Device, seen: Seen) -> None:
    p = cl.Program(ctx, NEEDS_OK)
    _try(seen, p.build)
    _try(seen, lambda: p.build(options=["-DOK"]))
    seen.append(_try(seen, lambda: _value(ctx, p)))
    q = cl.Program(ctx, NEEDS_OK).build(options=["-DOK", "-DV=2"])
    _try(seen, q.build)  # the same program, without the option it needs
    seen.append(_try(seen, lambda: _value(ctx, q)))


def seq_two_programs_of_one_source(ctx: cl.Context, dev: cl.Device, seen: Seen) -> None:
    p1 = cl.Program(ctx, SOURCE).build()
    k1 = p1.k
    p2 = cl.Program(ctx, SOURCE).build()  # with the hook: served from memory
    _try(seen, lambda: p2.build(options=["-DV=5"]))
    seen.append(_try(seen, lambda: _value(ctx, p2)))
    seen.append(_value(ctx, kernel=k1))
    seen.append(_value(ctx, p1, "k2"))  # p1 untouched by p2's rebuild
    _try(seen, lambda: p1.build(options=["-DV=6"]))
    seen.append(_try(seen, lambda: _value(ctx, p1)))


def seq_source_and_binaries(ctx: cl.Context, dev: cl.Device, seen: Seen) -> None:
    p = cl.Program(ctx, SOURCE).build()
    seen.append(_try(seen, lambda: p.get_info(cl.program_info.SOURCE) in ("", SOURCE)))
    seen.append(len(p.binaries) == 1 and len(p.binaries[0]) > 0)
    seen.append(p.get_info(cl.program_info.BINARY_SIZES)[0] > 0)


def seq_pre_build_access(ctx: cl.Context, dev: cl.Device, seen: Seen) -> None:
    p = cl.Program(ctx, SOURCE)
    seen.append(p.get_info(cl.program_info.NUM_DEVICES))  # pyopencl warns and makes the program
    _try(seen, lambda: p.build(options=["-DV=3"]))
    seen.append(_try(seen, lambda: _value(ctx, p)))


def seq_cache_dir(ctx: cl.Context, dev: cl.Device, seen: Seen) -> None:
    with tempfile.TemporaryDirectory() as folder:
        p = cl.Program(ctx, SOURCE).build(cache_dir=folder)
        seen.append(_value(ctx, p))
        _try(seen, lambda: p.build(options=["-DV=2"], cache_dir=folder))
        seen.append(_try(seen, lambda: _value(ctx, p)))
    q = cl.Program(ctx, SOURCE).build(options=["-DV=3"], cache_dir=False)
    seen.append(_value(ctx, q))
    _try(seen, lambda: q.build(cache_dir=False))
    seen.append(_try(seen, lambda: _value(ctx, q)))


def seq_warnings_and_log(ctx: cl.Context, dev: cl.Device, seen: Seen) -> None:
    p = cl.Program(ctx, WARNS).build()
    seen.append(_value(ctx, p))
    seen.append("a warning of the test" in p.get_build_info(dev, cl.program_build_info.LOG))


SEQUENCES = {name[4:]: f for name, f in sorted(globals().items()) if name.startswith("seq_")}


def _child(spec: str, first: int, hook_cache: str | None) -> None:
    """Run the sequences from the ``first`` on, on the device ``spec`` ("P:D", as the fixtures
    give it: a machine may have two POCLs) (with the hook on a compiler of ``hook_cache`` when
    given); one JSON line per sequence, so what ran before an abort is kept, and the saves of
    each sequence finished before the next starts (Debian's POCL 3.1 aborts in a later one,
    hook or not: ``pocl_cache.c: program_device_dir: Assertion `pocl_cache_buildhash_is_valid``;
    the saves still under way then would be lost with the process)."""
    platform, device = map(int, spec.split(":"))
    dev = cl.get_platforms()[platform].get_devices()[device]
    compiler = None
    if hook_cache is not None:
        import clmagic

        compiler = clmagic.Compiler(clmagic.Settings.from_env({"CLMAGIC_CACHE_DIR": hook_cache}))
        clmagic.install(compiler)
    for name, sequence in list(SEQUENCES.items())[first:]:
        seen: Seen = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sequence(cl.Context([dev]), dev, seen)
        if compiler is not None:
            compiler.flush()
        seen.append(sorted({w.category.__name__ for w in caught}))
        print(json.dumps([name, seen]), flush=True)


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
    sys.exit(0)


# -- the tests ------------------------------------------------------------------------------------

import pytest  # noqa: E402
from conftest import child_env  # noqa: E402

PLATFORMS = ("pocl", "oclgrind")  # the fixtures that give the device
ENVS = {"default": {}, "PYOPENCL_NO_CACHE": {"PYOPENCL_NO_CACHE": "1"}}
#: the one difference left (docs/reliability.md, "The hook's contract"): on a device where
#: pyopencl rebuilds a program's own source (POCL), it refuses to while a kernel of the first
#: build is alive (CL_INVALID_OPERATION); a program the hook built gets a fresh one from its
#: source, so the rebuild succeeds and the new options hold (the live kernel keeps the first
#: build). Where pyopencl cannot rebuild at all (its binary cache: Oclgrind) both refuse alike.
KNOWN = {("pocl", "default", "rebuild_while_a_kernel_lives"): ["ok", 1, "ok", 7, []],
         ("pocl", "default", "two_programs_of_one_source"): ["ok", "ok", 5, 1, 11, "ok", "ok",
                                                             6, []]}


def _run(spec: str, cache: Path | None, env: dict[str, str]) -> dict[str, Any]:
    """The sequences' results, in children on the device ``spec``: a sequence whose child died
    (a driver's abort or crash) has ``"died with status N"`` as its result, and a new child goes
    on with the next. Most sequences must give results (a child that cannot start is no
    agreement)."""
    results: dict[str, Any] = {}
    names = list(SEQUENCES)
    while len(results) < len(names):
        args = [sys.executable, __file__, spec, str(len(results))]
        proc = subprocess.run(args + ([str(cache)] if cache is not None else []),
                              env=child_env(**env), capture_output=True, text=True, timeout=280)
        results.update(json.loads(line) for line in proc.stdout.splitlines()
                       if line.startswith("["))
        if proc.returncode != 0 and len(results) < len(names):
            results[names[len(results)]] = f"died with status {proc.returncode}"
    died = sum(isinstance(r, str) for r in results.values())
    assert died <= 2, (spec, cache, results, proc.stderr[-2000:])
    return results


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory,
         request: pytest.FixtureRequest) -> Callable[[str, str], dict[str, Any]]:
    """Per platform and environment: the results without the hook, with it cold, then warm."""
    done: dict[tuple[str, str], dict[str, Any]] = {}

    def get(which: str, env_name: str) -> dict[str, Any]:
        if (which, env_name) not in done:
            platform, env = request.getfixturevalue(which), ENVS[env_name]
            cache = tmp_path_factory.mktemp(f"contract-{which}")
            done[which, env_name] = {"pyopencl": _run(platform, None, env),
                                     "cold": _run(platform, cache, env),
                                     "warm": _run(platform, cache, env)}
        return done[which, env_name]

    return get


@pytest.mark.parametrize("env_name", list(ENVS))
@pytest.mark.parametrize("which", PLATFORMS)
@pytest.mark.parametrize("sequence", list(SEQUENCES))
def test_the_hook_behaves_as_pyopencl(sequence, which, env_name, runs, request):
    request.getfixturevalue(which)  # fails the test when the platform is not there
    results = runs(which, env_name)
    plain = results["pyopencl"][sequence]
    expected = KNOWN.get((which, env_name, sequence), plain)
    if isinstance(plain, str):  # the driver crashed without clmagic too (Oclgrind rebuilding a
        # program whose kernel lives): the status differs from crash to crash, the crash not
        assert all(str(results[r][sequence]).startswith("died") for r in ("cold", "warm"))
        return
    assert results["cold"][sequence] == expected
    assert results["warm"][sequence] == expected
    if expected is not plain:  # the difference is the refusal, nothing else
        assert "raised RuntimeError" in plain and plain[-2:] != expected[-2:]


def test_the_sequences_build_through_the_cache(runs, tmp_path, pocl):
    """The contract is not met by leaving everything to pyopencl: the warm run's first builds
    were served (a HIT loads a binary, so a rebuild there would keep the old code)."""
    import clmagic

    cache = tmp_path / "cache"
    results = _run(pocl, cache, {})
    entries = list(clmagic.Compiler(
        clmagic.Settings.from_env({"CLMAGIC_CACHE_DIR": str(cache)})).store.entries())
    # the first builds' sources and options: 6; a sequence whose child died (POCL 3.1 aborts in
    # from_binaries, and under a loaded run at times in one more: _run allows two) may take
    # the one first build only it makes with it
    died = [name for name, got in results.items() if isinstance(got, str)]
    assert len(entries) >= 6 - len(died), (died, [e.meta.options for e in entries])
