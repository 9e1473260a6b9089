"""A first run under the hook does not wait at its end for the saves still queued (issue 33):
they are handed to a process of their own (clmagic/trip/finish.py), which stores them after the
user's process has gone; the next process finds them."""

from __future__ import annotations

import subprocess
import sys
import time

from conftest import child_env, last_json

CHILD = """
import json, sys, threading, pyopencl as cl, clmagic
from clmagic.trip.background import before_exit
comp = clmagic.Compiler(clmagic.Settings.from_env({"CLMAGIC_CACHE_DIR": sys.argv[2]}))
clmagic.install(comp)
p, d = (int(x) for x in sys.argv[1].split(":"))
ctx = cl.Context([cl.get_platforms()[p].get_devices()[d]])
if sys.argv[3] == "first":  # the saver busy with a job of its own until the handover is done:
    busy = threading.Event()  # the saves queue behind it
    comp.state.submit_save(None, lambda: busy.wait(60))
    before_exit(busy.set)  # after clmagic's own (the handover)
for i in range(5):
    cl.Program(ctx, f"__kernel void k{i}(__global int *a) {{ a[0] = {i}; }}").build()
# the state's own history: the compiler's waits for the saves
print(json.dumps({"outcomes": [r.outcome for r in comp.state.history.records]}), flush=True)
"""


def _run(pocl: str, cache: str, which: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, pocl, cache, which],
                          env=child_env(CLMAGIC_READOUT_HELPER="1", CLMAGIC_CACHE_DEBUG="1"),
                          capture_output=True, text=True, timeout=240)


def test_saves_left_at_exit_are_finished_by_a_process_of_their_own(pocl, cache_dir):
    first = _run(pocl, str(cache_dir), "first")
    assert last_json(first)["outcomes"] == ["MISS"] * 5
    assert "HANDOVER 5 save(s)" in first.stderr, first.stderr
    end = time.monotonic() + 120  # the finisher runs under SCHED_IDLE: give it the time it needs
    while len(list(cache_dir.rglob("*.clbin"))) < 5 and time.monotonic() < end:
        time.sleep(0.2)
    assert len(list(cache_dir.rglob("*.clbin"))) == 5
    second = _run(pocl, str(cache_dir), "second")
    assert last_json(second)["outcomes"] == ["HIT"] * 5, second.stderr[-2000:]
