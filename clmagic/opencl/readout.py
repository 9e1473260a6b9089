"""A MISS's binary read out in a helper process, on drivers where reading it holds the driver.

Reading a POCL program's binary generates the machine code of every kernel (pyopencl #731)
under POCL's process-wide compiler lock, so a readout in the user's process, even on a
background thread, makes the user's first kernel launch after a MISS wait for all of them
(measured: 80 ms → 1–25 s for programs of 16–256 kernels). One helper process per user process
(started at the first such save, ended when the user's process ends: it reads its jobs from a
pipe) builds the same source with the same options for the same device and returns the binary;
the user's process only waits for the pipe, without the GIL. A source that reads headers is
built in the user's working folder (``cwd``), and the caller checks afterwards that its headers
are the ones its key covered (:mod:`clmagic.trip.save`); any failure returns ``None`` and the
caller reads the binary in-process as before.

A helper that does not answer is killed: it gets a bound set by the work (a few times the build
it redoes, :mod:`clmagic.opencl.patience`), more only while it is seen working, and
:data:`TIMEOUT_S` at most; the readout is then done in-process. After :data:`MAX_FAILURES` such
helpers the process reads in-process only. A forked child does not use (nor kill, nor write
to) its parent's helper: it starts its own if it needs one.

Two helpers at most: one at the process's priority, for the readouts someone may wait for (a
cell's ``saved``), and one under ``SCHED_IDLE`` (:func:`clmagic._launch.launch`), for the
readouts of the pyopencl hook's builds, which nobody waits for while the process runs: that one
takes only CPU time no one else wants, so it never competes with the user's workload. An idle
job the machine leaves no time for (the bound passes, its helper is not seen working), or one
still running when the process ends (:func:`hurry`), is done again by the other helper.

``python -m clmagic.opencl.readout``: the helper (jobs on stdin, binaries on stdout), started by
:func:`clmagic._launch.launch` (nothing in the user's folder or environment is imported by it).
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading

from clmagic import _launch
from clmagic._fork import after_fork, disown
from clmagic.opencl.patience import bound_s, wait_while_working

__all__ = ["needs_helper", "read_out", "helper_pid", "hurry", "TIMEOUT_S", "MAX_FAILURES"]

#: the longest one readout may take in the helper (its build included), however busy it is
TIMEOUT_S = 120.0
#: helpers killed for not answering after which this process reads binaries in-process only
MAX_FAILURES = 2

_lock = threading.Lock()
_helper: subprocess.Popen[bytes] | None = None
_idle: subprocess.Popen[bytes] | None = None  # the idle helper (see the module's text)
_failures = 0
_hurried = False  # the process is ending: nothing more for the idle helper


def needs_helper(platform_name: str) -> bool:
    """Whether a background readout on this platform goes to the helper: on POCL, whose
    readout generates code under its process-wide lock, unless ``CLMAGIC_READOUT_HELPER=0``
    (the readout then runs in-process, and a kernel launched meanwhile waits for it)."""
    return ("Portable Computing Language" in platform_name
            and os.environ.get("CLMAGIC_READOUT_HELPER", "1") != "0")


def helper_pid() -> int | None:
    """The process id of this process's helper, ``None`` while there is none."""
    helper = _helper
    return helper.pid if helper is not None and helper.poll() is None else None


def read_out(fingerprint: str, source: str, options: str, build_ms: float = 0.0,
             cwd: str | None = None, idle: bool = False) -> bytes | None:
    """The binary of ``source`` built with ``options`` for the device ``fingerprint``, by the
    helper process, in the folder ``cwd`` (``None``: wherever it is); ``None`` when it cannot
    say (the caller then reads it in-process). ``build_ms``: what the build took here, which
    sets how long the helper gets. ``idle``: by the idle helper where it can (see the module's
    text)."""
    if idle and not _hurried:
        payload = json.dumps([fingerprint, source, options, cwd]).encode()
        answered, reply = _idle_exchange(payload, bound_s(build_ms))
        if answered:
            return reply[1:] if reply is not None and reply[:1] == b"+" else None
    return _read_out(fingerprint, source, options, build_ms, cwd)


def _idle_exchange(payload: bytes, bound: float) -> tuple[bool, bytes | None]:
    """One job for the idle helper (started on first use): (answered, reply); not answered when
    it could not start or was given no time (it is then stopped, and the job is the other's)."""
    global _idle
    with _lock:
        try:
            if _idle is None or _idle.poll() is not None:
                _idle = _launch.launch("clmagic.opencl.readout", idle=True,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL)
            helper = _idle
        except OSError:
            return False, None
    answered, reply = _exchange(helper, payload, bound)
    if not answered:
        _kill(helper)
        with _lock:
            if _idle is helper:
                _idle = None
    return answered, reply


