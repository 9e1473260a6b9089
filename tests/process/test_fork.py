"""Processes that fork (issue 22, class 3): a child forked from a process that used clmagic exits
promptly, loses none of its parent's data, never uses its parent's driver objects, connections
or helper, and counts its own work once.

Every test runs a script that really forks (``os.fork``), in a subprocess with a timeout: when a
fork hangs again, the test fails instead of hanging the suite.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest
from conftest import SAXPY, child_env

from clmagic.trip.background import FORKED_NOTE

#: what every script starts with: a fork whose child runs ``work`` and ends with sys.exit(0)
PRELUDE = '''
import json, os, sys, threading, time
import clmagic
from clmagic.outcome import Outcome
SRC = os.environ["SRC"]
def say(**what):
    print(json.dumps(what), flush=True)
def fork(work):
    """Run work() in a forked child that then ends as scripts do, with sys.exit(0)."""
    pid = os.fork()
    if pid == 0:
        try:
            work()
        except BaseException as exc:
            print("child failed:", repr(exc), file=sys.stderr, flush=True)
            os._exit(3)
        sys.exit(0)
    return pid
def reap(pid):
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
'''


def _run(script: str, timeout: float = 150, stderr: bool = False,
         **env: str) -> dict[str, object]:
    """Run ``PRELUDE + script``; every JSON line it prints, merged (a child's and the parent's),
    and with ``stderr`` what it printed there."""
    try:
        proc = subprocess.run([sys.executable, "-c", PRELUDE + script],
                              env=child_env(**env), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the forking script hung ({exc.timeout:g} s): {exc.stderr!r}")
    assert proc.returncode == 0, proc.stderr
    merged: dict[str, object] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            merged.update(json.loads(line))
    if stderr:
        merged["stderr"] = proc.stderr
    return merged


#: a program that takes POCL a while to build and read out (its kernels' code made at readout)
BIG = '''
BIG = "".join(f"__kernel void k{i}(__global float *a) {{ a[{i}] = sin(a[{i}]) * {i}; }}\\n"
              for i in range(120))
'''

#: the parent's saves wait at a gate until its child has ended: the fork is made while a save
#: is under way (its job running on the saver's thread, which the child does not have)
GATED = '''
from clmagic.store import DirectoryStore
PARENT = os.getpid()
gate = threading.Event()
class Gated(DirectoryStore):
    def put(self, entry):
        if os.getpid() == PARENT:
            gate.wait(60)
        return super().put(entry)
store = Gated(os.environ["CLMAGIC_CACHE_DIR"])
c = clmagic.Compiler(store=store)
r = c.build(SRC)
'''


@pytest.mark.parametrize("form", ["exit", "read", "build"])
def test_a_child_forked_while_a_save_runs_ends_and_the_parent_saves(form, cache_dir, pocl):
    """The child ends with sys.exit(0) at once (``exit``); reads the result of the save it
    inherited and looks the same key up again (``read``: the save is its parent's, said so, and
    the lookup does not wait for a job the child does not have); builds and saves a program of
    its own (``build``: its exit waits for its own save only). The parent's save lands."""
    work = {
        "exit": "pass",
        "read": "say(saved=r.saved, note=r.note, again=c.build(SRC).outcome)",
        "build": "mine = c.build('#define CHILD\\n' + SRC); say(child=mine.outcome)",
    }[form]
    out = _run(GATED + f'''
def work():
    {work}
pid = fork(work)
code = reap(pid)
gate.set()
say(code=code, outcome=r.outcome, parent_saved=r.saved,
    keys=sorted(e.key for e in c.store.entries()),
    misses=sum(n for (fp, name), (n, v) in c.store.counters.lifetime().items() if name == "MISS"))
''', SRC=SAXPY, CLMAGIC_CACHE_DIR=str(cache_dir), CLMAGIC_DEVICE=pocl)
    assert out["code"] == 0 and out["outcome"] == "MISS" and out["parent_saved"] is True
    if form == "read":
        assert out["saved"] is False and out["note"] == FORKED_NOTE
        assert out["again"] == "MISS"  # not the parent's program from memory: built anew
    if form == "build":
        assert out["child"] == "MISS" and len(out["keys"]) == 2  # both saves landed
        assert out["misses"] == 2  # each process counted its own MISS, once
    else:
        assert len(out["keys"]) == 1 and out["misses"] == (2 if form == "read" else 1)


@pytest.mark.parametrize("device", ["pocl", "oclgrind"])
def test_hits_counted_before_a_fork_are_counted_once_and_the_childs_own_too(
        device, cache_dir, request):
    """A HIT's counts are queued lazily (the hit counter, the lifetime counters): a child forked
    right after one must neither write them again nor lose its own."""
    spec = request.getfixturevalue(device)
    out = _run('''
clmagic.Compiler().build(SRC).saved  # a MISS, saved
c = clmagic.Compiler()
hit = c.build(SRC)
def work():
    again = clmagic.Compiler().build(SRC)
    say(child=again.outcome)
code = reap(fork(work))
c.flush()
entry = c.store.get(hit.device.fingerprint, hit.key)
life = c.store.counters.lifetime()
say(code=code, parent=hit.outcome, hits=entry.usage.hits,
    counted=sum(n for (fp, name), (n, v) in life.items() if name == "HIT"))
''', SRC=SAXPY, CLMAGIC_CACHE_DIR=str(cache_dir), CLMAGIC_DEVICE=spec)
    assert (out["code"], out["parent"], out["child"]) == (0, "HIT", "HIT")
    assert out["hits"] == 2 and out["counted"] == 2


