"""The build trip, told once, over one device or many (as pyopencl's own ``cache.py`` does it in
one function): look each device's entry up, by its exact key and then, where that misses, by
its code (REKEYED); make the program from the binaries when every device has one; otherwise
build from source only what is missing, and save the binaries in the background.

A cell (``%%clkernel``, :func:`clmagic.build`) is this trip over one device plus its kernels; a
caller's program (the pyopencl hook) is this trip in the caller's context (see
:class:`~clmagic.trip.underway.Trip`). REKEYED, the header check after a build, the memory-only
exit and the records happen here for both. One :class:`~clmagic.trip.records.Record` per device.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

from clmagic._warn import warn_once
from clmagic.entry import Entry
from clmagic.errors import BuildError, CorruptEntry
from clmagic.key.includes import headers_changed
from clmagic.opencl import driver
from clmagic.outcome import Outcome
from clmagic.trip import rekey
from clmagic.trip.background import wait_everywhere
from clmagic.trip.missed import why_missed
from clmagic.trip.pending import Pending
from clmagic.trip.records import Record
from clmagic.trip.save import device_tag, not_saved, save_later
from clmagic.trip.state import Found, TripState, served_from
from clmagic.trip.underway import Trip

__all__ = ["Travelled", "travel"]


@dataclass(frozen=True)
class Travelled:
    """How a trip ended: the program (and, for a cell, its kernels), the trip's outcome, one
    record per device, and the first device's save under way (``None``: nothing to save)."""

    built: driver.Built
    outcome: Outcome
    records: tuple[Record, ...]
    pending: Pending[Record] | None = None


@dataclass(frozen=True)
class _Have:
    """One device's binary: its entry, and the code key it was found by (REKEYED) or ``""``."""

    entry: Entry
    code: str = ""


def travel(state: TripState, trip: Trip, use_cache: bool = True) -> Travelled:
    """Run ``trip`` through the caches (``use_cache=False``: the driver alone). Raises
    :class:`BuildError` when the driver refuses the source (recorded as FAILED)."""
    if not use_cache or trip.prep.unkeyable:
        return _bypass(state, trip)
    if not trip.caller:
        built = state.recall(trip.memo, trip.ctx)
        if built is not None and trip.elsewhere is not None:
            return _theirs(state, trip, built)
        if built is not None:
            return _close(state, trip, Outcome.MEMORY, built, ["memory"] * len(trip.devs))
    found = [state.lookup(i, p.key, wait=not trip.caller)
             for i, p in zip(trip.infos, trip.preps, strict=True)]
    have: dict[int, _Have] = {i: _Have(f.entry) for i, f in enumerate(found) if f.entry}
    corrupt = any(f.corrupt for f in found)
    if len(have) == len(trip.devs):
        done = _from_entries(state, trip, have, found)
        if done is not None:
            return done
        have, corrupt = {}, True
    trip = trip.completed()  # a miss: the headers are read for the rekey and the build
    codes = _rekey(state, trip, have, found)
    if len(have) == len(trip.devs):
        done = _from_entries(state, trip, have, found)
        if done is not None:
            return done
        have = {}
    return _from_source(state, trip, have, found, codes, corrupt)


def _rekey(state: TripState, trip: Trip, have: dict[int, _Have],
           found: Sequence[Found]) -> dict[int, str]:
    """Each missing device's code key (``{index: key}``, none where it cannot be rekeyed);
    ``have`` gains the entries of the same code found for them."""
    codes: dict[int, str] = {}
    if not rekey.worth_trying(trip.origin):
        return codes
    for i, (info, prep) in enumerate(zip(trip.infos, trip.preps, strict=True)):
        if i in have or found[i].underway:
            continue
        code = rekey.code_key_for(state, info, prep).key
        if code is None:
            continue
        codes[i] = code
        entry = rekey.find(state, info, code, wait=not trip.caller)
        if entry is not None:
            have[i] = _Have(entry, code)
    return codes


