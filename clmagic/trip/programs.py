"""A program built in a caller's context for its devices, through a compiler's caches, making no
kernels: what :mod:`clmagic.process.hook` needs (:meth:`Compiler.build_program` hands over to
:func:`build_program`). One key and one entry per device; the steps are the trip state's
(:class:`~clmagic.trip.state.TripState`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pyopencl as cl

from clmagic._warn import warn_once
from clmagic.entry import Entry
from clmagic.errors import BuildError, CorruptEntry
from clmagic.key.includes import headers_changed
from clmagic.key.options import BuildOptions
from clmagic.key.prepare import Prepared, complete
from clmagic.opencl import devices as _devices
from clmagic.opencl import driver
from clmagic.opencl.devices import DeviceInfo
from clmagic.outcome import Outcome
from clmagic.trip.results import ProgramBuild
from clmagic.trip.save import save_later
from clmagic.trip.state import PROGRAMS_MAX, TripState, served_from

__all__ = ["build_program", "served_from", "PROGRAMS_MAX"]

#: what one device's lookup found: its entry (``None``: none) and whether a damaged one was met
Found = tuple[Entry | None, bool]


@dataclass(frozen=True)
class _Request:
    """One :func:`build_program` under way: the caller's context and devices, each device's
    identity and prepared source, and when the trip's clock started."""

    state: TripState
    context: cl.Context
    devs: list[cl.Device]
    infos: list[DeviceInfo]
    preps: list[Prepared]
    t0: float
    origin: str

    @property
    def keys(self) -> tuple[tuple[str, str], ...]:
        """Each device's (fingerprint, key): the program's name in the programs memo."""
        return tuple((i.fingerprint, p.key) for i, p in zip(self.infos, self.preps))

    def completed(self) -> _Request:
        """This request with every source fully prepared (headers read), before it is built:
        a preparation taken from the manifest answers a lookup only."""
        preps = [complete(p, i) for p, i in zip(self.preps, self.infos)]
        return dataclasses.replace(self, preps=preps)

    def finish(self, outcome: Outcome, built: driver.Built, note: str = "") -> ProgramBuild:
        """The result, one record per device (each with ``outcome`` and ``note``) kept and
        counted: a trip that saves nothing."""
        keep = self.state.history.keep_source  # the hook shows none: only a full history
        recs = [self.state.record(info, prep, self.t0, outcome, built, note=note,
                                  origin=self.origin, with_source=keep)
                for info, prep in zip(self.infos, self.preps)]
        self.state.keep_records(recs)
        for rec in recs:
            self.state.count(rec)
        self.state.changed()
        return ProgramBuild(built.program, outcome, recs, built.log)

    def compile_all(self) -> driver.Built:
        """One driver build from source for every device; a refusal is recorded as FAILED."""
        try:
            return self.state.compile(self.context, self.devs, self.infos[0].label,
                                      self.preps[0], kernels=False)
        except BuildError as exc:
            self.state.failed(self.infos, self.preps[0], self.t0, exc, self.origin)
            raise


def build_program(state: TripState, context: cl.Context, source: str | bytes,
                  options: str | BuildOptions | None = None,
                  devices: Sequence[cl.Device] | None = None, *,
                  origin: str = "cell") -> ProgramBuild:
    """Build ``source`` in the caller's ``context`` for ``devices`` (default: all of the
    context's), through ``state``'s caches, making no kernels.

    When every device's entry loads, the program is made from their binaries (HIT); otherwise it
    is built from source for all of them and each missing device's binary is saved. One record
    per device, marked with ``origin``. Raises :class:`BuildError` / :class:`ClmagicError` as
    :meth:`Compiler.build` does.
    """
    devs = list(devices) if devices else list(context.devices)
    infos = [_devices.identity(d) for d in devs]
    t0 = time.perf_counter()
    req = _Request(state, context, devs, infos, [state.prepare(source, options, i) for i in infos],
                   t0, origin)
    unkeyable = req.preps[0].unkeyable
    if unkeyable:
        warn_once(f"not cached: {unkeyable}")
        return req.finish(Outcome.BYPASS, req.compile_all(), note=f"not cached: {unkeyable}")
    mem = state.recall_program(req.keys, context, devs)
    if mem is not None:
        return req.finish(Outcome.MEMORY, mem, note="memory")
    found = [state.lookup(i, p.key) for i, p in zip(infos, req.preps)]
    hit, corrupt = _from_store(req, found)
    return hit if hit is not None else _from_source(req.completed(), found, corrupt)


def _from_store(req: _Request, found: list[Found]) -> tuple[ProgramBuild | None, bool]:
    """The HIT when every device has an entry and the driver takes their binaries, else
    ``None``; and whether a damaged entry was met (deleted: it is rebuilt)."""
    state = req.state
    corrupt = any(c for _, c in found)
    entries = [e for e, _ in found if e is not None]
    if len(entries) != len(req.devs):
        return None, corrupt
    try:
        built = state.load(req.context, req.devs, entries, req.preps[0].opts, kernels=False)
    except CorruptEntry as exc:
        return None, any([state.damaged(i, p.key, exc) for i, p in zip(req.infos, req.preps)])
    state.keep_program(req.keys, built)
    for fp, key in req.keys:
        state.count_hit(fp, key)
    return req.finish(Outcome.HIT, built, note=served_from(entries[0], state.store)), corrupt


def _from_source(req: _Request, found: list[Found], corrupt: bool) -> ProgramBuild:
    """Build for every device and save the binary of each device that had no entry (every
    device's, when a damaged one was met) on the saver's thread, as a cell's MISS is saved
    (:func:`clmagic.trip.save.save_later`): the caller waits for the driver's build alone, and
    on POCL the readout, which generates every kernel's code, is done by the readout helper
    where it can be. The program handed back is the one the driver built here, from the
    caller's source."""
    state = req.state
    built = req.compile_all()
    outcome = Outcome.CORRUPT if corrupt else Outcome.MISS
    changed = headers_changed(req.preps[0].files)
    if changed:  # as in Compiler.build: kept nowhere
        warn_once(f"not cached: {changed}")
        return req.finish(outcome, built, note=f"not saved: {changed}")
    state.keep_program(req.keys, built)
    if state.store is None:
        return req.finish(outcome, built, note="cache off (memory only)")
    missing = {i for i, (e, _) in enumerate(found) if e is None or corrupt}
    recs = [state.record(info, prep, req.t0, outcome if i in missing else Outcome.MISS, built,
                         origin=req.origin,
                         note="saving" if i in missing else "built with the other devices",
                         log=driver.build_log(built.program, req.devs[i]) if i in missing
                         else None)
            for i, (info, prep) in enumerate(zip(req.infos, req.preps))]
    kept = state.keep_records(recs)
    for i, rec in enumerate(recs):
        if i in missing:  # counted by the save, once it ends
            save_later(state, rec, kept[i], built.program, req.devs[i],
                       files=req.preps[i].files)
        else:
            state.count(rec)
    state.changed()
    return ProgramBuild(built.program, outcome, recs, built.log)
