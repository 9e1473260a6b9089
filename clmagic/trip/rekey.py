"""REKEYED: on an exact-key miss, the binary of a stored entry of the same code (only comments
or spacing changed, :mod:`clmagic.key.code`) is loaded instead of built, and saved under the new
key too. The steps of :meth:`Compiler.build <clmagic.trip.compiler.Compiler.build>` that do it,
on the trip's :class:`~clmagic.trip.state.TripState`."""

from __future__ import annotations

import dataclasses

from clmagic.errors import CorruptEntry
from clmagic.key.digest import CodeKey, code_key_of
from clmagic.outcome import Outcome
from clmagic.trip.background import wait_everywhere
from clmagic.trip.results import BuildResult
from clmagic.trip.save import not_saved
from clmagic.trip.state import TripState
from clmagic.trip.underway import Trip

__all__ = ["code_key_for", "by_code"]


def code_key_for(state: TripState, trip: Trip) -> CodeKey:
    """The code key of a trip that missed (on a miss only: the HIT path never pays for it);
    why there is none goes to the debug trace."""
    if state.store is None:
        return CodeKey(None, "no store to rekey from")
    code = code_key_of(trip.prep.source, trip.prep.opts, trip.info, trip.prep.files,
                       trip.prep.flags)
    if code.key is None:
        state.event("NOREKEY", trip.prep.key, detail=code.reason)
    return code


def by_code(state: TripState, trip: Trip, code: str) -> BuildResult | None:
    """The trip's result from a stored entry of the same code, loaded (not built) and saved
    under the trip's key too; ``None`` when the store has none that the driver takes."""
    store = state.store
    wait_everywhere((trip.info.fingerprint, "code", code))  # its save may be under way
    try:
        entry = None if store is None else store.find_code(trip.info.fingerprint, code)
        if store is None or entry is None or entry.binary is None:
            return None
        built = state.load(trip.ctx, [trip.dev], [entry], trip.prep.opts)
    except (CorruptEntry, OSError):
        return None  # a damaged original: this trip builds its own
    built = dataclasses.replace(built, log_from=entry.meta.rekeyed_from or entry.key)
    state.keep(trip.memo, built)
    state.count_hit(trip.info.fingerprint, entry.key)  # a hit of the original, batched
    rec = state.record(trip.info, trip.prep, trip.t0, Outcome.REKEYED, built, code_key=code)
    saved = store.put(rec.entry(entry.binary))
    note = f"same code as {entry.key[:4]}…: only comments or spacing changed"
    if not saved:
        note += f"; {not_saved(store)}"
    return state.finish(trip, Outcome.REKEYED, built, saved=saved, note=note, code_key=code)