def _from_entries(state: TripState, trip: Trip, have: dict[int, _Have],
                  found: Sequence[Found]) -> Travelled | None:
    """The program made from every device's binary: HIT (REKEYED where one was found by its
    code, its copy saved under the exact key); ``None`` when the driver refuses one (every
    entry is then reported damaged and deleted, to be rebuilt)."""
    entries = [have[i].entry for i in range(len(trip.devs))]
    try:
        built = state.load(trip.ctx, trip.devs, entries, trip.prep.opts, kernels=not trip.caller)
    except CorruptEntry as exc:
        for i, (info, prep) in enumerate(zip(trip.infos, trip.preps, strict=True)):
            state.damaged(info, have[i].entry.key if have[i].code else prep.key, exc)
        return None
    waited = max(f.waited_ms for f in found)
    if waited >= 1.0:
        built = built.with_once(waited, "waited for its save")
    rekeyed = [i for i in have if have[i].code]
    if rekeyed:
        original = have[rekeyed[0]].entry
        built = dataclasses.replace(built, log_from=_origin(original))
    if not trip.caller:
        state.keep(trip.memo, built)
    if trip.elsewhere is not None and not rekeyed:
        return _theirs(state, trip, built)
    notes, outcomes, saved = [], [], []
    for i, info in enumerate(trip.infos):
        entry = have[i].entry
        state.count_hit(info.fingerprint, entry.key)  # a rekey counts a hit of the original
        if not have[i].code:
            notes.append(served_from(entry, state.store))
            outcomes.append(Outcome.HIT)
            saved.append(False)
            continue
        rec = _record(state, trip, i, Outcome.REKEYED, built, code_key=have[i].code,
                      rekeyed_from=_origin(entry))
        ok = state.store is not None and state.store.put(rec.entry(entry.binary or b""))
        note = rekey.rekeyed_note(entry)
        if not ok and state.store is not None:
            note += f"; {not_saved(state.store)}"
        notes.append(note)
        outcomes.append(Outcome.REKEYED)
        saved.append(ok)
    outcome = Outcome.REKEYED if rekeyed else Outcome.HIT
    return _close(state, trip, outcome, built, notes, outcomes, saved,
                  codes={i: have[i].code for i in rekeyed},
                  origins={i: _origin(have[i].entry) for i in rekeyed})


def _origin(entry: Entry) -> str:
    """The key of the build whose binary and log a rekeyed copy of ``entry`` carries."""
    return entry.meta.rekeyed_from or entry.key


def _theirs(state: TripState, trip: Trip, built: driver.Built) -> Travelled:
    """A cell's load of what another process built or found for the same run (a sweep's
    worker: ``trip.elsewhere``), recorded with that process's outcome and note and counted
    nowhere (no lifetime count, no entry load): that process counted it, and one build
    counts once, not once more as a HIT that saved its build time."""
    assert trip.elsewhere is not None
    outcome, note = trip.elsewhere
    recs = [_record(state, trip, 0, outcome, built, note=note, saved=outcome == Outcome.MISS)]
    state.keep_records(recs)
    state.changed()
    return Travelled(built, outcome, tuple(recs))


def _from_source(state: TripState, trip: Trip, have: dict[int, _Have], found: Sequence[Found],
                 codes: dict[int, str], corrupt: bool) -> Travelled:
    """Build from source; the binaries of the devices that had no entry are saved in the
    background, unless the headers changed during the build or there is no store."""
    outcome = Outcome.CORRUPT if corrupt else Outcome.MISS
    built = _compile(state, trip)
    n = len(trip.devs)
    changed = headers_changed(trip.prep.files)
    if changed:  # the binary may be of other contents than the key covers: keep it nowhere
        warn_once(f"not cached: {changed}")
        return _close(state, trip, outcome, built, [f"not saved: {changed}"] * n)
    if not trip.caller:
        state.keep(trip.memo, built)
    if state.store is None:
        return _close(state, trip, outcome, built, ["cache off (memory only)"] * n, codes=codes)
    why = ""
    if not trip.caller and outcome == Outcome.MISS:
        wait_everywhere(device_tag(trip.info.fingerprint))  # the entries saved before this
        why = why_missed(state.store, _record(state, trip, 0, outcome, built), trip.prep.files)
    return _saved(state, trip, built, outcome, have, found, codes, why)


