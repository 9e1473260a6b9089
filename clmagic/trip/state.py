"""The build trip's state, with one owner: :class:`TripState` holds what a compiler keeps between
trips (the memory front of cells' programs, the prepared sources, the history, the saver, the
hit counter, the store, the lock) and offers every step that reads or changes it as a public
method.

Why one owner: the trip's steps live in several modules (:mod:`clmagic.trip.route`,
:mod:`clmagic.trip.rekey`, :mod:`clmagic.trip.save`), and each of them used to reach into the
compiler's private attributes, taking its lock on its own. Here the lock is taken in one place,
by the methods that need it, and the other modules call those methods. This module imports
none of them (they take a :class:`TripState`), so nothing here can form an import cycle with
them.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import NamedTuple

import pyopencl as cl

from clmagic._fork import after_fork, disown
from clmagic._warn import warn_once
from clmagic.config import Settings
from clmagic.entry import Entry
from clmagic.errors import BuildError, ClmagicError, CorruptEntry
from clmagic.key.includes import strip_comments
from clmagic.key.manifest import Manifest
from clmagic.key.options import BuildOptions
from clmagic.key.prepare import Options, Prepared, prepare
from clmagic.opencl import driver, stored_facts, vet
from clmagic.opencl.devices import DeviceInfo
from clmagic.opencl.facts import gather
from clmagic.outcome import Outcome
from clmagic.store import Store
from clmagic.store.lifetime import Counters
from clmagic.trip.background import HitCounter, Saver, pending_everywhere, wait_everywhere
from clmagic.trip.history import History
from clmagic.trip.records import Record, kernels_in
from clmagic.trip.underway import Memo

__all__ = ["TripState", "Found", "served_from", "saves_settled"]

_STATES: weakref.WeakSet[TripState] = weakref.WeakSet()


def saves_settled(tag: Hashable, wait: bool) -> float | None:
    """Before a lookup of ``tag``: with ``wait``, wait for a save of it under way in this process
    and say how long that took (ms); without, ``None`` when such a save is under way (nothing
    is waited for: the caller treats the entry as missing), else 0."""
    if not wait:
        return None if pending_everywhere(tag) else 0.0
    t = time.perf_counter()
    wait_everywhere(tag)
    return (time.perf_counter() - t) * 1000


class Found(NamedTuple):
    """What one device's lookup found: its entry (``None``: none), whether a damaged one was met
    (reported, deleted, rebuilt by the caller), how long it waited for a save of its key under
    way, and whether such a save was under way and not waited for (a caller's trip)."""

    entry: Entry | None
    corrupt: bool = False
    waited_ms: float = 0.0
    underway: bool = False


def served_from(entry: Entry, store: Store | None) -> str:
    """A HIT's note: which store the entry came from."""
    return f"from {entry.usage.store or (store.kind if store else '')} cache"


class TripState:
    """What a compiler keeps between build trips, and the steps that use it.

    The lock guards the memory front, the prepared memo and the history; the builds
    themselves run in parallel, outside it. ``memory_max`` programs of cells stay in memory,
    the least recently used dropped first; a caller's program (the pyopencl hook) is never
    kept: what is remembered of it is bytes (the store's, and its recently read entries), so
    no OpenCL object of the caller's lives longer than the caller keeps it.
    """

    def __init__(self, settings: Settings, store: Store | None) -> None:
        self.settings = settings
        #: programs kept in memory, least recently used dropped first (``CLMAGIC_MEMORY_MAX``)
        self.memory_max = settings.memory_max
        self.history = History(debug=settings.debug, level=settings.record,
                               limit=settings.history_max)
        self._memory: OrderedDict[Memo, driver.Built] = OrderedDict()
        self._prepared: OrderedDict[tuple[object, ...], Prepared] = OrderedDict()
        self._lock = threading.Lock()
        #: a MISS's binary readout and save, and the hit counter, run here, off the user's path
        self._saver = Saver()
        self._hits = HitCounter(self._saver)  # store hits, counted in batches
        self._no_counters = Counters(None)  # this session's counts when there is no store
        self._store = store
        self._manifest = _manifest_of(store)
        _STATES.add(self)

    def reset_after_fork(self) -> None:
        """In a forked child: a new lock (another thread of the parent may have held this one),
        and nothing served from memory, since OpenCL objects do not work after a fork: the
        parent's programs are disowned (never used, never released here). The prepared
        sources are plain data and stay; the saver and hit counter reset themselves."""
        self._lock = threading.Lock()
        disown(self._memory)
        self._memory = OrderedDict()

    # -- the store, the background work ---------------------------------------------------------

    @property
    def store(self) -> Store | None:
        """Where entries are kept (``None``: memory only), as it stands: no waiting for saves."""
        return self._store

    def replace_store(self, store: Store | None) -> None:
        """Use ``store`` from now on, once this state's saves are done; nothing built or loaded
        before is served from memory afterwards (a new generation)."""
        self._saver.flush()
        with self._lock:
            self._store = store
            self._manifest = _manifest_of(store)
            self._memory.clear()

    @property
    def counters(self) -> Counters:
        """The store's lifetime (and session) counters; session only without a store."""
        return self._store.counters if self._store is not None else self._no_counters

    def flush(self) -> None:
        """Wait for every save and hit count still running in the background."""
        self._saver.flush()

    @property
    def saves_pending(self) -> int:
        """Background jobs (saves, counts) queued or running: no waiting."""
        return self._saver.busy

    def submit_save(self, tag: Hashable, job: Callable[[], object], *more: Hashable | None) -> None:
        """Run a save's ``job`` on the saver's thread now; lookups of ``tag`` (and of ``more``)
        wait for it."""
        self._saver.submit(tag, job, *more)

    def later(self, job: Callable[[], object]) -> None:
        """Run ``job`` on the saver's thread, when it runs anyway (see :class:`Saver`)."""
        self._saver.submit(None, job, wake=False)

    def count_hit(self, fingerprint: str, key: str) -> None:
        """Count a store hit on the saver's thread, when it runs anyway (the user does not wait
        for a counter)."""
        if self._store is not None:
            self._hits.count(self._store, fingerprint, key)

    # -- memory: prepared sources, programs -----------------------------------------------------

    def prepare(self, source: str | bytes, options: Options, info: DeviceInfo) -> Prepared:
        """The source checked, its options parsed, headers found, key hashed (remembered for
        sources that include nothing: :func:`clmagic.key.prepare.prepare`), and across
        processes in the store's manifest."""
        return prepare(source, options, info, self._prepared, self._lock, self._manifest)

    def saved(self) -> None:
        """A save is done (the store's folder exists): write the manifest's waiting lines."""
        self._manifest.write_waiting()

    def forget_prepared(self, manifest: bool = True) -> None:
        """Prepare every source again, as a new process would (for measurements): the
        manifest is read again from its file (``manifest=False``: as already read, once)."""
        with self._lock:
            self._prepared.clear()
            if manifest:
                self._manifest.forget()

    def recall(self, memo: Memo, context: cl.Context) -> driver.Built | None:
        """The program kept in memory for ``memo`` in ``context`` (now the most recently used),
        or ``None``."""
        built = self._memory.get(memo)
        if built is None or built.context != context:
            return None
        with self._lock:
            if memo in self._memory:
                self._memory.move_to_end(memo)
        return built

    def keep(self, memo: Memo, built: driver.Built) -> None:
        """Keep a program in memory, dropping the least recently used past ``memory_max``."""
        with self._lock:
            dropped = [] if (old := self._memory.pop(memo, None)) is None else [old]
            self._memory[memo] = built
            while len(self._memory) > max(self.memory_max, 1):
                dropped.append(self._memory.popitem(last=False)[1])
        del dropped  # released here, outside the lock, as the user's own program would be

    def in_memory(self) -> list[Memo]:
        """The (fingerprint, key) of every program in the memory front, least recently used
        first."""
        with self._lock:
            return list(self._memory)

    def forget(self, fingerprint: str | None = None, key: str | None = None) -> int:
        """Drop in-memory programs (all, of one device, or one key); returns how many."""
        def hit(f: str, k: str) -> bool:
            return (fingerprint is None or f == fingerprint) and (key is None or k == key)

        with self._lock:
            doomed = [k for k in self._memory if hit(*k)]
            for k in doomed:
                del self._memory[k]
        return len(doomed)

    # -- the store's entries, the driver ---------------------------------------------------------

    def lookup(self, info: DeviceInfo, key: str, wait: bool = True) -> Found:
        """The stored entry of ``key`` (see :class:`Found`). ``wait``: wait for a save of this
        key under way in this process (timed: a one-time cost of the trip); otherwise such a
        save means no entry yet, and nothing is waited for."""
        if self._store is None:
            return Found(None)
        waited = saves_settled((info.fingerprint, key), wait)
        if waited is None:
            return Found(None, underway=True)
        try:
            return Found(self._store.get(info.fingerprint, key), False, waited)
        except (CorruptEntry, OSError) as exc:
            return Found(None, self.damaged(info, key, exc), waited)

    def damaged(self, info: DeviceInfo, key: str, exc: Exception) -> bool:
        """Report a damaged entry and delete it (to be rebuilt); returns ``True``."""
        warn_once(f"cache entry {key[:12]} is damaged ({exc}); rebuilding it")
        self.event("CORRUPT", key, detail=str(exc))
        if self._store is not None:
            self._store.delete(info.fingerprint, key)
        return True

    def load(self, ctx: cl.Context, devs: Sequence[cl.Device], entries: Sequence[Entry],
             opts: BuildOptions, kernels: bool = True) -> driver.Built:
        """The program made from the entries' binaries, one per device of ``devs``; the first
        entry's original build time and log go with it."""
        t, checked = time.perf_counter(), [e for e in entries if e.foreign]
        for e in checked:  # a binary from elsewhere: proven loadable in a child first
            vet.vouch(e, opts.effective, self._store)
        vetted = (time.perf_counter() - t) * 1000  # a child's start, unless proven before
        try:
            built = driver.from_binaries(ctx, devs, [e.binary or b"" for e in entries],
                                         opts.effective, kernels)
        except cl.Error as exc:
            raise CorruptEntry(f"the driver refused the stored binary: {exc}") from None
        built = dataclasses.replace(built, build_ms=entries[0].build_ms,
                                    log=entries[0].meta.build_log,
                                    log_from=entries[0].meta.rekeyed_from,
                                    facts=stored_facts.stored_facts(entries[0].meta.kernel_facts))
        said = f"checked the binary from {checked[0].foreign} in a child process" if checked else ""
        return built.with_once(vetted, said) if vetted >= 1.0 and said else built

    @staticmethod
    def compile(ctx: cl.Context, devs: Sequence[cl.Device], label: str, prep: Prepared,
                line_offset: int = 0, kernels: bool = True, text: str | bytes | None = None,
                quiet: bool = True) -> driver.Built:
        """Build from source for ``devs`` in one driver call: ``text`` (the caller's own, the
        hook's) or the prepared source; ``quiet``: the driver's chatter kept off stderr (a
        cell's; a caller's build leaves stderr alone, as pyopencl's does)."""
        if not strip_comments(prep.source).strip():  # checked here: a cached source has code
            raise ClmagicError("the source holds only comments: nothing to compile")
        try:
            built = driver.from_source(ctx, devs, prep.source if text is None else text,
                                       prep.opts.effective, kernels, quiet)
        except driver.BuildFailed as exc:
            raise BuildError(exc.log, options=prep.opts.effective, device=label,
                             line_offset=line_offset, source=prep.source) from None
        if not (kernels and len(devs) == 1):  # the facts are one device's, of kernels made
            return built
        # asked now, once (well under a ms), and kept in the entry: a HIT asks nothing
        return dataclasses.replace(built, facts=gather(built.kernels, devs[0], built.log))

    # -- records, the history, the counters -----------------------------------------------------

    @staticmethod
    def record(info: DeviceInfo, prep: Prepared, t0: float, outcome: Outcome, built: driver.Built,
               *, saved: bool = False, note: str = "", origin: str = "cell",
               log: str | None = None, code_key: str | None = None, line_offset: int = 0,
               setup_ms: float = 0.0, with_source: bool = True) -> Record:
        """The trip's record for one device (kept by :meth:`keep_records`); without the
        source where ``with_source`` is false (the history keeps none below level ``full``)."""
        return Record(
            time=time.time(), outcome=outcome, kernels=list(built.names),
            ms=(time.perf_counter() - t0) * 1000, build_ms=built.build_ms, device=info,
            key=prep.key, options=prep.opts.effective, preview=prep.preview,
            source=prep.source if with_source else None, source_bytes=prep.size,
            headers=prep.headers, build_log=built.log if log is None else log,
            line_offset=line_offset, saved_to_store=saved, note=note, origin=origin,
            code_key=code_key or "", rekeyed_from=built.log_from, setup_ms=setup_ms,
            facts=built.facts, once_ms=0.0 if outcome is Outcome.MEMORY else built.once_ms,
            once_what="" if outcome is Outcome.MEMORY else built.once_what)  # not from memory

    def keep_records(self, recs: Sequence[Record]) -> list[Record | None]:
        """Add the records to the history; each as the history keeps it (``None`` when it keeps
        nothing: ``CLMAGIC_RECORD=off`` without debug). Call :meth:`changed` afterwards."""
        if not self.history.active:
            return [None] * len(recs)
        with self._lock:
            return [self.history.add(rec) for rec in recs]

    def count(self, rec: Record) -> None:
        """Count a trip that saves nothing in the lifetime counters (written when the saver
        runs anyway)."""
        self.counters.add(rec.fingerprint, rec.outcome, 1, rec.saved_ms, later=self.later)

    def changed(self) -> None:
        """Tell the history's listeners (outside the lock: they may read the history)."""
        self.history.changed()

    def settle(self, kept: Record, saved: bool, note: str) -> None:
        """Say in the history how the background save of ``kept`` ended."""
        with self._lock:
            self.history.settle(kept, saved, note)

    def event(self, what: str, key: str, detail: str = "") -> None:
        """One debug line (``CLMAGIC_CACHE_DEBUG``) for an event that is not a trip."""
        if self.history.debug:
            with self._lock:
                self.history.event(what, key, [], detail=detail)

    def failed(self, infos: Sequence[DeviceInfo], prep: Prepared, t0: float, exc: BuildError,
               origin: str = "cell", build_ms: float = 0.0) -> None:
        """FAILED records (one per device) for a build the driver refused: its first error line
        as the note, its log as the build log, the attempt's time as its build time."""
        for info in infos:
            self.counters.add(info.fingerprint, Outcome.FAILED)
        if not self.history.active:
            return
        self.keep_records([
            Record(time=time.time(), outcome=Outcome.FAILED, kernels=kernels_in(prep.source),
                   ms=(time.perf_counter() - t0) * 1000, build_ms=build_ms, device=info,
                   key=prep.key, options=prep.opts.effective, preview=prep.preview,
                   source=prep.source, source_bytes=prep.size, headers=prep.headers,
                   build_log=exc.log, note=exc.first_error, origin=origin)
            for info in infos])
        self.changed()

def _manifest_of(store: Store | None) -> Manifest:
    return Manifest(store.manifest_file if store is not None else None)


def _after_fork() -> None:
    for state in list(_STATES):
        state.reset_after_fork()


after_fork(_after_fork)