def hurry() -> None:
    """The process is ending: the idle helper is stopped (a job it was doing goes to the other
    helper) and takes no more."""
    global _hurried, _idle
    _hurried = True
    helper, _idle = _idle, None
    if helper is not None:
        _kill(helper)


def _kill(helper: subprocess.Popen[bytes]) -> None:
    try:
        helper.kill()
        helper.wait(5)
    except (OSError, subprocess.TimeoutExpired):
        pass


def _read_out(fingerprint: str, source: str, options: str, build_ms: float,
              cwd: str | None) -> bytes | None:
    """:func:`read_out` by the helper at the process's priority."""
    global _helper, _failures
    with _lock:  # one job at a time: the saver thread is the only caller anyway
        if _failures >= MAX_FAILURES:
            return None
        try:
            if _helper is None or _helper.poll() is not None:
                _helper = _launch.launch("clmagic.opencl.readout", stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            payload = json.dumps([fingerprint, source, options, cwd]).encode()
            answered, reply = _exchange(_helper, payload, bound_s(build_ms))
        except (OSError, ValueError):
            answered, reply = True, None
        if reply is None:  # a helper that failed or hung is not asked again as it is
            _failures += 0 if answered else 1
            _stop()
            return None
        return reply[1:] if reply[:1] == b"+" else None


def _exchange(helper: subprocess.Popen[bytes], payload: bytes,
              bound: float) -> tuple[bool, bytes | None]:
    """Send one job and read its reply, on a thread of its own (a helper that stopped reading
    blocks a write as surely as a read); (whether it answered in time, the reply or ``None``)."""
    stdin, stdout = helper.stdin, helper.stdout
    assert stdin is not None and stdout is not None
    result: list[bytes | None] = [None]

    def talk() -> None:
        try:
            _launch.send(stdin, payload)
            result[0] = _launch.receive(stdout)
        except (OSError, ValueError):
            pass  # a pipe closed under it: no reply

    talker = threading.Thread(target=talk, name="clmagic-readout", daemon=True)
    talker.start()

    def done(timeout: float) -> bool:
        talker.join(timeout)
        return not talker.is_alive()

    answered = wait_while_working(done, helper.pid, bound, TIMEOUT_S)
    return answered, result[0] if answered else None


def _stop() -> None:
    """Kill the helper (stopped or not: SIGKILL ends both) and reap it, for a bounded time."""
    global _helper
    if _helper is not None:
        _kill(_helper)
        _helper = None


def _after_fork() -> None:
    """A forked child: the parent's helper is the parent's. Its pipes are closed here (so that
    it sees the end of its jobs when the parent ends, not when the child does), without a flush
    (what the parent had buffered is the parent's), and the objects disowned."""
    global _helper, _idle, _lock, _failures, _hurried
    _lock, _failures, _hurried = threading.Lock(), 0, False
    for helper in (_helper, _idle):
        if helper is None:
            continue
        for pipe in (helper.stdin, helper.stdout):
            raw = getattr(pipe, "raw", None)
            try:
                if raw is not None:
                    raw.close()
            except OSError:
                pass
        disown(helper)
    _helper = _idle = None


def _at_exit() -> None:
    hurry()
    if _helper is not None:
        _stop()


atexit.register(_at_exit)
after_fork(_after_fork)


def _main() -> int:
    import pyopencl as cl

    from clmagic.opencl import devices, driver, pyopencl_program

    jobs, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        job = _launch.receive(jobs)
        if job is None:
            return 0  # the user's process has ended
        fingerprint, source, options, cwd = json.loads(job)
        try:
            if cwd is not None:
                os.chdir(cwd)  # relative include folders are the user's
            _info, dev = devices.resolve_device(fingerprint)
            program = pyopencl_program.raw_from_source(cl.Context([dev]), source)
            with driver.quiet_driver():
                pyopencl_program.bare_build(program, options, [dev])
            _launch.send(out, b"+" + driver.binary_of(program, dev))
        except Exception as exc:  # noqa: BLE001 - the user's process reads it itself then
            _launch.send(out, b"-" + str(exc).encode("utf-8", "replace")[:500])


if __name__ == "__main__":
    sys.exit(_main())
