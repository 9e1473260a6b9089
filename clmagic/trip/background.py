"""Work a build need not wait for, done on one background thread: a MISS's binary readout and
save, and the hit counter.

The user waits for the driver's build only. The readout can cost more than the build itself
(POCL generates the machine code of every kernel when its binary is read, pyopencl #731) and
the save is file or network I/O, so both run on a worker thread; the readout lets go of the
GIL while the driver works (:func:`clmagic.opencl.driver.binary_of`), so the user's thread runs on.
Nothing is lost on the way:

- a pending save completes before the same key is looked up again (:func:`wait_everywhere`),
  before anyone reads a compiler's store (``Compiler.store``), before the next IPython cell runs
  (``%load_ext clmagic`` registers that), and before the process exits normally (an ``atexit``
  handler flushes every saver);
- a save is written to a temp file and renamed into place by the stores, so a process that dies
  mid-save leaves no half-written entry;
- a job that fails is reported once (as a synchronous save would be) and never takes the
  worker down.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Generic, TypeVar

from clmagic._warn import warn_once

if TYPE_CHECKING:
    from clmagic.store import Store

__all__ = ["Saver", "Pending", "HitCounter", "flush_all", "wait_everywhere", "exiting"]

_SAVERS: weakref.WeakSet[Saver] = weakref.WeakSet()
T = TypeVar("T")


class Pending(Generic[T]):
    """A save under way: ``value`` as it stands (no waiting), :meth:`wait` for the final one."""

    def __init__(self, value: T):
        self.value = value
        self._done = threading.Event()

    def settle(self, value: T) -> None:
        self.value = value
        self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self) -> T:
        self._done.wait()
        return self.value


class Saver:
    """A queue of jobs run in order by one daemon thread, started on the first job; jobs may be
    tagged with a key that :meth:`wait` can wait for.

    A job submitted with ``wake=False`` (counters: nobody waits for them) does not make the
    thread run: it runs with the next job that does, at :meth:`flush`, or :data:`LAZY_S`
    seconds after the first job of the queue was queued, whichever comes first. So a burst of
    HITs costs one thread switch, not one each: a worker that runs takes the GIL from the
    user's thread for its own Python code."""

    #: the longest a job that does not wake the thread waits for one that does
    LAZY_S = 1.0

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._jobs: deque[tuple[tuple[Hashable, ...], Callable[[], object]]] = deque()
        self._pending: dict[Hashable, int] = {}
        self._busy = 0  # jobs queued or running
        self._awake = False  # run the queue now (a job that wakes was queued, or a flush)
        self._since = 0.0  # when the oldest job waiting was queued
        self._thread: threading.Thread | None = None
        _SAVERS.add(self)

    def submit(self, tag: Hashable, job: Callable[[], object], *more: Hashable,
               wake: bool = True) -> None:
        """Run ``job()`` on the worker thread; ``tag`` (``None``: untagged) and the ``more``
        tags are pending until then. ``wake=False``: no hurry (see the class)."""
        tags = tuple(t for t in (tag, *more) if t is not None)
        with self._cond:
            first = not self._jobs  # the worker sleeps without a deadline: give it one
            if first:
                self._since = time.monotonic()
            self._jobs.append((tags, job))
            self._busy += 1
            for t in tags:
                self._pending[t] = self._pending.get(t, 0) + 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="clmagic-saver",
                                                daemon=True)
                self._thread.start()
            if wake:
                self._awake = True
            if wake or first:
                self._cond.notify_all()

    def pending(self, tag: Hashable) -> bool:
        """Whether a job tagged ``tag`` has not finished yet (no waiting)."""
        return tag in self._pending

    def wait(self, tag: Hashable) -> None:
        """Wait until no job tagged ``tag`` is queued or running (at once when none is)."""
        if tag not in self._pending or self._on_worker():
            return
        with self._cond:
            if tag in self._pending:  # (checked again: a wake is spent only with a queue)
                self._awake = True
                self._cond.notify_all()
            while tag in self._pending:
                self._cond.wait()

    def flush(self) -> None:
        """Wait until every job submitted so far has finished."""
        if not self._busy or self._on_worker():
            return
        with self._cond:
            if self._busy:  # (checked again: a wake is spent only with a queue)
                self._awake = True
                self._cond.notify_all()
            while self._busy:
                self._cond.wait()

    @property
    def busy(self) -> int:
        """Jobs queued or running."""
        return self._busy

    def _on_worker(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def _run(self) -> None:
        # at the process's own priority: a thread reniced down could be preempted while it
        # holds the GIL, and then the user's thread would wait for it
        while True:
            with self._cond:
                while not self._jobs or not self._awake:
                    due = self._since + self.LAZY_S - time.monotonic()
                    if self._jobs and due <= 0:
                        break
                    self._cond.wait(due if self._jobs else None)
                tags, job = self._jobs.popleft()
            try:
                job()
            except Exception as exc:  # a save that fails is reported, never fatal
                warn_once(f"clmagic could not finish a save in the background ({exc})")
            finally:
                with self._cond:
                    self._busy -= 1
                    if not self._jobs:
                        self._awake = False  # a wake (or flush) is spent with the queue
                    for tag in tags:
                        left = self._pending[tag] - 1
                        if left:
                            self._pending[tag] = left
                        else:
                            del self._pending[tag]
                    self._cond.notify_all()


class HitCounter:
    """Store hits counted on a saver's thread, in batches: one job, submitted without waking the
    thread, counts every hit made until it runs."""

    def __init__(self, saver: Saver) -> None:
        self._saver = saver
        self._lock = threading.Lock()
        self._hits: list[tuple[Store, str, str, float]] = []

    def count(self, store: Store, fingerprint: str, key: str) -> None:
        with self._lock:
            self._hits.append((store, fingerprint, key, time.time()))
            if len(self._hits) > 1:
                return  # the job already asked for counts this one too
        self._saver.submit(None, self._run, wake=False)

    def _run(self) -> None:
        with self._lock:
            hits, self._hits = self._hits, []
        for store, fingerprint, key, when in hits:
            _record_hit(store, fingerprint, key, when)


def _record_hit(store: Store | None, fingerprint: str, key: str,
                when: float | None = None) -> None:
    """Count a store hit now (MEMORY hits are not store hits: they live in the history only);
    use counts are advisory, so a store that cannot count is reported, never fatal."""
    try:
        if store is not None:
            store.record_hit(fingerprint, key, when)
    except Exception as exc:
        warn_once(f"cache {store!r} could not count a hit ({exc})")


def wait_everywhere(tag: Hashable) -> None:
    """Wait until no saver of this process has a job tagged ``tag`` (another compiler on the
    same store may be saving the entry about to be looked up)."""
    for saver in list(_SAVERS):
        saver.wait(tag)


def flush_all() -> None:
    """Finish every pending save of every saver (run at normal exit)."""
    for saver in list(_SAVERS):
        saver.flush()


_exiting = False


def exiting() -> bool:
    """Whether the process is ending normally (its last saves are being finished)."""
    return _exiting


def _at_exit() -> None:
    global _exiting
    _exiting = True
    flush_all()


atexit.register(_at_exit)

