"""The build trip: prepare → memory → store → driver → save, and the result it hands back.

One :class:`~clmagic.trip.records.Record` per trip and device: the history keeps it, the result under
the cell shows it, and a saved entry is made from it (:meth:`Record.entry`). :meth:`Compiler.build`
builds a cell's source for one device and makes its kernels; :meth:`Compiler.build_program` builds
in a caller's context for its devices, making no kernels (:mod:`clmagic.trip.programs`, what
:mod:`clmagic.process.hook` needs); the first step, the key, is :mod:`clmagic.key.prepare`.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pyopencl as cl

from clmagic.opencl import devices as _devices
from clmagic.opencl import driver, vet
from clmagic.trip import programs, rekey, save as saves
from clmagic._warn import warn_once
from clmagic.config import Settings
from clmagic.opencl.devices import DeviceInfo
from clmagic.entry import Entry
from clmagic.errors import BuildError, ClmagicError, CorruptEntry, DeviceError
from clmagic.key.includes import headers_changed, strip_comments
from clmagic.store.lifetime import Counters
from clmagic.trip.missed import why_missed
from clmagic.key.options import BuildOptions
from clmagic.key.prepare import Options, Prepared, prepare
from clmagic.trip.programs import served_from as _served_from
from clmagic.outcome import Outcome
from clmagic.trip.records import History, Record
from clmagic.trip.results import BuildResult, ProgramBuild
from clmagic.trip.background import HitCounter, Saver, flush_all, wait_everywhere
from clmagic.key.source import MAX_SOURCE, normalise_source
from clmagic.store import Store, store_for

__all__ = ["Compiler", "BuildResult", "ProgramBuild", "MAX_SOURCE", "normalise_source"]


class _Default:
    """The store the settings ask for (the default of ``Compiler(store=...)``)."""


_DEFAULT_STORE = _Default()


@dataclass(frozen=True)
class _Trip:
    """One :meth:`Compiler.build` under way: the prepared source and its device."""

    prep: Prepared
    info: DeviceInfo
    dev: cl.Device
    ctx: cl.Context
    queue: cl.CommandQueue
    line_offset: int
    t0: float
    setup_ms: float = 0.0

    @property
    def memo(self) -> tuple[str, str]:
        return self.info.fingerprint, self.prep.key


class Compiler:
    """Builds OpenCL programs through an in-memory cache and a persistent store.

    ``Compiler()`` reads its settings from the environment; pass ``settings`` or ``store`` to
    choose explicitly (``store=None`` keeps programs in memory only). With ``CLMAGIC_REMOTE``
    set, the store is a :class:`~clmagic.store.LayeredStore` (local in front of the remote).
    At most ``memory_max`` programs (settings; ``CLMAGIC_MEMORY_MAX``) stay in memory, the least
    recently used dropped first: a re-run cell whose program was dropped is a store HIT.
    """

    def __init__(
        self, settings: Settings | None = None, store: Store | None | _Default = _DEFAULT_STORE
    ):
        self.settings = settings or Settings.from_env()
        #: programs kept in memory, least recently used dropped first (``CLMAGIC_MEMORY_MAX``)
        self.memory_max = self.settings.memory_max
        self._memory: OrderedDict[tuple[str, str], driver.Built] = OrderedDict()
        self._no_counters = Counters(None)  # this session's counts when there is no store
        #: programs built for callers' contexts (the pyopencl hook), by their keys
        self._programs: dict[tuple[tuple[str, str], ...], driver.Built] = {}
        self._lock = threading.Lock()  # memory and history; builds themselves run in parallel
        #: a MISS's binary readout and save, and the hit counter, run here, off the user's path
        self._saver = Saver()
        self._hits = HitCounter(self._saver)  # store hits, counted in batches
        self._store: Store | None = None
        self.store = store_for(self.settings) if isinstance(store, _Default) else store
        self._history = History(debug=self.settings.debug, level=self.settings.record)
        self.device_spec: str | None = self.settings.device
        self._prepared: dict[tuple[object, ...], Prepared] = {}

    @property
    def store(self) -> Store | None:
        """Where entries are kept (``None``: memory only), once every pending save of this
        process (of any compiler: they may share the store) is in it. Setting another store
        starts a new generation: nothing built or loaded before is served from memory
        afterwards."""
        flush_all()
        return self._store

    @store.setter
    def store(self, store: Store | None) -> None:
        self._saver.flush()
        with self._lock:
            self._store = store
            self._memory.clear()
            self._programs.clear()

    @property
    def history(self) -> History:
        """This process's trips, once every pending save has said how it ended."""
        self._saver.flush()
        return self._history

    def flush(self) -> None:
        """Wait for every save and hit count still running in the background."""
        self._saver.flush()

    # -- device -------------------------------------------------------------------------------

    def resolve(self, device: object = None) -> tuple[DeviceInfo, cl.Device]:
        """The device for a build: ``device`` if given, else the selected/default device."""
        if device is None or device == "":
            return _devices.default_device(self.device_spec)
        return _devices.resolve_device(device)

    def select_device(self, spec: object) -> DeviceInfo:
        """Make ``spec`` the device for the following builds; drops in-memory programs of the
        previous device (as an environment switch should)."""
        info, _ = _devices.resolve_device(spec)
        try:
            old: DeviceInfo | None = self.resolve()[0]
        except DeviceError:  # the previous choice was unusable: nothing of it in memory
            old = None
        self.device_spec = info.spec
        if old is not None and old.fingerprint != info.fingerprint:
            self.forget(old.fingerprint)
        return info

    def forget(self, fingerprint: str | None = None, key: str | None = None) -> int:
        """Drop in-memory programs (all, of one device, or one key); returns how many."""
        def hit(f: str, k: str) -> bool:
            return (fingerprint is None or f == fingerprint) and (key is None or k == key)

        with self._lock:
            doomed = [k for k in self._memory if hit(*k)]
            for k in doomed:
                del self._memory[k]
            gone = [ks for ks in self._programs if any(hit(f, k) for f, k in ks)]
            for ks in gone:
                del self._programs[ks]
        return len(doomed) + len(gone)

    # -- the trip -----------------------------------------------------------------------------

    def key(self, source: str | bytes, options: str | Iterable[str] | None = None,
            device: object = None) -> str:
        """The cache key :meth:`build` would use for these arguments (nothing is built)."""
        return self._prepare(source, options, self.resolve(device)[0]).key

    def build(
        self,
        source: str | bytes,
        options: str | Iterable[str] | None = None,
        device: object = None,
        *,
        context: cl.Context | None = None,
        use_cache: bool = True,
        line_offset: int = 0,
    ) -> BuildResult:
        """Build ``source`` for one device, through the caches.

        ``line_offset`` shifts line numbers in a build log (the magic passes 1 so they match
        the cell). The key covers every header the source may ``#include`` (see
        :mod:`clmagic.key.includes`), looked up from the current working directory. Raises
        :class:`BuildError` with the driver's log when the build fails, :class:`ClmagicError`
        for a source that cannot be compiled at all (empty, only comments, not UTF-8, NUL
        characters, over :data:`MAX_SOURCE` bytes).
        """
        trip = self._start(source, options, device, context, line_offset)
        if not use_cache or trip.prep.unkeyable:
            return self._bypass(trip)
        built = self._memory.get(trip.memo)
        if built is not None and built.context == trip.ctx:
            with self._lock:
                if trip.memo in self._memory:
                    self._memory.move_to_end(trip.memo)
            return self._finish(trip, Outcome.MEMORY, built, note="memory")
        built, outcome, note = self._from_store(trip)
        if built is not None:
            return self._finish(trip, outcome, built, note=note)
        code = rekey.code_key_for(self, trip)
        if code.key is not None:
            found = rekey.by_code(self, trip, code.key)
            if found is not None:
                return found
        built = self._compile_trip(trip)
        changed = headers_changed(trip.prep.files)
        if changed:  # the binary may be of other contents than the key covers: keep it nowhere
            warn_once(f"not cached: {changed}")
            return self._finish(trip, outcome, built, note=f"not saved: {changed}")
        self._keep(trip.memo, built)
        if self._store is None:
            return self._finish(trip, outcome, built, note="cache off (memory only)",
                                code_key=code.key)
        why = ""
        if outcome == Outcome.MISS:  # listed before this build's own entry is saved
            why = why_missed(self._store, self._record(trip.info, trip.prep, trip.t0, outcome,
                                                       built, code_key=code.key))
        return self._finish(trip, outcome, built, note=f"{why} · saving" if why else "saving",
                            code_key=code.key, save=True, why=why)

    def _bypass(self, trip: _Trip) -> BuildResult:
        """Build with the driver alone: asked for, or includes the key cannot cover."""
        built = self._compile_trip(trip)
        why = trip.prep.unkeyable
        if why:
            warn_once(f"not cached: {why}")
        note = f"not cached: {why}" if why else "cache bypassed"
        return self._finish(trip, Outcome.BYPASS, built, note=note)

    def _start(self, source: str | bytes, options: Options, device: object,
               context: cl.Context | None, line_offset: int) -> _Trip:
        """The device (or the caller's single-device context), its context and queue, and the
        prepared source; the trip's clock starts after the one-time setup of the device (choosing
        it, its context), which the record keeps apart as ``setup_ms``."""
        t_setup = time.perf_counter()
        if context is not None:
            info = _devices.adopt_context(context)
            if info is None:
                raise ClmagicError("clmagic needs a single-device context")
            dev = context.devices[0]
        else:
            info, dev = self.resolve(device)
        ctx, queue = _devices.context_for(info, dev)
        t0 = time.perf_counter()
        setup = (t0 - t_setup) * 1000  # microseconds, but on a device's first use in a process
        return _Trip(self._prepare(source, options, info), info, dev, ctx, queue, line_offset, t0,
                     setup)

    def _from_store(self, trip: _Trip) -> tuple[driver.Built | None, Outcome, str]:
        """The program from the store: (built, HIT, note); (None, MISS or CORRUPT, "") when the
        store has no usable entry (a damaged one is removed, to be rebuilt)."""
        entry, corrupt = self._lookup(trip.info, trip.prep.key)
        if entry is not None:
            try:
                built = self._load(trip.ctx, [trip.dev], [entry], trip.prep.opts)
            except CorruptEntry as exc:
                corrupt = self._damaged(trip.info, trip.prep.key, exc)
            else:
                self._keep(trip.memo, built)
                self._count_hit(*trip.memo)
                return built, Outcome.HIT, _served_from(entry, self._store)
        return None, Outcome.CORRUPT if corrupt else Outcome.MISS, ""

    def _compile_trip(self, trip: _Trip) -> driver.Built:
        try:
            return self._compile(trip.ctx, [trip.dev], trip.info.label, trip.prep,
                                 trip.line_offset)
        except BuildError as exc:
            self._failed([trip.info], trip.prep, trip.t0, exc)
            raise

    def _failed(self, infos: list[DeviceInfo], prep: Prepared, t0: float, exc: BuildError,
                origin: str = "cell") -> None:
        """FAILED records (one per device) for a build the driver refused: its first error line
        as the note, its log as the build log."""
        for info in infos:
            self.counters.add(info.fingerprint, Outcome.FAILED)
        if not self._history.active:
            return
        recs = [Record(time=time.time(), outcome=Outcome.FAILED, kernels=[],
                       ms=(time.perf_counter() - t0) * 1000, build_ms=0.0, device=info,
                       key=prep.key, options=prep.opts.effective, preview=prep.preview,
                       source=prep.source, source_bytes=len(prep.src), headers=prep.headers,
                       build_log=exc.log, note=exc.first_error, origin=origin)
                for info in infos]
        with self._lock:
            for rec in recs:
                self._history.add(rec)
        self._history.changed()

    def _finish(self, trip: _Trip, outcome: Outcome, built: driver.Built, saved: bool = False,
                note: str = "", code_key: str | None = None, save: bool = False,
                why: str = "") -> BuildResult:
        """The trip's result; with ``save``, the binary readout and save are left to the
        saver (the result's ``saved`` and ``note`` wait for them, its ``latest`` does not);
        ``why`` (what is new, for a MISS) is added to the save's note."""
        rec = self._record(trip.info, trip.prep, trip.t0, outcome, built, saved=saved, note=note,
                           code_key=code_key, line_offset=trip.line_offset,
                           setup_ms=trip.setup_ms)
        kept = None
        if self._history.active:  # CLMAGIC_RECORD=off without debug: nothing to keep or print
            with self._lock:
                kept = self._history.add(rec)
        if not save:
            self.counters.add(rec.fingerprint, outcome, 1, rec.saved_ms, later=self._later)
        pending = (saves.save_later(self, rec, kept, built.program, trip.dev, why) if save
                   else None)
        self._history.changed()
        return BuildResult(built.program, built.kernels, trip.ctx, trip.queue, trip.prep.opts,
                           rec, pending)

    def build_program(self, context: cl.Context, source: str | bytes,
                      options: str | BuildOptions | None = None,
                      devices: Sequence[cl.Device] | None = None, *,
                      origin: str = "cell") -> ProgramBuild:
        """Build ``source`` in the caller's ``context`` for ``devices`` (default: all of the
        context's), through the caches, making no kernels: what :mod:`clmagic.process.hook` needs
        (see :func:`clmagic.trip.programs.build_program`)."""
        return programs.build_program(self, context, source, options, devices, origin=origin)

    # -- the steps ------------------------------------------------------------------------------

    def _prepare(self, source: str | bytes, options: Options, info: DeviceInfo) -> Prepared:
        """The source checked, its options parsed, headers found, key hashed (remembered for
        sources that include nothing: :func:`clmagic.key.prepare.prepare`)."""
        return prepare(source, options, info, self._prepared, self._lock)

    @property
    def counters(self) -> Counters:
        """The store's lifetime (and session) counters; session only without a store."""
        return self._store.counters if self._store is not None else self._no_counters

    def _keep(self, memo: tuple[str, str], built: driver.Built) -> None:
        """Keep a program in memory, dropping the least recently used past ``memory_max``."""
        with self._lock:
            self._memory[memo] = built
            self._memory.move_to_end(memo)
            while len(self._memory) > max(self.memory_max, 1):
                self._memory.popitem(last=False)

    def _lookup(self, info: DeviceInfo, key: str) -> tuple[Entry | None, bool]:
        """The stored entry of ``key`` (``None`` when there is none) and whether a damaged one
        was found (reported, deleted, rebuilt by the caller)."""
        if self._store is None:
            return None, False
        wait_everywhere((info.fingerprint, key))  # a save of this key still under way
        try:
            return self._store.get(info.fingerprint, key), False
        except (CorruptEntry, OSError) as exc:
            return None, self._damaged(info, key, exc)

    def _damaged(self, info: DeviceInfo, key: str, exc: Exception) -> bool:
        warn_once(f"cache entry {key[:12]} is damaged ({exc}); rebuilding it")
        with self._lock:
            self._history.event("CORRUPT", key, [], detail=str(exc))
        if self._store is not None:
            self._store.delete(info.fingerprint, key)
        return True

    def _compile(self, ctx: cl.Context, devs: list[cl.Device], label: str, prep: Prepared,
                 line_offset: int = 0, kernels: bool = True) -> driver.Built:
        """Build from source for ``devs`` in one driver call."""
        if not strip_comments(prep.source).strip():  # checked here: a cached source has code
            raise ClmagicError("the source holds only comments: nothing to compile")
        try:
            return driver.from_source(ctx, devs, prep.source, prep.opts.effective, kernels)
        except driver.BuildFailed as exc:
            raise BuildError(exc.log, options=prep.opts.effective, device=label,
                             line_offset=line_offset) from None

    def _load(self, ctx: cl.Context, devs: list[cl.Device], entries: list[Entry],
              opts: BuildOptions, kernels: bool = True) -> driver.Built:
        """The program made from the entries' binaries, one per device of ``devs``; the first
        entry's original build time and log go with it."""
        for e in entries:  # a binary from elsewhere: proven loadable in a child first
            if e.foreign:
                vet.vouch(e, opts.effective, self._store)
        try:
            built = driver.from_binaries(ctx, devs, [e.binary or b"" for e in entries],
                                         opts.effective, kernels)
        except cl.Error as exc:
            raise CorruptEntry(f"the driver refused the stored binary: {exc}") from None
        return dataclasses.replace(built, build_ms=entries[0].build_ms,
                                   log=entries[0].meta.build_log,
                                   log_from=entries[0].meta.rekeyed_from)

    def _record(self, info: DeviceInfo, prep: Prepared, t0: float, outcome: Outcome,
                built: driver.Built, *, saved: bool = False, note: str = "",
                origin: str = "cell", log: str | None = None,
                code_key: str | None = None, line_offset: int = 0,
                setup_ms: float = 0.0) -> Record:
        """The trip's record for one device (the history takes it in ``_finish``)."""
        return Record(
            time=time.time(), outcome=outcome, kernels=list(built.names),
            ms=(time.perf_counter() - t0) * 1000, build_ms=built.build_ms, device=info,
            key=prep.key, options=prep.opts.effective, preview=prep.preview, source=prep.source,
            source_bytes=len(prep.src), headers=prep.headers,
            build_log=built.log if log is None else log, line_offset=line_offset,
            saved_to_store=saved, note=note, origin=origin, code_key=code_key or "",
            rekeyed_from=built.log_from, setup_ms=setup_ms)

    def _count_hit(self, fingerprint: str, key: str) -> None:
        """Count a store hit on the saver's thread, when it runs anyway (the user does not wait
        for a counter)."""
        if self._store is not None:
            self._hits.count(self._store, fingerprint, key)

    def _later(self, job: Callable[[], object]) -> None:
        """Run ``job`` on the saver's thread, when it runs anyway (see :class:`Saver`)."""
        self._saver.submit(None, job, wake=False)
