"""A program built in a caller's context for its devices, through a compiler's caches, making no
kernels: what :mod:`clmagic.process.hook` needs (:meth:`Compiler.build_program` hands over to
:func:`build_program`). One key and one entry per device; the steps are the compiler's."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyopencl as cl

from clmagic.opencl import devices as _devices
from clmagic.opencl import driver
from clmagic._warn import warn_once
from clmagic.entry import Entry
from clmagic.errors import BuildError, CorruptEntry
from clmagic.key.includes import headers_changed
from clmagic._memo import remember
from clmagic.key.options import BuildOptions
from clmagic.outcome import Outcome
from clmagic.trip.results import ProgramBuild
from clmagic.trip.save import save as save_entry
from clmagic.store import Store

if TYPE_CHECKING:  # the compiler hands itself over; it imports this module
    from clmagic.trip.compiler import Compiler

__all__ = ["build_program", "served_from"]

#: how many programs built for callers' contexts a compiler keeps in memory
PROGRAMS_MAX = 256


def build_program(compiler: Compiler, context: cl.Context, source: str | bytes,
                  options: str | BuildOptions | None = None,
                  devices: Sequence[cl.Device] | None = None, *,
                  origin: str = "cell") -> ProgramBuild:
    """Build ``source`` in the caller's ``context`` for ``devices`` (default: all of the
    context's), through ``compiler``'s caches, making no kernels.

    When every device's entry loads, the program is made from their binaries (HIT); otherwise it
    is built from source for all of them and each missing device's binary is saved. One record
    per device, marked with ``origin``. Raises :class:`BuildError` / :class:`ClmagicError` as
    :meth:`Compiler.build` does.
    """
    devs = list(devices) if devices else list(context.devices)
    infos = [_devices.identity(d) for d in devs]
    t0 = time.perf_counter()
    preps = [compiler._prepare(source, options, i) for i in infos]
    label = infos[0].label

    def finish(outcome: Outcome, built: driver.Built, missing: Sequence[int] = (),
               saves: Sequence[tuple[int, tuple[bool, str]]] = (), note: str = ""
               ) -> ProgramBuild:
        # ``outcome`` is every device's, or, when ``missing`` is given, that of the missing
        # devices (the others were rebuilt along with them)
        done = dict(saves)
        recs = [compiler._record(info, prep, t0,
                                 outcome if not missing or i in missing else Outcome.MISS,
                                 built, saved=done.get(i, (False, ""))[0],
                                 note=done.get(i, (False, note))[1], origin=origin)
                for i, (info, prep) in enumerate(zip(infos, preps))]
        if compiler._history.active:
            with compiler._lock:
                for rec in recs:
                    compiler._history.add(rec)
        for rec in recs:
            compiler.counters.add(rec.fingerprint, rec.outcome, 1, rec.saved_ms,
                                  later=compiler._later)
        compiler._history.changed()
        return ProgramBuild(built.program, outcome, recs, built.log)

    def compile_all() -> driver.Built:
        try:
            return compiler._compile(context, devs, label, preps[0], kernels=False)
        except BuildError as exc:
            compiler._failed(infos, preps[0], t0, exc, origin)
            raise

    if preps[0].unkeyable:
        warn_once(f"not cached: {preps[0].unkeyable}")
        built = compile_all()
        return finish(Outcome.BYPASS, built, note=f"not cached: {preps[0].unkeyable}")
    keys = tuple((i.fingerprint, p.key) for i, p in zip(infos, preps))
    mem = compiler._programs.get(keys)
    if (mem is not None and mem.context == context  # and for these very devices (twins
            and mem.program.get_info(cl.program_info.DEVICES) == devs):  # share a key)
        return finish(Outcome.MEMORY, mem, note="memory")

    found = [compiler._lookup(i, p.key) for i, p in zip(infos, preps)]
    corrupt = any(c for _, c in found)
    entries = [e for e, _ in found if e is not None]
    if len(entries) == len(devs):
        try:
            built = compiler._load(context, devs, entries, preps[0].opts, kernels=False)
        except CorruptEntry as exc:
            corrupt = any([compiler._damaged(i, p.key, exc) for i, p in zip(infos, preps)])
        else:
            _remember(compiler, keys, built)
            for fp, key in keys:
                compiler._count_hit(fp, key)
            return finish(Outcome.HIT, built, note=served_from(entries[0], compiler._store))

    built = compile_all()
    changed = headers_changed(preps[0].files)
    if changed:  # as in Compiler.build: kept nowhere
        warn_once(f"not cached: {changed}")
        return finish(Outcome.CORRUPT if corrupt else Outcome.MISS, built,
                      note=f"not saved: {changed}")
    _remember(compiler, keys, built)
    missing = [i for i, (e, _) in enumerate(found) if e is None or corrupt]
    outcome = Outcome.CORRUPT if corrupt else Outcome.MISS
    saves = [(i, save_entry(compiler,
                            compiler._record(infos[i], preps[i], t0, outcome, built,
                                             origin=origin,
                                             log=driver.build_log(built.program, devs[i])),
                            built.program, devs[i]))
             for i in missing]
    return finish(outcome, built, missing, saves, note="built with the other devices")


def _remember(compiler: Compiler, keys: tuple[tuple[str, str], ...], built: driver.Built) -> None:
    """Keep a program built for a caller's context, dropping the oldest past PROGRAMS_MAX."""
    with compiler._lock:
        remember(compiler._programs, keys, built, PROGRAMS_MAX)


def served_from(entry: Entry, store: Store | None) -> str:
    """A HIT's note: which store the entry came from."""
    return f"from {entry.usage.store or (store.kind if store else '')} cache"