def _saved(state: TripState, trip: Trip, built: driver.Built, outcome: Outcome,
           have: dict[int, _Have], found: Sequence[Found], codes: dict[int, str],
           why: str) -> Travelled:
    """The records of a build, each missing device's binary saved on the saver's thread (a
    device whose save of the same key is under way already is not saved twice; one that had
    an entry was built with the others, and is not saved again)."""
    recs: list[Record] = []
    for i in range(len(trip.devs)):
        if i in have:
            note, kind = "built with the other devices", Outcome.MISS
        elif found[i].underway:
            note, kind = "its save by an earlier build is under way", outcome
        else:
            note, kind = (f"{why} · saving" if why else "saving"), outcome
        recs.append(_record(state, trip, i, kind, built, note=note, code_key=codes.get(i),
                            with_source=True,
                            log=driver.build_log(built.program, trip.devs[i])
                            if len(trip.devs) > 1 else None))
    kept = state.keep_records(recs)
    pending = None
    for i, rec in enumerate(recs):
        if i not in have and not found[i].underway:  # counted by the save, once it ends
            p = save_later(state, rec, kept[i], built.program, trip.devs[i], why,
                           trip.preps[i].files, hold=not trip.caller, text=trip.text)
            pending = pending or p
        else:
            state.count(rec)
    state.changed()
    return Travelled(built, outcome, tuple(recs), pending)


def _compile(state: TripState, trip: Trip) -> driver.Built:
    """The program from source for every device of the trip, in one driver call (where some
    devices have an entry, they are built too: mixing their binaries with the others' would
    read the new binaries out in the user's process, which on POCL costs more than the build,
    and POCL 3.1 reads an empty binary out of a program built for part of its context). A
    build the driver refuses is recorded as FAILED, with the attempt's time."""
    t0 = time.perf_counter()
    try:
        return state.compile(trip.ctx, trip.devs, trip.info.label, trip.prep, trip.line_offset,
                             kernels=not trip.caller, text=trip.text, quiet=not trip.caller)
    except BuildError as exc:
        state.failed(trip.infos, trip.prep, trip.t0, exc, trip.origin,
                     build_ms=(time.perf_counter() - t0) * 1000)
        raise


def _bypass(state: TripState, trip: Trip) -> Travelled:
    """Build with the driver alone: asked for, or includes the key cannot cover."""
    built = _compile(state, trip)
    why = trip.prep.unkeyable
    if why:
        warn_once(f"not cached: {why}")
    note = f"not cached: {why}" if why else "cache bypassed"
    return _close(state, trip, Outcome.BYPASS, built, [note] * len(trip.devs))


def _record(state: TripState, trip: Trip, i: int, outcome: Outcome, built: driver.Built, *,
            note: str = "", saved: bool = False, code_key: str | None = None,
            with_source: bool | None = None, log: str | None = None,
            rekeyed_from: str | None = None) -> Record:
    """Device ``i``'s record of the trip: a caller's keeps its source at level ``full`` only
    (or when it is saved: the entry is made from it). ``rekeyed_from``: the original build of
    this device's binary, where not the program's first device's."""
    keep = (not trip.caller or state.history.keep_source) if with_source is None else with_source
    rec = state.record(trip.infos[i], trip.preps[i], trip.t0, outcome, built, saved=saved,
                       note=note, origin=trip.origin, code_key=code_key, log=log,
                       line_offset=trip.line_offset, setup_ms=trip.setup_ms, with_source=keep)
    return rec if rekeyed_from is None else dataclasses.replace(rec, rekeyed_from=rekeyed_from)


def _close(state: TripState, trip: Trip, outcome: Outcome, built: driver.Built,
           notes: Sequence[str], outcomes: Sequence[Outcome] | None = None,
           saved: Sequence[bool] | None = None, codes: dict[int, str] | None = None,
           origins: dict[int, str] | None = None) -> Travelled:
    """A trip that saves nothing in the background: its records kept and counted."""
    recs = [_record(state, trip, i, outcomes[i] if outcomes else outcome, built, note=note,
                    saved=bool(saved and saved[i]), code_key=(codes or {}).get(i),
                    rekeyed_from=(origins or {}).get(i))
            for i, note in enumerate(notes)]
    state.keep_records(recs)
    for rec in recs:
        state.count(rec)
    state.changed()
    return Travelled(built, outcome, tuple(recs))
