"""Worker processes for the cache's parallel builds (``clmagic warm``, sweeps): each one a
``python -m MODULE`` started by :func:`clmagic._launch.launch`, that runs :func:`serve`.

Why not :mod:`multiprocessing`: its spawn start re-imports the user's main module in every
worker (a plain script without ``if __name__ == "__main__":`` that called ``clmagic.sweep(...,
jobs=2)`` ran its own top level again in each, and every variant FAILED "worker process died"),
and hands the worker the parent's ``sys.path``, the user's folder first (a ``json.py`` there ran
in the workers); its fork start copies a process that holds a driver. A launched worker imports
nothing of the user's: it reads a setup, then jobs, from its stdin and answers each on its
stdout, one pickled frame each (:func:`clmagic._launch.send`; pickles go only between clmagic
and its own children, and the setup may carry the team secret:
:func:`clmagic._secret.dumps_for_children`).

A worker that dies fails the job it held and is replaced for the next; the others go on. On
Ctrl-C (the workers are in a session of their own, the terminal's interrupt does not reach them)
the jobs not started are dropped and those under way finish.
"""

from __future__ import annotations

import os
import pickle
import queue
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from clmagic import _launch
from clmagic._secret import dumps_for_children

__all__ = ["run_pool", "serve", "Done"]

#: how long a worker whose jobs are over gets to exit before it is killed
_EXIT_S = 30.0
#: what :func:`run_pool` calls as each job ends: (the job, the worker's answer or ``None`` when
#: there is none, why there is none)
Done = Callable[[tuple[Any, ...], Any, str], None]


class _Jobs:
    """The jobs not yet taken, handed out one at a time (to the feeding threads) until
    :meth:`stop`."""

    def __init__(self, jobs: Sequence[tuple[Any, ...]]) -> None:
        self._lock = threading.Lock()
        self._left = deque(enumerate(jobs))

    def take(self) -> tuple[int, tuple[Any, ...]] | None:
        with self._lock:
            return self._left.popleft() if self._left else None

    def stop(self) -> int:
        """Drop the jobs not taken; how many were dropped."""
        with self._lock:
            dropped = len(self._left)
            self._left.clear()
            return dropped


def run_pool(module: str, setup: object, jobs: Sequence[tuple[Any, ...]], workers: int,
             done: Done) -> tuple[bool, int]:
    """Run each of ``jobs`` in at most ``workers`` processes of ``python -m module`` (which
    call :func:`serve`), each first given ``setup``; ``done`` as each ends, on this thread.
    Returns (interrupted by Ctrl-C, how many jobs were dropped)."""
    todo = _Jobs(jobs)
    answers: queue.Queue[tuple[int, Any, str]] = queue.Queue()
    blob = dumps_for_children(setup)
    feeders = [threading.Thread(target=_feed, args=(module, blob, todo, answers),
                                name="clmagic-pool", daemon=True)
               for _ in range(max(1, min(workers, len(jobs))))]
    for feeder in feeders:
        feeder.start()
    interrupted, dropped = False, 0
    while True:
        try:
            try:
                index, answer, why = answers.get(timeout=0.2)
            except queue.Empty:
                if any(f.is_alive() for f in feeders) or not answers.empty():
                    continue
                break  # every feeder has ended and its last answer was taken
            done(jobs[index], answer, why)
        except KeyboardInterrupt:
            if not interrupted:  # a second Ctrl-C: the builds under way still finish
                interrupted, dropped = True, todo.stop()
    return interrupted, dropped


def _feed(module: str, blob: bytes, todo: _Jobs, answers: queue.Queue[tuple[int, Any, str]]
          ) -> None:
    """One worker's thread: start it when there is a job, send it jobs until none is left;
    one that dies answers ``None`` for its job and is replaced for the next."""
    worker: subprocess.Popen[bytes] | None = None
    try:
        while (item := todo.take()) is not None:
            index, job = item
            if worker is None:
                try:
                    worker = _start(module, blob)
                except OSError as exc:
                    answers.put((index, None, f"a worker process could not start ({exc})"))
                    continue
            answer, why = _ask(worker, job)
            if why:
                _end(worker, kill=True)
                worker = None
            answers.put((index, answer, why))
    finally:
        if worker is not None:
            _end(worker, kill=False)


def _start(module: str, blob: bytes) -> subprocess.Popen[bytes]:
    worker = _launch.launch(module, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            detach=True)
    assert worker.stdin is not None
    try:
        _launch.send(worker.stdin, blob)
    except OSError:
        pass  # it died at its start: the first job says so
    return worker


def _ask(worker: subprocess.Popen[bytes], job: tuple[Any, ...]) -> tuple[Any, str]:
    """(The worker's answer to ``job``, "") or (None, why there is none)."""
    assert worker.stdin is not None and worker.stdout is not None
    try:
        _launch.send(worker.stdin, pickle.dumps(job))
        frame = _launch.receive(worker.stdout)
        if frame is not None:
            ok, answer = pickle.loads(frame)
            return (answer, "") if ok else (None, str(answer))
    except (OSError, ValueError, EOFError, pickle.UnpicklingError):
        pass
    try:  # its pipe closed: it is ending, or ended
        code: int | None = worker.wait(5)
    except subprocess.TimeoutExpired:
        code = None
    how = f"signal {-code}" if code is not None and code < 0 else f"exit {code}"
    return None, f"the worker process died ({how if code is not None else 'no answer'})"


def _end(worker: subprocess.Popen[bytes], kill: bool) -> None:
    """Close the worker's pipes (its end of the jobs: it exits), killed first when ``kill``."""
    try:
        if kill:
            worker.kill()
        for pipe in (worker.stdin, worker.stdout):
            if pipe is not None:
                pipe.close()
        worker.wait(_EXIT_S)
    except subprocess.TimeoutExpired:  # it does not see the end of its jobs: ended here
        worker.kill()
        worker.wait()
    except OSError:
        pass


def serve(setup: Callable[[Any], None], work: Callable[..., Any]) -> int:
    """A worker's loop (its module's ``__main__``): ``setup`` of the first frame, then
    ``work(*job)`` of each job, its answer (or the error it raised, in one line) sent back.
    What the driver or the work prints goes to stderr, never into the answers' pipe."""
    jobs = sys.stdin.buffer
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    first = _launch.receive(jobs)
    if first is None:
        return 0
    setup(pickle.loads(first))
    while (frame := _launch.receive(jobs)) is not None:
        try:
            reply: tuple[bool, Any] = (True, work(*pickle.loads(frame)))
        except Exception as exc:  # noqa: BLE001 - the job failed, the worker goes on
            reply = (False, f"{type(exc).__name__}: {exc}".splitlines()[0])
        _launch.send(answers, pickle.dumps(reply))
    return 0
