"""The public front of the build trip: :class:`Compiler`.

:meth:`Compiler.build` builds a cell's source for one device and makes its kernels;
:meth:`Compiler.build_program` builds in a caller's context for its devices, making no kernels
(what :mod:`clmagic.process.hook` needs). Both are the one trip of :mod:`clmagic.trip.route`
(lookup, rekey, build what is missing, save in the background, records); the first step, the
key, is :mod:`clmagic.key.prepare`.

:class:`Compiler` is a thin front: what it keeps between trips, and every step that reads or
changes it, belong to its :class:`~clmagic.trip.state.TripState` (``compiler.state``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Sequence

import pyopencl as cl

from clmagic.config import Settings
from clmagic.errors import ClmagicError, DeviceError
from clmagic.key.options import BuildOptions
from clmagic.key.prepare import Options
from clmagic.key.source import MAX_SOURCE, normalise_source
from clmagic.opencl import devices as _devices
from clmagic.opencl.devices import DeviceInfo
from clmagic.outcome import Outcome
from clmagic.store import Store, store_for
from clmagic.store.lifetime import Counters
from clmagic.trip import route
from clmagic.trip.background import flush_all
from clmagic.trip.history import History
from clmagic.trip.results import BuildResult, ProgramBuild
from clmagic.trip.state import TripState
from clmagic.trip.underway import Trip

__all__ = ["Compiler", "BuildResult", "ProgramBuild", "MAX_SOURCE", "normalise_source"]


class _Default:
    """The store the settings ask for (the default of ``Compiler(store=...)``)."""


_DEFAULT_STORE = _Default()


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
        self._state = TripState(
            self.settings, store_for(self.settings) if isinstance(store, _Default) else store)
        self.device_spec: str | None = self.settings.device

    @property
    def state(self) -> TripState:
        """What this compiler keeps between trips (memory, history, store, saver) and the steps
        that use it: what the rekey, multi-device and save steps are handed."""
        return self._state

    @property
    def store(self) -> Store | None:
        """Where entries are kept (``None``: memory only), once every pending save of this
        process (of any compiler: they may share the store) is in it. Setting another store
        starts a new generation: nothing built or loaded before is served from memory
        afterwards."""
        flush_all()
        return self._state.store

    @store.setter
    def store(self, store: Store | None) -> None:
        self._state.replace_store(store)

    @property
    def history(self) -> History:
        """This process's trips, once every pending save has said how it ended."""
        self._state.flush()
        return self._state.history

    @property
    def counters(self) -> Counters:
        """The store's lifetime (and session) counters; session only without a store."""
        return self._state.counters

    @property
    def memory_max(self) -> int:
        """Programs kept in memory, least recently used dropped first (``CLMAGIC_MEMORY_MAX``)."""
        return self._state.memory_max

    @memory_max.setter
    def memory_max(self, value: int) -> None:
        self._state.memory_max = value

    def flush(self) -> None:
        """Wait for every save and hit count still running in the background."""
        self._state.flush()

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
        return self._state.forget(fingerprint, key)

    # -- the trip -----------------------------------------------------------------------------

    def key(self, source: str | bytes, options: str | Iterable[str] | None = None,
            device: object = None) -> str:
        """The cache key :meth:`build` would use for these arguments (nothing is built)."""
        return self._state.prepare(source, options, self.resolve(device)[0]).key

    def build(
        self,
        source: str | bytes,
        options: str | Iterable[str] | None = None,
        device: object = None,
        *,
        context: cl.Context | None = None,
        use_cache: bool = True,
        line_offset: int = 0,
        done_elsewhere: tuple[Outcome, str] | None = None,
    ) -> BuildResult:
        """Build ``source`` for one device, through the caches, and make its kernels.

        ``line_offset`` shifts line numbers in a build log (the magic passes 1 so they match
        the cell). ``done_elsewhere``: (outcome, note) of another process's trip for this very
        build, which counted it (a sweep's worker that built or found it): a load from memory
        or the store is then recorded with that outcome and note and counted nowhere else (no
        lifetime count, no entry load), so that one build counts once. The key covers every
        header the source may ``#include`` (see :mod:`clmagic.key.includes`), looked up from
        the current working directory. Raises
        :class:`BuildError` with the driver's log when the build fails, :class:`ClmagicError`
        for a source that cannot be compiled at all (empty, only comments, not UTF-8, NUL
        characters, over :data:`MAX_SOURCE` bytes).
        """
        trip = self._start(source, options, device, context, line_offset)
        if done_elsewhere is not None:
            trip = dataclasses.replace(trip, elsewhere=done_elsewhere)
        done = route.travel(self._state, trip, use_cache)
        assert trip.queue is not None
        return BuildResult(done.built.program, done.built.kernels, trip.ctx, trip.queue,
                           trip.prep.opts, done.records[0], done.pending)

    def _start(self, source: str | bytes, options: Options, device: object,
               context: cl.Context | None, line_offset: int) -> Trip:
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
        return Trip((self._state.prepare(source, options, info),), (info,), (dev,), ctx, queue,
                    t0, line_offset=line_offset, setup_ms=setup)

    def build_program(self, context: cl.Context, source: str | bytes,
                      options: str | BuildOptions | None = None,
                      devices: Sequence[cl.Device] | None = None, *,
                      origin: str = "cell") -> ProgramBuild:
        """Build ``source`` in the caller's ``context`` for ``devices`` (default: all of the
        context's), through the caches, making no kernels: what :mod:`clmagic.process.hook`
        needs. The program is made as pyopencl's own source build makes it (from ``source`` as
        given, in ``context``) unless every device's binary is stored (then from those, HIT);
        nothing of the caller's is kept in memory. One record per device, marked with
        ``origin``. Raises :class:`BuildError` / :class:`ClmagicError` as :meth:`build` does."""
        devs = tuple(devices) if devices else tuple(context.devices)
        infos = tuple(_devices.identity(d) for d in devs)
        t0 = time.perf_counter()
        preps = tuple(self._state.prepare(source, options, i) for i in infos)
        trip = Trip(preps, infos, devs, context, None, t0, text=source, origin=origin,
                    caller=True)
        done = route.travel(self._state, trip)
        return ProgramBuild(done.built.program, done.outcome, list(done.records),
                            done.built.log)