def test_a_child_forked_while_the_sqlite_store_is_held_uses_its_own_connection(tmp_path, pocl):
    """The fork is made while the parent's saver thread is inside the SQLite store's lock
    (waiting for a write lock another connection holds): the child's own lookups and save go
    through a new lock and connection; the parent's connection is neither used nor closed by
    the child; the file stays whole, with every process's entries and provenance."""
    db = tmp_path / "cache.db"
    out = _run('''
import sqlite3
c = clmagic.Compiler()
c.build("#define FIRST\\n" + SRC).saved  # the file and its tables exist
import subprocess
holder = subprocess.Popen([sys.executable, "-c", (  # another writer holds the file's write lock
    "import sqlite3, sys; db = sqlite3.connect(sys.argv[1], isolation_level=None); "
    "db.execute('BEGIN IMMEDIATE'); print('held', flush=True); sys.stdin.read()"),
    os.environ["CLMAGIC_CACHE_DIR"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
assert holder.stdout.readline().strip() == "held"
r = c.build(SRC)  # its save waits for that lock, holding the store's own lock meanwhile
saver = next(t for t in threading.enumerate() if t.name == "clmagic-saver")
def inside():
    frame = sys._current_frames().get(saver.ident)
    while frame is not None:
        if frame.f_code.co_name == "_transact":
            return True
        frame = frame.f_back
    return False
end = time.monotonic() + 30
while not inside() and time.monotonic() < end:
    time.sleep(0.01)
def work():
    mine = c.build("#define CHILD\\n" + SRC)  # through the store object the parent holds
    say(child=mine.outcome, child_saved=mine.saved, child_note=mine.note, child_pid=os.getpid())
say(inside_at_fork=inside())
pid = fork(work)
holder.kill()  # it lets go (not by closing its stdin: the child holds a copy of that pipe)
holder.wait()
code = reap(pid)
say(code=code, parent_saved=r.saved,
    keys=sum(1 for _ in c.store.entries()), pid=os.getpid())
''', SRC=SAXPY, CLMAGIC_CACHE_DIR=str(db), CLMAGIC_DEVICE=pocl)
    assert out["inside_at_fork"] is True
    assert out["code"] == 0 and out["child"] == "MISS" and out["child_saved"] is True
    assert out["parent_saved"] is True and out["keys"] == 3
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        pids = {row[0] for row in conn.execute("SELECT pid FROM provenance")}
    conn.close()
    assert {out["pid"], out["child_pid"]} <= pids


def test_a_child_does_not_reuse_its_parents_programs_or_contexts(cache_dir, oclgrind):
    """The memory front and the device contexts are the parent's: the child's build of the same
    source loads it from the store into a context of its own (Oclgrind runs kernels after a
    fork; POCL does not: its worker threads are not in the child, see docs/reliability.md)."""
    out = _run('''
import numpy as np, pyopencl as cl
c = clmagic.Compiler()
r = c.build(SRC)
r.saved
def work():
    again = c.build(SRC)
    buf = cl.Buffer(again.context, cl.mem_flags.READ_WRITE, 4)
    again.kernels["k"](again.queue, (1,), None, buf)
    got = np.zeros(1, np.int32)
    cl.enqueue_copy(again.queue, got, buf)
    say(child=again.outcome, value=int(got[0]),
        same_context=again.context.int_ptr == r.context.int_ptr,
        same_program=again.program.int_ptr == r.program.int_ptr)
code = reap(fork(work))
say(code=code, parent_after=c.build(SRC).outcome)
''', SRC="__kernel void k(__global int *a) { a[0] = 41; }",
        CLMAGIC_CACHE_DIR=str(cache_dir), CLMAGIC_DEVICE=oclgrind)
    assert out["code"] == 0 and out["child"] == "HIT" and out["value"] == 41
    assert not out["same_context"] and not out["same_program"]
    assert out["parent_after"] == "MEMORY"  # the parent's own memory is untouched


