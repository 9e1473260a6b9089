"""POCL's kernel cache off, a stored binary loaded by several processes at once: none aborts.

With ``POCL_KERNEL_CACHE=0`` a POCL binary names the folder of the process that built it, every
program loaded from it used that folder, and each release removed it: a kernel being linked
elsewhere then failed and POCL aborted its process ("Final linking of kernel k failed"). The
issue saw it as a crash of readers of a cache that eviction kept rewriting (every rewrite is a
new binary loaded everywhere); here the same load-launch-release is done directly, by three
processes on one entry (it aborted at least one of them in every run before the fix)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import child_env, run_child

from clmagic.opencl import pocl_binary

SRC = "__kernel void k(__global int *a) { a[get_global_id(0)] = 7; }\n"
# one process of the entry's readers: every load goes through driver.from_binaries (the hook's,
# a HIT's and the vet child's alike); each launches a new work-group shape (POCL links a kernel
# into the program's folder then) and releases the program (POCL removes the folder then)
READER = """
import gc, sys
import numpy as np, pyopencl as cl
from clmagic.opencl import devices, driver
binary = bytes.fromhex(sys.stdin.read())
_info, dev = devices.resolve_device({spec!r})
ctx = cl.Context([dev]); queue = cl.CommandQueue(ctx)
for i in range({rounds}):
    built = driver.from_binaries(ctx, [dev], [binary], "", kernels=False)
    n = 1 + i % 64
    b = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, 4 * n)
    built.program.k(queue, (n,), None, b)
    out = np.zeros(n, np.int32); cl.enqueue_copy(queue, out, b)
    assert (out == 7).all()
    del built, b; gc.collect()
print("done")
"""
ENV = {"POCL_KERNEL_CACHE": "0", "CLMAGIC_READOUT_HELPER": "1"}


def _binary(tmp_path, pocl: str) -> bytes:
    """The binary a MISS stored (read out by the helper, as users have it)."""
    code = f"""
import sys, clmagic
from clmagic.config import Settings
c = clmagic.Compiler(Settings.from_env({{"CLMAGIC_CACHE_DIR": {str(tmp_path / "c")!r},
                                        "CLMAGIC_DEVICE": {pocl!r}}}))
assert c.build({SRC!r}).saved
e = next(c.store.entries())
sys.stdout.write(c.store.get(e.fingerprint, e.key).binary.hex())
"""
    proc = run_child(code, **ENV)
    assert proc.returncode == 0, proc.stderr
    return bytes.fromhex(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # about 15 s alone: three processes, 40 loads each
def test_readers_of_one_entry_with_pocls_cache_off_do_not_abort(tmp_path, pocl):
    binary = _binary(tmp_path, pocl).hex()
    code = READER.format(spec=pocl, rounds=40)
    readers = [subprocess.Popen([sys.executable, "-c", code], env=child_env(**ENV),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
               for _ in range(3)]
    for p in readers:  # all of them at once: each reads its binary after its imports
        assert p.stdin is not None
        p.stdin.write(binary)
        p.stdin.close()
    ends = [((p.stdout.read(), p.stderr.read()), p.wait(240)) for p in readers]
    aborted = [err[-300:] for (_, err), rc in ends if rc == -signal.SIGABRT]
    assert not aborted, aborted
    assert all(rc == 0 and out.strip() == "done" for (out, _), rc in ends), ends


def test_each_load_names_a_folder_of_its_own(tmp_path, pocl, monkeypatch):
    """The stored binary names the builder's folder; two loads here name two new ones, and a
    binary of a layout not known is refused rather than loaded into a shared folder."""
    binary = _binary(tmp_path, pocl)
    name = pocl_binary.folder_of(binary)
    assert name is not None and name.startswith(b"_UNCACHED_")
    monkeypatch.setattr(pocl_binary, "pocl_cache_kept", lambda: False)
    a, b = pocl_binary.own_folder(binary), pocl_binary.own_folder(binary)
    names = {name, pocl_binary.folder_of(a), pocl_binary.folder_of(b)}
    assert len(names) == 3 and None not in names
    assert len(a) == len(binary) and a[77:] == binary[77:]
    future = binary[:16] + (99).to_bytes(4, "little") + binary[20:]
    try:
        pocl_binary.own_folder(future)
    except pocl_binary.UnsafeBinary:
        pass
    else:
        raise AssertionError("a binary of an unknown layout was handed on")
    monkeypatch.setattr(pocl_binary, "pocl_cache_kept", lambda: True)
    assert pocl_binary.own_folder(binary) is binary  # POCL's cache on: its shared folder


def test_every_program_from_binaries_is_made_in_one_place():
    """The folder rule holds for every load only if every load goes through
    ``raw_from_binaries``: no other call makes a program from binaries."""
    root = Path(__file__).resolve().parents[2] / "clmagic"
    arg = r"(?:[^,()]|\([^()]*\))*"  # one argument, calls in it included
    made = re.compile(rf"Program\({arg},{arg},|create_program_with_binary")
    found = [f"{path.relative_to(root)}:{n}" for path in root.rglob("*.py")
             for n, line in enumerate(path.read_text().splitlines(), 1) if made.search(line)]
    assert found == ["opencl/pyopencl_program.py:99"], found
