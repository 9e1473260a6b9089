"""How long clmagic waits for a helper process: a bound set by the work, and past it only while
the helper is seen working.

The helpers (:mod:`clmagic.opencl.readout`'s, :mod:`clmagic.opencl.vet`'s child) do a driver's
work: build, read out or load one program. A fixed timeout is either too short for a large
program or, for a helper that stopped answering (stopped with SIGSTOP, blocked on a lock, a
pipe, a device), far too long for the user who waits for it. So the wait is set by the work:
:func:`bound_s` (a few times the build being redone, never under :data:`FLOOR_S`). When that
has passed, the helper is asked the kernel's view of it (Linux: ``/proc/<pid>/stat``): one that
is runnable or has used CPU time since the last look is working (a large program's readout, an
interpreter starting on a loaded machine) and gets another bound, up to ``cap``; one that is
stopped, a zombie, or asleep without using any CPU is not answering, and the caller kills it.
Where the kernel cannot be asked, a helper gets one more bound (its start) and no more.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["bound_s", "FLOOR_S", "FACTOR", "wait_while_working"]

#: the shortest bound: an interpreter's start, a small program's build
FLOOR_S = 2.0
#: the bound in builds: the helper redoes the build it is asked about, and more
FACTOR = 4.0


def bound_s(build_ms: float) -> float:
    """The time a helper gets to answer about a build that took ``build_ms``."""
    return max(FLOOR_S, FACTOR * max(build_ms, 0.0) / 1000.0)


def _look(pid: int) -> tuple[str, int] | None:
    """The state letter and CPU ticks of process ``pid`` (all its threads), ``None`` when the
    kernel cannot say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read(4096).decode("ascii", "replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # after the command name, which may hold spaces
    try:
        return fields[0], int(fields[11]) + int(fields[12])  # state, utime + stime
    except (IndexError, ValueError):
        return None


def wait_while_working(done: Callable[[float], bool], pid: int, bound: float,
                       cap: float) -> bool:
    """Wait for ``done(timeout)`` (it waits at most ``timeout`` seconds and says whether the
    helper answered): ``bound`` seconds, then another ``bound`` each time process ``pid`` is
    seen working, ``cap`` seconds at most. Whether it answered (when not, the caller kills
    it)."""
    start = time.monotonic()
    before = _look(pid)
    extra = before is None  # the kernel cannot be asked: one bound more, for the helper's start
    while not done(min(bound, max(cap - (time.monotonic() - start), 0.0))):
        if time.monotonic() - start >= cap:
            return False
        now = _look(pid)
        if now is None or before is None:
            if not extra:
                return False
            extra = False
            continue
        if now[0] in "TtZXx" or (now[0] not in "RD" and now[1] == before[1]):
            return False  # stopped, gone, or asleep without using the CPU since the last look
        before = now
    return True
