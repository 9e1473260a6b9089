"""Work a build need not wait for, on one background thread: a MISS's readout, save, hit counts.

The user waits for the driver's build only. The readout can cost more than the build itself
(POCL generates the machine code of every kernel when its binary is read, pyopencl #731) and
the save is file or network I/O, so both run on a worker thread; the readout lets go of the
GIL while the driver works (:func:`clmagic.opencl.driver.binary_of`), so the user's thread runs on.
Nothing is lost on the way:

- a pending save completes before the same key is looked up again (:func:`wait_everywhere`),
  before anyone reads a compiler's store (``Compiler.store``), before the next IPython cell runs
  (``%load_ext clmagic`` registers that), and before the process exits normally (an ``atexit``
  handler flushes every saver, for at most :data:`EXIT_WAIT_S`: a save still running then is
  dropped, with one warning, rather than holding the exit);
- a save is written to a temp file and renamed into place by the stores, so a process that dies
  mid-save leaves no half-written entry;
- a job that fails is reported once (as a synchronous save would be) and never takes the
  worker down; a wait never waits on a worker that is not there (one is started again).

A forked child starts with empty savers and hit counters (:mod:`clmagic._fork`): the parent's
queued jobs are the parent's (its thread runs them; the child has no such thread, and its exit
would wait for them for ever), and a save the child was waiting for says it was left to the
parent. The fork itself waits for a saver's job that is inside the driver
(:func:`driver_work`, :data:`FORK_WAIT_S` at most), so that the child is not made in the middle of
a readout: that holds the driver's own locks, which the child would find held for ever. A job
elsewhere (a store's write waiting for another process's lock) does not hold the fork up: the
child has its own connection and file handles (:mod:`clmagic._fork`), and POSIX record locks
are not inherited.
"""

from __future__ import annotations

import atexit
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from clmagic._fork import after_fork, around_fork
from clmagic._warn import warn_once
from clmagic.trip.pending import settle_after_fork

if TYPE_CHECKING:
    from clmagic.store import Store

__all__ = ["Saver", "HitCounter", "flush_all", "wait_everywhere", "pending_everywhere",
           "take_everywhere", "before_exit", "exiting", "driver_work", "EXIT_WAIT_S",
           "FORKED_NOTE"]

#: the longest the process's normal exit waits for the saves still queued or running, in all
EXIT_WAIT_S = 10.0
#: the longest a fork waits for the saver jobs inside the driver (see :func:`_before_fork`)
FORK_WAIT_S = 10.0
#: how often a waiter checks that the worker it waits for is still there
_CHECK_S = 0.5
#: a save's note in a forked child, whose parent was saving it when the child was made
FORKED_NOTE = "not saved by this process (forked while its parent saved it)"

