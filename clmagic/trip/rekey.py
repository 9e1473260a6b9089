"""REKEYED: on an exact-key miss, the binary of a stored entry of the same code (only comments
or spacing changed, :mod:`clmagic.key.code`) is loaded instead of built, and saved under the new
key too. The steps :func:`clmagic.trip.route.travel` takes for it, for each device that missed,
on the trip's :class:`~clmagic.trip.state.TripState`."""

from __future__ import annotations

from clmagic.entry import Entry
from clmagic.errors import CorruptEntry
from clmagic.key.digest import CodeKey, code_key_of
from clmagic.key.prepare import Prepared
from clmagic.opencl.devices import DeviceInfo
from clmagic.trip.state import TripState, saves_settled

__all__ = ["code_key_for", "find", "rekeyed_note", "worth_trying"]

#: callers whose programs are generated text (pyopencl's elementwise, reduction, scan, ...): a
#: generator's text changes with its version, never by a comment edit, so a code lookup for one
#: is pure cost on a miss (lexing a generated program took ~20 ms a MISS, measured on POCL)
GENERATORS = ("pyopencl",)


def worth_trying(origin: str) -> bool:
    """Whether a build asked for by ``origin`` may be rekeyed: any but a generator's."""
    return not any(origin == g or origin.startswith(g + ".") for g in GENERATORS)


def code_key_for(state: TripState, info: DeviceInfo, prep: Prepared) -> CodeKey:
    """The code key of a build that missed (on a miss only: the HIT path never pays for it);
    why there is none goes to the debug trace."""
    if state.store is None:
        return CodeKey(None, "no store to rekey from")
    code = code_key_of(prep.source, prep.opts, info, prep.files, prep.flags)
    if code.key is None:
        state.event("NOREKEY", prep.key, detail=code.reason)
    return code


def find(state: TripState, info: DeviceInfo, code: str, wait: bool = True) -> Entry | None:
    """A stored entry of the same code, with its binary; ``None`` when the store has none (or
    only a damaged one: the trip then builds its own). ``wait``: wait for a save of that code
    under way in this process; otherwise such a save means none (a caller's trip never waits)."""
    store = state.store
    if store is None or saves_settled((info.fingerprint, "code", code), wait) is None:
        return None
    try:
        entry = store.find_code(info.fingerprint, code)
    except (CorruptEntry, OSError):
        return None
    return entry if entry is not None and entry.binary is not None else None


def rekeyed_note(original: Entry) -> str:
    """A REKEYED record's note: which entry's binary it loaded."""
    return f"same code as {original.key[:4]}…: only comments or spacing changed"
