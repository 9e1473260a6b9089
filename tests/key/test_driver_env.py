"""Flags a driver reads once per process: the compiler's view or no cache.

POCL reads ``POCL_EXTRA_BUILD_FLAGS`` at its first build and keeps it. Whatever read it first (a
plain pyopencl build, clmagic's own device probe), a later value must not key a binary built with
the first: such a build is neither served from the cache nor saved, and its line says why. Each
case runs in a child process of its own (the first read is per process), on a real POCL with its
kernel cache off (so the driver compiles every time)."""

from __future__ import annotations

import json

import pytest
from conftest import last_json, run_child

from clmagic.opencl import driver_env

VAR = "POCL_EXTRA_BUILD_FLAGS"
# X defaults to 1, so a build without the flag computes 1
SRC = "#ifndef X\n#define X 1\n#endif\n__kernel void k(__global int *a) { a[0] = X; }\n"

CHILD = """
import json, os, sys
import numpy as np, pyopencl as cl
steps, spec, cache = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
src = {src!r}

def value(ctx, queue, kernel):
    a = np.zeros(1, np.int32); b = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, 4)
    kernel(queue, (1,), None, b); cl.enqueue_copy(queue, a, b); return int(a[0])

out = []
for step in steps:
    if step[0] == "env":
        if step[2] is None:
            os.environ.pop(step[1], None)
        else:
            os.environ[step[1]] = step[2]
    elif step[0] == "plain":  # pyopencl alone, before clmagic is imported
        p = int(spec.split(":")[0])
        ctx = cl.Context(cl.get_platforms()[p].get_devices())
        prg = cl.Program(ctx, src).build()
        out.append(["plain", value(ctx, cl.CommandQueue(ctx), prg.k)])
    elif step[0] == "probe":  # clmagic's device probe only
        from clmagic.opencl import devices
        devices.build_problem(devices.resolve_device(spec)[0])
    else:
        import clmagic
        from clmagic.config import Settings
        from clmagic.show.line import result_text
        c = clmagic.Compiler(Settings.from_env({{"CLMAGIC_CACHE_DIR": cache,
                                                "CLMAGIC_DEVICE": spec}}))
        r = c.build(src)
        saved = bool(r.saved)
        out.append([str(r.outcome), value(r.context, r.queue, r.kernels["k"]), saved,
                    result_text(r), len(list(c.store.entries())) if c.store is not None else -1])
print(json.dumps(out))
"""


def _run(steps: list, pocl: str, cache, **env: str) -> list:
    code = CHILD.format(src=SRC)
    env = {"POCL_KERNEL_CACHE": "0", VAR: "", "OCLGRIND_BUILD_OPTIONS": "", **env}
    proc = run_child(code.replace("sys.argv[1]", repr(json.dumps(steps)))
                     .replace("sys.argv[2]", repr(pocl)).replace("sys.argv[3]", repr(str(cache))),
                     **env)
    return last_json(proc)


def _not_cached(result: list, value: int, stored: int = 0) -> None:
    """A BYPASS computing ``value`` (the driver's), nothing saved, and the line says why."""
    outcome, got, saved, line, entries = result
    assert (outcome, got, saved, entries) == ("BYPASS", value, False, stored), result
    assert f"not cached: {VAR} changed after the driver" in line, line


def test_the_issues_example(tmp_path, pocl):
    """-DX=5 read by a plain pyopencl build, then -DX=7: clmagic's build is the driver's (5),
    not saved, and says why; a new process with -DX=7 computes 7."""
    out = _run([["plain"], ["env", VAR, "-DX=7"], ["clmagic"]], pocl, tmp_path, **{VAR: "-DX=5"})
    assert out[0] == ["plain", 5]
    _not_cached(out[1], 5)
    again = _run([["clmagic"]], pocl, tmp_path, **{VAR: "-DX=7"})
    assert again[0][:3] == ["MISS", 7, True], again


def test_set_in_the_process_before_clmagic_looked(tmp_path, pocl):
    out = _run([["env", VAR, "-DX=5"], ["plain"], ["env", VAR, "-DX=7"], ["clmagic"]],
               pocl, tmp_path)
    assert out[0] == ["plain", 5]
    _not_cached(out[1], 5)


def test_read_by_clmagics_own_probe(tmp_path, pocl):
    out = _run([["probe"], ["env", VAR, "-DX=7"], ["clmagic"]], pocl, tmp_path,
               **{VAR: "-DX=5"})
    _not_cached(out[0], 5)


def test_unset_after_the_driver_read_it(tmp_path, pocl):
    out = _run([["plain"], ["env", VAR, None], ["clmagic"]], pocl, tmp_path, **{VAR: "-DX=5"})
    _not_cached(out[1], 5)


def test_set_after_clmagic_built_without_it(tmp_path, pocl):
    """Unset when POCL first built (through clmagic): a value set later is not what it uses."""
    out = _run([["clmagic"], ["env", VAR, "-DX=7"], ["clmagic"]], pocl, tmp_path)
    assert out[0][:3] == ["MISS", 1, True], out
    _not_cached(out[1], 1, stored=1)


def test_a_value_the_process_started_with_is_cached(tmp_path, pocl):
    """No needless bypass: the value the process started with, read first by pyopencl, is the
    one POCL uses; the next process gets a HIT of it."""
    out = _run([["plain"], ["clmagic"]], pocl, tmp_path, **{VAR: "-DX=7"})
    assert out[0] == ["plain", 7] and out[1][:3] == ["MISS", 7, True], out
    again = _run([["clmagic"]], pocl, tmp_path, **{VAR: "-DX=7"})
    assert again[0][:2] == ["HIT", 7], again


def test_oclgrind_reads_its_flags_at_each_build(tmp_path, oclgrind):
    """Oclgrind reads ``OCLGRIND_BUILD_OPTIONS`` at every build: a change is keyed, not
    bypassed, and each build computes the value now."""
    name = "OCLGRIND_BUILD_OPTIONS"
    out = _run([["clmagic"], ["env", name, "-DX=7"], ["clmagic"], ["env", name, ""],
                ["clmagic"]], oclgrind, tmp_path)
    assert [r[:2] for r in out] == [["MISS", 1], ["MISS", 7], ["HIT", 1]], out


def _set(monkeypatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv(VAR, raising=False)
    else:
        monkeypatch.setenv(VAR, value)


@pytest.mark.parametrize("start, now, why", [
    (None, None, ""), ("-DX=5", "-DX=5", ""), (None, "-DX=7", "changed after the driver read"),
    ("-DX=5", None, "changed after the driver read"),
])
def test_changed_after_read(monkeypatch, start, now, why):
    """The rule alone, POCL not loaded at the first look: any value other than the one then."""
    monkeypatch.setattr(driver_env, "_look", None)
    monkeypatch.setattr(driver_env, "_pocl_loaded", lambda: False)
    _set(monkeypatch, start)
    driver_env.first_look()
    _set(monkeypatch, now)
    said = driver_env.changed_after_read(VAR)
    assert (why in said) if why else said == "", said