_SAVERS: weakref.WeakSet[Saver] = weakref.WeakSet()
#: id of each saver with tagged jobs queued or running, and how many (changed under that
#: saver's condition): a lookup with no save under way anywhere waits for nothing at once
_TAGGED: dict[int, int] = {}
#: saver jobs inside the driver now (:func:`driver_work`), and whether a fork waits for them
_DRIVER = threading.Condition()
_in_driver = 0
_forking = False
_COUNTERS: weakref.WeakSet[HitCounter] = weakref.WeakSet()


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
        self.reset_after_fork()
        _SAVERS.add(self)

    def reset_after_fork(self) -> None:
        """An empty queue, no thread (a new saver, or a forked child's copy of one: the jobs
        queued are the parent's)."""
        self._cond = threading.Condition()
        self._jobs: deque[tuple[tuple[Hashable, ...], Callable[[], object]]] = deque()
        self._pending: dict[Hashable, int] = {}
        _TAGGED.pop(id(self), None)
        self._busy = 0  # jobs queued or running
        self._awake = False  # run the queue now (a job that wakes was queued, or a flush)
        self._since = 0.0  # when the oldest job waiting was queued
        self._held = False  # the condition is held across a fork (hold_for_fork)
        self._thread: threading.Thread | None = None

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
            if tags:
                _TAGGED[id(self)] = _TAGGED.get(id(self), 0) + 1
            self._ensure_worker()
            if wake:
                self._awake = True
            if wake or first:
                self._cond.notify_all()

    def _ensure_worker(self) -> None:
        """Start the worker thread if there is none (called with the condition held)."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="clmagic-saver", daemon=True)
            self._thread.start()

    def pending(self, tag: Hashable) -> bool:
        """Whether a job tagged ``tag`` has not finished yet (no waiting)."""
        return tag in self._pending

    def wait(self, tag: Hashable) -> None:
        """Wait until no job tagged ``tag`` is queued or running (at once when none is)."""
        if tag in self._pending and not self._on_worker():
            self._wait_until(lambda: tag not in self._pending, None)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every job submitted so far has finished (at most ``timeout`` seconds);
        whether they have."""
        if not self._busy or self._on_worker():
            return True
        return self._wait_until(lambda: not self._busy, timeout)

    def _wait_until(self, done: Callable[[], bool], timeout: float | None) -> bool:
        """Wake the worker and wait until ``done()`` (or ``timeout``); a worker that is not there
        (it died, or this is a forked child's copy) is started again, so no wait is for ever."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if not done():  # (checked again: a wake is spent only with a queue)
                self._awake = True
                self._cond.notify_all()
            while not done():
                left = _CHECK_S if end is None else min(_CHECK_S, end - time.monotonic())
                if left <= 0:
                    return False
                if self._jobs:
                    self._ensure_worker()
                self._cond.wait(left)
        return True

    def take(self, wanted: Callable[[Callable[[], object]], bool]) -> list[Callable[[], object]]:
        """Take the queued jobs (not one running) that ``wanted`` picks, their tags no longer
        pending: what the process's exit hands to another process (:func:`before_exit`)."""
        with self._cond:
            taken = [(tags, job) for tags, job in self._jobs if wanted(job)]
            if taken:
                self._jobs = deque((t, j) for t, j in self._jobs if not wanted(j))
        for tags, _ in taken:
            self._done(tags)
        return [job for _, job in taken]

    @property
    def busy(self) -> int:
        """Jobs queued or running."""
        return self._busy

    def hold_for_fork(self) -> None:
        """Hold the queue still until :meth:`release_after_fork` (no job starts while the
        process forks; one running goes on, and :func:`driver_work` keeps it out of the driver
        meanwhile)."""
        if self._on_worker():
            return  # a job that forks: it cannot wait for itself
        self._cond.acquire()
        self._held = True

    def release_after_fork(self) -> None:
        """In the parent, after the fork: the queue runs again."""
        if self._held:
            self._held = False
            self._cond.release()

    def _on_worker(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def _next(self) -> tuple[tuple[Hashable, ...], Callable[[], object]]:
        """The next job to run, once there is one and it is time (called with the condition)."""
        while not self._jobs or not self._awake:
            due = self._since + self.LAZY_S - time.monotonic()
            if self._jobs and due <= 0:
                break
            self._cond.wait(due if self._jobs else None)
        return self._jobs.popleft()

    def _run(self) -> None:
        # at the process's own priority: a thread reniced down could be preempted while it
        # holds the GIL, and then the user's thread would wait for it
        while True:
            with self._cond:
                tags, job = self._next()
            try:
                job()
            except BaseException as exc:  # noqa: BLE001 - a save that fails is reported, never
                # fatal (a job's SystemExit would end this thread with the queue unserved)
                warn_once(f"clmagic could not finish a save in the background ({exc})")
            finally:
                self._done(tags)

    def _done(self, tags: tuple[Hashable, ...]) -> None:
        with self._cond:
            self._busy -= 1
            if not self._jobs:
                self._awake = False  # a wake (or flush) is spent with the queue
            if tags:  # never empty in between while a job is left
                left = _TAGGED.get(id(self), 1) - 1
                if left:
                    _TAGGED[id(self)] = left
                else:
                    _TAGGED.pop(id(self), None)
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
        self.reset_after_fork()
        _COUNTERS.add(self)

    def reset_after_fork(self) -> None:
        """No hits to count (a new counter, or a forked child's copy: the parent counts its
        own, and the job that would count the child's copies is in the parent's queue)."""
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
    if not _TAGGED:
        return
    for saver in list(_SAVERS):
        saver.wait(tag)


def pending_everywhere(tag: Hashable) -> bool:
    """Whether a saver of this process has a job tagged ``tag`` not finished yet (no waiting)."""
    return bool(_TAGGED) and any(saver.pending(tag) for saver in list(_SAVERS))


def take_everywhere(wanted: Callable[[Callable[[], object]], bool]) -> list[Callable[[], object]]:
    """:meth:`Saver.take` of every saver of this process."""
    return [job for saver in list(_SAVERS) for job in saver.take(wanted)]


_BEFORE_EXIT: list[Callable[[], object]] = []


def before_exit(job: Callable[[], object]) -> None:
    """Run ``job`` at the process's normal exit, before the last saves are waited for."""
    _BEFORE_EXIT.append(job)


def flush_all(timeout: float | None = None) -> bool:
    """Finish every pending save of every saver, in at most ``timeout`` seconds in all (run at
    normal exit); whether they all finished."""
    end = None if timeout is None else time.monotonic() + timeout
    for saver in list(_SAVERS):
        if not saver.flush(None if end is None else max(end - time.monotonic(), 0.0)):
            return False
    return True


_exiting = False


def exiting() -> bool:
    """Whether the process is ending normally (its last saves are being finished)."""
    return _exiting


def _at_exit() -> None:
    """Finish the last saves, for at most :data:`EXIT_WAIT_S`: an exit is not held longer (a
    save cut short leaves no entry behind, the stores write by rename)."""
    global _exiting
    _exiting = True
    for job in _BEFORE_EXIT:
        try:
            job()
        except Exception as exc:  # the exit goes on: what was not handed over is waited for
            warn_once(f"clmagic could not hand its saves over at exit ({exc})")
    if not flush_all(EXIT_WAIT_S):
        left = sum(saver.busy for saver in list(_SAVERS))
        print(f"clmagic: warning: {left} background save(s) not finished at exit after "
              f"{EXIT_WAIT_S:g} s; not saved", file=sys.stderr)


@contextmanager
def driver_work() -> Iterator[None]:
    """Around a background job's driver calls (a binary's readout): a fork waits for it to end,
    and none begins while a process forks."""
    global _in_driver
    with _DRIVER:
        while _forking:
            _DRIVER.wait()
        _in_driver += 1
    try:
        yield
    finally:
        with _DRIVER:
            _in_driver -= 1
            _DRIVER.notify_all()


def _before_fork() -> None:
    """Each saver's queue held still and no job inside the driver (:data:`FORK_WAIT_S` at most)
    while the process forks."""
    global _forking
    end = time.monotonic() + FORK_WAIT_S
    for saver in list(_SAVERS):
        saver.hold_for_fork()
    with _DRIVER:
        _forking = True
        while _in_driver and time.monotonic() < end:
            _DRIVER.wait(max(end - time.monotonic(), 0.0))


def _end_of_fork() -> None:
    global _forking
    with _DRIVER:
        _forking = False
        _DRIVER.notify_all()


def _after_fork_in_parent() -> None:
    _end_of_fork()
    for saver in list(_SAVERS):
        saver.release_after_fork()


def _after_fork() -> None:
    """In a forked child: every saver and hit counter empty, every save under way settled."""
    global _DRIVER, _in_driver, _forking
    _DRIVER, _in_driver, _forking = threading.Condition(), 0, False  # its holders are not here
    for saver in list(_SAVERS):
        saver.reset_after_fork()
    for counter in list(_COUNTERS):
        counter.reset_after_fork()
    settle_after_fork()


atexit.register(_at_exit)
around_fork(_before_fork, _after_fork_in_parent)
after_fork(_after_fork)

