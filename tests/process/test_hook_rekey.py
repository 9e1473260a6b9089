"""A comment-only edit of a program built through the hook is REKEYED in a new process, as the
same edit of a ``%%clkernel`` cell is (issue 32: one trip for both): the stored binary is loaded,
not built, and saved under the new key too; for a program of one device and of two."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import SAXPY, child_env, last_json

CHILD = """
import json, sys, numpy as np, pyopencl as cl, clmagic
comp = clmagic.Compiler(clmagic.Settings.from_env({"CLMAGIC_CACHE_DIR": sys.argv[2]}))
clmagic.install(comp)
p = int(sys.argv[1].split(":")[0])
devs = cl.get_platforms()[p].get_devices()
ctx = cl.Context(devs)
prg = cl.Program(ctx, SRC).build()
ok = []
for dev in devs:
    q = cl.CommandQueue(ctx, dev)
    x = np.arange(32, dtype=np.float32); y = np.ones_like(x)
    mf = cl.mem_flags
    xb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    yb = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=y)
    cl.Kernel(prg, "saxpy")(q, x.shape, None, np.float32(2), xb, yb)
    cl.enqueue_copy(q, y, yb)
    ok.append(bool(np.allclose(y, 2 * x + 1)))
comp.flush()
recs = comp.history.records
entries = {e.key: e.meta.rekeyed_from for e in comp.store.entries()}
print(json.dumps({"ok": ok, "outcomes": [r.outcome for r in recs], "keys": [r.key for r in recs],
                  "from": [r.rekeyed_from for r in recs], "saved": [r.saved_to_store for r in recs],
                  "entries": entries, "build_ms": [r.build_ms for r in recs]}))
"""


def _build(source: str, pocl: str, cache: str, **env: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", f"SRC = {source!r}\n" + CHILD, pocl, cache],
                          env=child_env(**env), capture_output=True, text=True, timeout=240)
    return last_json(proc)


@pytest.mark.parametrize("devices", ["pthread", "pthread basic"])
def test_a_comment_only_edit_through_the_hook_is_rekeyed(devices, pocl, cache_dir):
    env = {"POCL_DEVICES": devices}
    first = _build(SAXPY, pocl, str(cache_dir), **env)
    n = len(devices.split())
    assert first["outcomes"] == ["MISS"] * n and all(first["ok"]), first
    edited = "// a comment the compiler never reads\n" + SAXPY.replace("{", "{ /* too */", 1)
    again = _build(edited, pocl, str(cache_dir), **env)
    assert again["outcomes"] == ["REKEYED"] * n and all(again["ok"]), again
    # the first build's binary, loaded: its entry named as the origin, its build time kept
    assert again["from"] == first["keys"] and again["saved"] == [True] * n
    assert again["build_ms"] == pytest.approx(first["build_ms"], abs=0.01)
    assert {again["entries"][k] for k in again["keys"]} == set(first["keys"])
    third = _build(edited, pocl, str(cache_dir), **env)  # the new key is stored: a HIT now
    assert third["outcomes"] == ["HIT"] * n, third
