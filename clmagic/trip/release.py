"""Programs no longer kept in memory, released on the saver's thread rather than on the user's.

Why: a program of another context that a new one replaces in the memory front (a test suite's
new context per test) costs the driver a release when its last reference goes: 0.1 ms a build
on POCL, measured inside ``Program.build`` under the hook. pyopencl's own path pays it when the
caller lets go of the program, outside ``Program.build``; so does this, on the saver's thread
when it runs anyway (in a batch, as the hit counter's), never holding the state's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from clmagic._fork import disown
from clmagic.trip.background import Saver

__all__ = ["Releaser"]


class Releaser:
    """Holds the programs let go until the saver's next run drops them (OpenCL objects: a
    forked child disowns the parent's, never releasing them)."""

    def __init__(self, saver: Saver) -> None:
        self._saver = saver
        self.reset_after_fork()

    def reset_after_fork(self) -> None:
        """Nothing to release (a new releaser, or a forked child's copy: the parent's programs
        are disowned)."""
        disown(getattr(self, "_held", None))
        self._lock = threading.Lock()
        self._held: list[object] = []

    def let_go(self, dropped: Sequence[object]) -> None:
        """Release ``dropped`` later, on the saver's thread."""
        if not dropped:
            return
        with self._lock:
            first = not self._held
            self._held.extend(dropped)
        if first:
            self._saver.submit(None, self._release, wake=False)

    def _release(self) -> None:
        with self._lock:
            held, self._held = self._held, []
        del held  # the programs are released here, outside the lock

    def __len__(self) -> int:
        return len(self._held)
