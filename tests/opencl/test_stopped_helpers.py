"""Helpers that stop answering (issue 22, class 4): a readout helper or vet child stopped with
SIGSTOP, or asleep for good, is killed after a bound set by the work, and the work is done
in-process (readout) or dropped (the entry is not used); nobody waits for it longer.

Each test runs its script in a subprocess with a timeout under the old 300 s wait: when a
helper can hold the user again, the test fails instead of hanging the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import HANG, SAXPY, child_env


def _run(script: str, tmp_path, timeout: float = 120, **env: str) -> dict[str, object]:
    base = child_env(**env)
    try:
        proc = subprocess.run([sys.executable, "-c", "import json, os, signal, sys\n" + HANG
                               + script],
                              env=base, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the script waited on a helper that stopped answering: {exc.stderr!r}")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] in "ZX"
    except OSError:
        return True


@pytest.mark.parametrize("then", ["saved", "lookup", "exit"])
def test_a_readout_helper_stopped_with_sigstop_is_killed_and_the_save_done_in_process(
        then, tmp_path, pocl):
    """The helper answers a first save, then is stopped: the next save (``r.saved``), a lookup of
    the same key (another compiler), or the process's exit right after the MISS finish without
    it; the entry is there and right."""
    cache = tmp_path / "cache"
    follow = {
        "saved": "out = dict(saved=r.saved, note=r.note)",
        "lookup": "out = dict(again=clmagic.Compiler().build(SRC2).outcome)",
        "exit": "out = {}",
    }[then]
    out = _run(f'''
import clmagic
from clmagic.opencl import readout
SRC, SRC2 = os.environ["SRC"], "#define SECOND\\n" + os.environ["SRC"]
c = clmagic.Compiler()
assert c.build(SRC).saved
pid = readout.helper_pid()
os.kill(pid, signal.SIGSTOP)
r = c.build(SRC2)
{follow}
out.update(stopped=pid, outcome=r.outcome)
print(json.dumps(out), flush=True)
''', tmp_path, SRC=SAXPY, CLMAGIC_CACHE_DIR=str(cache), CLMAGIC_DEVICE=pocl,
        CLMAGIC_READOUT_HELPER="1")
    assert out["outcome"] == "MISS"
    if then == "saved":
        assert out["saved"] is True and str(out["note"]).endswith("saved")
    if then == "lookup":
        assert out["again"] == "HIT"
    assert _gone(int(out["stopped"]))  # killed, not left stopped
    check = _run('''
import clmagic
r = clmagic.Compiler().build("#define SECOND\\n" + os.environ["SRC"])
print(json.dumps(dict(outcome=r.outcome)))
''', tmp_path, SRC=SAXPY, CLMAGIC_CACHE_DIR=str(cache), CLMAGIC_DEVICE=pocl)
    assert check["outcome"] == "HIT"


@pytest.mark.parametrize("mode", ["stop", "sleep"])
def test_a_readout_helper_that_never_answers_from_its_start_is_given_up(mode, tmp_path, pocl):
    """A helper stopped (or asleep on a pipe) from its start: each save is done in-process;
    after MAX_FAILURES such helpers no more are started."""
    out = _run('''
import clmagic
from clmagic.opencl import readout
c = clmagic.Compiler()
saved = [c.build(f"#define N{n}\\n" + os.environ["SRC"]).saved
         for n in range(readout.MAX_FAILURES + 1)]
print(json.dumps(dict(saved=saved, helper=readout.helper_pid())))
''', tmp_path, SRC=SAXPY, CLMAGIC_CACHE_DIR=str(tmp_path / "cache"), CLMAGIC_DEVICE=pocl,
        CLMAGIC_READOUT_HELPER="1", CLMAGIC_TEST_HANG=mode,
        CLMAGIC_TEST_HANG_WHO="clmagic.opencl.readout")
    assert all(out["saved"]) and out["helper"] is None


@pytest.mark.parametrize("mode", ["stop", "sleep"])
def test_a_vet_child_that_never_answers_is_killed_and_the_entry_not_used(mode, tmp_path, pocl):
    """An imported (untrusted) entry is proven by a vet child as it is imported; one that stops
    or sleeps for good is killed after its bound: the entry is not imported (the report says
    why) and the build is a MISS, built from source."""
    out = _run('''
import clmagic
from clmagic.store import DirectoryStore
src = os.environ["SRC"]
first = clmagic.Compiler(store=DirectoryStore(os.environ["A"]))
assert first.build(src).saved
clmagic.export_bundle(os.environ["B"] + ".db", store=first.store)
os.environ["CLMAGIC_TEST_HANG"] = os.environ["MODE"]  # from now on: the vet child hangs
rep = clmagic.import_bundle(os.environ["B"] + ".db", store=DirectoryStore(os.environ["B"]))
c = clmagic.Compiler(store=DirectoryStore(os.environ["B"]))
r = c.build(src)
print(json.dumps(dict(outcome=r.outcome, note=r.note, kernels=sorted(r.kernels),
                      imported=rep.imported, failed=rep.failed, reasons=rep.reasons)))
''', tmp_path, SRC=SAXPY, A=str(tmp_path / "a"), B=str(tmp_path / "b"), MODE=mode,
        CLMAGIC_DEVICE=pocl, CLMAGIC_TEST_HANG_WHO="clmagic.opencl.vet")
    assert (out["imported"], out["failed"]) == (0, 1) and len(out["reasons"]) == 1, out
    assert out["outcome"] == "MISS" and out["kernels"] == ["saxpy", "scale"]