def test_a_child_starts_its_own_readout_helper_and_leaves_its_parents_alone(cache_dir, pocl):
    """POCL's readout helper belongs to the process that started it: a child never writes to its
    pipe (the two would mix their messages), never kills it at exit; it starts its own."""
    out = _run('''
from clmagic.opencl import readout
c = clmagic.Compiler()
first = c.build("#define FIRST\\n" + SRC)
first.saved
helper = readout.helper_pid()
def work():
    mine = c.build("#define CHILD\\n" + SRC)
    say(child_saved=mine.saved, child_helper=readout.helper_pid())
code = reap(fork(work))
after = c.build("#define AFTER\\n" + SRC)
say(code=code, helper=helper, still=readout.helper_pid(), after_saved=after.saved,
    keys=sum(1 for _ in c.store.entries()))
''', SRC=SAXPY, CLMAGIC_CACHE_DIR=str(cache_dir), CLMAGIC_DEVICE=pocl,
        CLMAGIC_READOUT_HELPER="1")
    assert out["code"] == 0 and out["helper"] is not None and out["child_saved"] is True
    assert out["child_helper"] not in (None, out["helper"])
    assert out["still"] == out["helper"] and out["after_saved"] is True and out["keys"] == 3


def test_fork_workers_of_a_pool_build_and_save(cache_dir, oclgrind):
    """multiprocessing's fork start (a pool of workers forked from a process that built): each
    worker builds, waits for its save, and answers; the parent then hits every entry."""
    out = _run('''
import concurrent.futures, multiprocessing
c = clmagic.Compiler()
c.build(SRC).saved
def job(n):
    r = clmagic.Compiler().build(f"#define WORKER {n}\\n" + SRC)
    return r.outcome, r.saved
ctx = multiprocessing.get_context("fork")
with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
    got = list(pool.map(job, range(3)))
fresh = clmagic.Compiler()
say(got=got, hits=[fresh.build(f"#define WORKER {n}\\n" + SRC).outcome for n in range(3)])
''', SRC=SAXPY, CLMAGIC_CACHE_DIR=str(cache_dir), CLMAGIC_DEVICE=oclgrind)
    assert out["got"] == [["MISS", True]] * 3 and out["hits"] == ["HIT"] * 3


@pytest.mark.slow  # 15 s: the default run stays under 5 min on 2 cores
def test_a_child_forked_while_another_thread_builds_gets_its_stderr_back(
        cache_dir, pocl, oclgrind):
    """A build sends the driver's chatter to a sink (fd 2 redirected, for the whole process)
    while it runs: a child forked then has no thread that would give its stderr back, so the
    fork does; the child's messages are seen and it builds (on another driver: the one that was
    building in the parent holds its own locks in the child, see docs/reliability.md)."""
    out = _run(BIG + '''
before = os.fstat(2).st_ino
builder = threading.Thread(target=lambda: clmagic.Compiler().build(BIG))
builder.start()
end = time.monotonic() + 60
while os.fstat(2).st_ino == before and time.monotonic() < end:
    time.sleep(0.001)
def work():
    print("the child speaks", file=sys.stderr, flush=True)
    mine = clmagic.Compiler().build(SRC, device=os.environ["OTHER"])
    say(child=mine.outcome, child_err=os.fstat(2).st_ino == before)
redirected = os.fstat(2).st_ino != before
code = reap(fork(work))
builder.join()
say(code=code, redirected=redirected)
''', SRC=SAXPY, CLMAGIC_CACHE_DIR=str(cache_dir), CLMAGIC_DEVICE=pocl, OTHER=oclgrind,
        stderr=True)
    assert out["redirected"] is True  # the fork was made while the build held stderr
    assert out["code"] == 0 and out["child"] == "MISS" and out["child_err"] is True
    assert "the child speaks" in str(out["stderr"])


def test_a_fork_waits_for_the_readout_the_saver_is_doing(cache_dir, pocl, tmp_path):
    """POCL's in-process readout holds POCL's compiler lock; a child forked in the middle of it
    would find that lock held for ever and hang in its first build. The fork waits for the
    saver's readout, so the child builds on the same driver. (On POCL the saver reads a binary
    out in-process only when the readout helper fails: here it is stopped from its start.)"""
    from conftest import HANG

    out = _run(HANG + '''
c = clmagic.Compiler()
r = c.build("".join(f"__kernel void k{i}(__global float *a) {{ a[{i}] = {i}; }}\\n"
                    for i in range(8)))  # its readout: a few seconds, under FORK_WAIT_S
saver = next(t for t in threading.enumerate() if t.name == "clmagic-saver")
def reading():
    frame = sys._current_frames().get(saver.ident)
    while frame is not None:
        if frame.f_code.co_name == "binary_of":
            return True
        frame = frame.f_back
    return False
end = time.monotonic() + 60
while not reading() and time.monotonic() < end:
    time.sleep(0.001)
def work():
    say(child=clmagic.Compiler().build(SRC).outcome)
say(reading_at_fork=reading())
code = reap(fork(work))
say(code=code, parent_saved=r.saved)
''', SRC=SAXPY, CLMAGIC_CACHE_DIR=str(cache_dir), CLMAGIC_DEVICE=pocl,
        CLMAGIC_READOUT_HELPER="1", CLMAGIC_TEST_HANG="stop",
        CLMAGIC_TEST_HANG_WHO="clmagic.opencl.readout")
    assert out["reading_at_fork"] is True
    assert out["code"] == 0 and out["child"] == "MISS" and out["parent_saved"] is True
