"""A MISS's binary readout and save run in the background (clmagic/trip/background.py): nothing
is lost (the save completes before the same key is looked up again, before the store is read,
before a normal exit), a dying process leaves no half-written entry, the GIL-free readout gives the
driver's own binary, and the source fast path normalises exactly as the split does."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pyopencl as cl
import pytest
from conftest import SAXPY, child_env, last_json, run_child

import clmagic
from clmagic.key.source import _cut_some_lines, _strip_every_line, normalise_source
from clmagic.opencl import driver
from clmagic.outcome import Outcome
from clmagic.store import DirectoryStore
from clmagic.trip.background import Saver, wait_everywhere


def _entries(cache_dir) -> list[str]:
    return sorted(p.name for p in cache_dir.rglob("*.clbin"))


def test_a_miss_returns_before_its_save_and_the_save_lands(compiler, cache_dir, pocl):
    r = compiler.build(SAXPY)
    # the note may start with what the MISS found new ("first build of … · saving")
    assert r.outcome == Outcome.MISS and r.latest.note.endswith(("saving", "saved"))
    assert r.saved and r.note.endswith("saved")  # these wait for the save
    assert r.latest.note.endswith("saved") and compiler.history.records[-1].saved_to_store
    assert _entries(cache_dir) == [f"{r.key}.clbin"]
    assert compiler.history.tally["SAVE"] == 1
    fresh = clmagic.Compiler(compiler.settings)  # another compiler: the entry is there to hit
    assert fresh.build(SAXPY).outcome == Outcome.HIT


def test_the_same_key_looked_up_again_waits_for_its_save(compiler, pocl):
    """A lookup right after the MISS (memory forgotten) finds the entry, never a second MISS."""
    for n in range(3):
        src = SAXPY + f"#define VARIANT {n}\n"
        first = compiler.build(src)
        compiler.forget()
        again = compiler.build(src)
        assert (first.outcome, again.outcome) == (Outcome.MISS, Outcome.HIT)


def test_reading_the_store_waits_for_pending_saves(compiler, cache_dir, pocl):
    keys = {compiler.build(SAXPY + f"// n{n}\n").key for n in range(3)}
    assert {e.key for e in compiler.store.entries()} == keys  # .store flushes first


def test_a_normal_exit_completes_pending_saves(cache_dir, pocl):
    """The child exits at once after its MISSes; atexit finishes the saves."""
    code = (
        "import json, clmagic\n"
        "c = clmagic.Compiler()\n"
        f"src = {SAXPY!r}\n"
        "keys = [c.build(src + f'// {n}\\n').key for n in range(4)]\n"
        "print(json.dumps({'keys': keys, 'busy': c.state.saves_pending}))\n"
    )
    out = last_json(run_child(code, CLMAGIC_CACHE_DIR=str(cache_dir), CLMAGIC_DEVICE=pocl))
    assert sorted(f"{k}.clbin" for k in out["keys"]) == [
        n for n in _entries(cache_dir) if n.endswith(".clbin")]


@pytest.mark.slow  # over 12 s: the default run stays under 5 min on 2 cores
def test_a_process_killed_mid_save_leaves_no_half_entry(cache_dir, pocl):
    """SIGKILL while saves of a large program run: every entry left loads (temp + rename)."""
    body = "".join(f"__kernel void k{i}(__global float *a) {{ a[{i}] = sin(a[{i}]) * {i}; }}\n"
                   for i in range(150))
    code = (
        "import sys, clmagic\n"
        "c = clmagic.Compiler()\n"
        f"body = {body!r}\n"
        "for n in range(50):\n"
        "    c.build(body + f'// {n}\\n')\n"
        "    print('built', flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env=child_env(CLMAGIC_CACHE_DIR=str(cache_dir), CLMAGIC_DEVICE=pocl))
    assert proc.stdout is not None
    for _ in range(2):
        assert proc.stdout.readline().startswith("built")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    store = DirectoryStore(cache_dir)
    info = clmagic.resolve_device(pocl)[0]
    compiler = clmagic.Compiler(store=store)
    for path in cache_dir.rglob("*.clbin"):
        entry = store.get(info.fingerprint, path.stem)  # raises CorruptEntry on a torn file
        assert entry is not None and entry.binary
    assert compiler.build(body + "// 0\n", device=pocl).outcome in (Outcome.HIT, Outcome.MISS)


def test_the_readout_without_the_gil_is_the_drivers_binary(pocl):
    info, dev = clmagic.resolve_device(pocl)
    ctx = cl.Context([dev])
    built = driver.from_source(ctx, [dev], SAXPY, "")
    ours = driver.binary_of(built.program, dev)
    theirs = driver._pyopencl_binary(built.program, dev)
    assert ours == theirs and len(ours) > 100
    loaded = driver.from_binaries(ctx, [dev], [ours], "")
    assert sorted(loaded.kernels) == ["saxpy", "scale"]


def test_the_readout_lets_other_threads_run(pocl):
    """While POCL generates machine code for the binary, the calling thread does not hold the
    GIL: another thread keeps running."""
    info, dev = clmagic.resolve_device(pocl)
    ctx = cl.Context([dev])
    body = "".join(f"__kernel void k{i}(__global float *a) {{ a[{i}] = sin(a[{i}]) * {i}; }}\n"
                   for i in range(64))
    built = driver.from_source(ctx, [dev], body, "")
    done = threading.Event()
    ticks = 0

    def read() -> None:
        driver.binary_of(built.program, dev)
        done.set()

    threading.Thread(target=read).start()
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    assert ticks > 5


def test_a_failing_save_is_reported_and_nobody_hangs(compiler, pocl, monkeypatch):
    def broken(entry):
        raise OSError("disk on fire")

    monkeypatch.setattr(compiler.store, "put", broken)
    r = compiler.build(SAXPY)
    assert not r.saved and "disk on fire" in r.note
    assert not compiler.history.records[-1].saved_to_store


def test_on_pocl_a_helper_process_reads_the_binary_out_so_the_first_launch_does_not_wait(
        compiler, cache_dir, pocl, tmp_path, monkeypatch):
    """Reading a POCL binary holds POCL's compiler lock while it generates every kernel: the
    background save asks a helper process for it (the same source, options, device), so the
    user's program is never read out; the entry saved is the same program (a HIT computes the
    same values); a source that reads a header just written is read in-process (one that reads
    older headers goes there too: tests/trip/test_readout_headers.py), a helper that died is
    started again."""
    from clmagic.opencl import readout

    monkeypatch.delenv("CLMAGIC_READOUT_HELPER", raising=False)  # the default: on
    assert not readout.needs_helper("Intel(R) OpenCL") and readout.needs_helper(
        "Portable Computing Language")
    monkeypatch.setenv("CLMAGIC_READOUT_HELPER", "0")
    assert not readout.needs_helper("Portable Computing Language")
    monkeypatch.delenv("CLMAGIC_READOUT_HELPER")
    asked: list[str] = []
    inner = readout.read_out

    def spy(fingerprint: str, source: str, options: str, build_ms: float = 0.0,
            cwd: str | None = None, idle: bool = False) -> bytes | None:
        asked.append(source)
        return inner(fingerprint, source, options, build_ms, cwd, idle)

    readout.read_out = spy
    try:
        many = SAXPY + "".join(f"__kernel void k{i}(__global float *a) {{ a[{i}] = {i}; }}\n"
                               for i in range(8))
        r = compiler.build(many)
        assert r.outcome == Outcome.MISS and r.saved and asked == [normalise_source(many)]
        assert readout._helper is not None and readout._helper.poll() is None  # kept for more
        fresh = clmagic.Compiler(compiler.settings)
        hit = fresh.build(many)
        assert hit.outcome == Outcome.HIT
        queue = cl.CommandQueue(hit.context)
        out = cl.Buffer(hit.context, cl.mem_flags.READ_WRITE, 64)
        hit.kernels["k7"](queue, (1,), None, out)
        got = np.zeros(16, np.float32)
        cl.enqueue_copy(queue, got, out)
        assert got[7] == 7
        (tmp_path / "h.h").write_text("#define H 3\n")
        with_header = f'#include "{tmp_path}/h.h"\n' + SAXPY
        assert compiler.build(with_header).saved and len(asked) == 1  # a header just written:
        # too new to trust, so read in-process
        readout._helper.kill()  # a helper gone is started again for the next save: none lost
        readout._helper.wait()
        r = compiler.build(SAXPY + "// after the helper died\n")
        assert r.saved and len(asked) == 2
    finally:
        readout.read_out = inner


def test_saver_runs_jobs_in_order_and_waits_by_tag():
    saver = Saver()
    seen: list[int] = []
    gate = threading.Event()
    saver.submit("a", lambda: (gate.wait(5), seen.append(1)))
    saver.submit("b", lambda: seen.append(2))
    assert saver.pending("a") and saver.pending("b")
    gate.set()
    saver.wait("b")
    assert seen == [1, 2] and not saver.pending("a") and saver.busy == 0
    saver.submit(None, lambda: 1 / 0)  # a failing job does not stop the worker
    saver.submit("c", lambda: seen.append(3))
    saver.flush()
    assert seen == [1, 2, 3]


def test_jobs_that_do_not_wake_run_with_the_next_that_does_on_flush_or_after_a_while():
    """Counters are submitted with ``wake=False``: no thread switch per HIT, yet none is lost."""
    saver = Saver()
    saver.LAZY_S = 0.3
    seen: list[str] = []
    saver.submit(None, lambda: seen.append("idle"))  # the thread is up and waiting
    saver.flush()
    saver.submit(None, lambda: seen.append("lazy"), wake=False)
    time.sleep(0.1)
    assert seen == ["idle"] and saver.busy == 1  # not woken for it
    saver.submit("save", lambda: seen.append("save"))
    saver.wait("save")
    assert seen == ["idle", "lazy", "save"]  # in order, with the job that woke the thread
    saver.submit(None, lambda: seen.append("flushed"), wake=False)
    saver.flush()
    assert seen[-1] == "flushed"
    t0 = time.monotonic()
    saver.submit(None, lambda: seen.append("late"), wake=False)
    while seen[-1] != "late" and time.monotonic() - t0 < 10:
        time.sleep(0.02)
    assert seen[-1] == "late" and 0.25 <= time.monotonic() - t0 < 5  # after LAZY_S, unasked


def _split(source: str) -> str:
    """The slow path (issue 11: split at \\n only, blanks kept after a splice)."""
    lines = source.replace("\r\n", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    return "\n".join(line if line.rstrip(" \t").endswith(("\\", "??/"))
                     else line.rstrip(" \t") for line in lines) + "\n"


def test_normalise_fast_path_agrees_with_the_split():
    rng = random.Random(15)
    alphabet = "ab \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\u2028\u2029\xa0\u3000;{}\\?/"
    for _ in range(50_000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
        assert normalise_source(s) == _split(s), repr(s)
        ended = s.replace("\r\n", "\n")  # both ways of cutting, whichever is chosen
        ended += "" if ended.endswith("\n") else "\n"
        assert _cut_some_lines(ended) == _strip_every_line(ended) == _split(s), repr(s)
    pieces = ["a", " ", "\t", "\\", "??/", "\r\n", "\n", "é"]  # splices next to blanks
    for _ in range(20_000):
        s = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 16)))
        assert normalise_source(s) == _split(s), repr(s)
    normal = "__kernel void k(__global int *a)\n{\n    a[0] = 1;\n}\n"
    assert normalise_source(normal) is normal
    odd = "// Å, \u2028, \x0c and a lone \r are no line ends here\n" + normal  # nor copied
    assert normalise_source(odd) is odd



READER = '''
import json, os, threading
import clmagic
from clmagic.opencl import driver
seen = []
original = driver.binary_of
def binary_of(program, dev):  # which thread reads the binary out
    seen.append(threading.current_thread().name)
    return original(program, dev)
driver.binary_of = binary_of
c = clmagic.Compiler()
r = c.build("#include \\"one.h\\"\\n" + os.environ["SRC"], "-I" + os.environ["INC"])
read_when_returned = list(seen)
saved = r.saved
print(json.dumps(dict(seen=seen, at_return=read_when_returned, saved=saved)))
'''


def test_a_binary_is_never_read_out_beside_the_users_driver_calls(tmp_path, pocl, oclgrind):
    """Debian's POCL 3.1 aborts when a background readout's code generation meets the user's
    kernels (pyopencl's own tests under `clmagic run`, test_pyopencl_suite); Oclgrind frees a
    binary twice when the user reads `program.binaries` while the saver reads the same program
    (test_hook_contract's from_binaries): a binary the helper does not read (a source with
    headers) is read out by the building thread before the build returns, on every driver, and
    only the store's write is left to the saver."""
    (tmp_path / "one.h").write_text("#define ONE 1\n")
    for device in (pocl, oclgrind):
        out = last_json(run_child(READER, SRC=SAXPY, INC=str(tmp_path), CLMAGIC_DEVICE=device,
                                  CLMAGIC_CACHE_DIR=str(tmp_path / "cache"),
                                  CLMAGIC_READOUT_HELPER="1"))
        assert out["seen"] == out["at_return"] == ["MainThread"], (device, out)
        assert out["saved"] is True


def test_a_readout_that_fails_in_the_building_thread_costs_the_save_not_the_build(tmp_path,
                                                                                  oclgrind):
    """The building thread reads the binary out now; a driver that fails there leaves the build
    standing, and the save says why it was not made."""
    out = last_json(run_child('''
import json, os
import clmagic
from clmagic.opencl import driver
def binary_of(program, dev):
    raise RuntimeError("no binary today")
driver.binary_of = binary_of
r = clmagic.Compiler().build(os.environ["SRC"])
print(json.dumps(dict(outcome=r.outcome, kernels=sorted(r.kernels), saved=r.saved, note=r.note)))
''', SRC=SAXPY, CLMAGIC_DEVICE=oclgrind, CLMAGIC_CACHE_DIR=str(tmp_path / "cache")))
    assert out["outcome"] == "MISS" and out["kernels"] == ["saxpy", "scale"]
    assert out["saved"] is False and "no binary today" in out["note"], out


def test_a_lookup_waits_for_a_save_of_its_key_on_any_saver_and_for_nothing_else():
    """wait_everywhere: a tagged job of another saver is waited for; untagged jobs (counters)
    and other keys are not, and once every tagged job is done nothing is."""
    first, other = Saver(), Saver()
    gate, hold = threading.Event(), threading.Event()
    seen: list[str] = []
    other.submit(("fp", "k"), lambda: (gate.wait(5), seen.append("saved")))
    threading.Timer(0.2, gate.set).start()
    wait_everywhere(("fp", "k"))
    assert seen == ["saved"]
    first.submit(None, lambda: hold.wait(5))  # a counter that takes its time
    first.submit(("fp", "k2"), lambda: seen.append("k2"))  # queued behind it
    t = time.monotonic()
    wait_everywhere(("fp", "k"))  # its save is done: at once
    assert time.monotonic() - t < 0.1 and first.pending(("fp", "k2"))
    hold.set()
    wait_everywhere(("fp", "k2"))
    assert seen == ["saved", "k2"] and first.busy == 0
