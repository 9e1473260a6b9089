"""The worker pool of ``warm`` and sweeps (:mod:`clmagic.cache.pool`): workers started by the
launcher answer each job once; a job that raises is that job's one-line error; a worker that
dies fails only the job it held and is replaced for the rest.

The workers run a small module of the test's (``serve`` over its own setup and work), pinned
for the children as clmagic is (:data:`clmagic._launch.NEEDED`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from clmagic import _launch
from clmagic.cache.pool import run_pool

WORKER = '''
import os, sys
from clmagic.cache.pool import serve
state = {}
def setup(value):
    state["setup"] = value
def work(kind, n):
    if kind == "die":
        os._exit(7)
    if kind == "raise":
        raise ValueError(f"no {n}\\nsecond line")
    print("noise on stdout", flush=True)  # never mixed into the answers
    os.write(1, b"more noise\\n")
    return (state["setup"], n, os.getpid())
if __name__ == "__main__":
    sys.exit(serve(setup, work))
'''


@pytest.fixture
def worker_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    folder = tmp_path / "pinned"
    folder.mkdir()
    (folder / "clmagic_pool_probe.py").write_text(WORKER)
    monkeypatch.syspath_prepend(str(folder))
    import clmagic_pool_probe  # noqa: F401 - imported here: pinned for the workers

    monkeypatch.setattr(_launch, "NEEDED", (*_launch.NEEDED, "clmagic_pool_probe"))
    yield "clmagic_pool_probe"
    sys.modules.pop("clmagic_pool_probe", None)


@pytest.mark.timeout(120)
def test_each_job_is_answered_once_and_a_dead_worker_fails_only_its_own(worker_module):
    jobs = [("ok", 0), ("ok", 1), ("raise", 2), ("die", 3), ("ok", 4), ("ok", 5), ("die", 6),
            ("ok", 7)]
    got: dict[int, tuple[object, str]] = {}

    def done(job, answer, why):
        assert job[1] not in got
        got[job[1]] = (answer, why)

    interrupted, dropped = run_pool(worker_module, "the setup", jobs, 2, done)
    assert (interrupted, dropped) == (False, 0)
    assert sorted(got) == list(range(8))
    for n in (0, 1, 4, 5, 7):
        answer, why = got[n]
        assert why == "" and answer[:2] == ("the setup", n)
    assert got[2] == (None, "ValueError: no 2")
    for n in (3, 6):
        assert got[n][0] is None and got[n][1] == "the worker process died (exit 7)"
    # the dead were replaced: more than two workers answered over the run
    assert len({got[n][0][2] for n in (0, 1, 4, 5, 7)}) >= 2


@pytest.mark.timeout(60)
def test_a_worker_that_cannot_start_fails_each_job_with_why(worker_module, monkeypatch):
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    got = []
    run_pool(worker_module, None, [("ok", 1), ("ok", 2)], 2,
             lambda job, answer, why: got.append((job[1], answer, why)))
    assert sorted(n for n, _, _ in got) == [1, 2]
    assert all(a is None and why.startswith("a worker process could not start")
               for _, a, why in got)
