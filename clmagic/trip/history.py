"""The history of build trips in this process: the newest records, bounded, and the debug trace.

Bounded because a process may build in a loop: every trip, MEMORY hits included, adds a record,
and a history that kept them all would grow the process without end (issue 22, class 8). The
newest ``limit`` records are kept (``CLMAGIC_HISTORY_MAX``); the older ones are counted in
:attr:`History.dropped`, which the views say ("N older trips not kept"). The store's lifetime
counters are kept apart from the history, so they count every trip either way.
"""

from __future__ import annotations

import dataclasses
import sys
import weakref
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from clmagic.config import DEFAULT_HISTORY_MAX
from clmagic.outcome import Outcome
from clmagic.trip.records import Record

__all__ = ["History", "not_kept"]


def not_kept(dropped: int) -> str:
    """What a view of the history says of the trips it no longer keeps ("" when none)."""
    if not dropped:
        return ""
    return f"{dropped} older trip{'s' if dropped != 1 else ''} not kept"


@dataclass
class History:
    """The newest ``limit`` trips of this process at record ``level`` (``off``: none is kept;
    ``summary``: without sources; ``full``: with them), with the number of older ones dropped;
    prints one debug line per event when ``debug``."""

    debug: bool = False
    level: str = "summary"
    #: the most records kept (the newest); older ones are counted in :attr:`dropped`
    limit: int = DEFAULT_HISTORY_MAX
    tally: Counter[str] = field(default_factory=Counter)
    #: told after every trip and every clear made through clmagic (weakly held: a widget that
    #: is gone is not kept alive by the history)
    listeners: list[weakref.WeakMethod[Any]] = field(default_factory=list)
    #: records dropped to keep the newest :attr:`limit` (since the last :meth:`clear`)
    dropped: int = 0
    _kept: deque[Record] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # a deque of fixed length: dropping the oldest is O(1), as a list's del [0] is not
        self._kept = deque(maxlen=max(self.limit, 1))

    @property
    def records(self) -> list[Record]:
        """The trips kept, oldest first (a copy: the history goes on while it is read)."""
        return list(self._kept)

    def carry(self, older: History) -> None:
        """Go on from ``older``'s history (a new compiler of the same session): its records,
        tally and dropped count, then this one's."""
        mine = list(self._kept)
        self._kept.clear()
        self.dropped += older.dropped
        for rec in (*older.records, *mine):
            self._append(rec)
        self.tally = older.tally + self.tally

    def summary(self) -> str:
        """The history in one line: how many trips it keeps, and how many older ones it
        dropped."""
        kept = f"{len(self._kept)} trip{'s' if len(self._kept) != 1 else ''} kept"
        return f"{kept}; {not_kept(self.dropped)}" if self.dropped else kept

    def __str__(self) -> str:
        return self.summary()

    def listen(self, method: Any) -> None:
        """Call the bound ``method()`` after each trip and each clear (see :meth:`changed`)."""
        self.listeners.append(weakref.WeakMethod(method))

    def changed(self) -> None:
        """Tell the listeners that the session or the store changed."""
        alive = []
        for ref in list(self.listeners):
            method = ref()
            if method is not None:
                alive.append(ref)
                method()
        self.listeners[:] = alive

    @property
    def keep_source(self) -> bool:
        """Whether records keep the source (level ``full``)."""
        return self.level == "full"

    @property
    def active(self) -> bool:
        """Whether adding a record does anything (a record is kept or a debug line printed)."""
        return self.level != "off" or self.debug

    def _append(self, record: Record) -> None:
        if len(self._kept) == self._kept.maxlen:
            self.dropped += 1
        self._kept.append(record)

    def add(self, record: Record) -> Record:
        """Append a record (dropping its source unless the record level is ``full``; keeping
        nothing at level ``off``; dropping the oldest past :attr:`limit`); the compiler calls
        :meth:`changed` after it, outside its lock."""
        if self.level != "off":
            if not self.keep_source and record.source is not None:
                record = dataclasses.replace(record, source=None)
            self._append(record)
        self.event(record.outcome, record.key, record.kernels, count=True,
                   detail=_detail(record) if self.debug else "")
        if record.saved_to_store:
            self.event("SAVE", record.key, record.kernels, count=True)
        return record

    def settle(self, record: Record, saved: bool, note: str) -> None:
        """Say how the background save of ``record`` (as :meth:`add` returned it) ended (in
        the history, if it is still kept there)."""
        kept = self._kept
        for i in range(1, len(kept) + 1):  # from the newest: the one saved is near the end
            if kept[-i] is record:
                kept[-i] = dataclasses.replace(record, saved_to_store=saved, note=note)
                break
        if saved:
            self.event("SAVE", record.key, record.kernels, count=True)

    def event(self, what: str, key: str, kernels: list[str], count: bool = False,
              detail: str = "") -> None:
        """Print one ``clmagic: WHAT key kernels (tally)`` debug line to stderr."""
        if count:
            self.tally[what] += 1
        if not self.debug:
            return
        t = self.tally
        tally = (f"hits {t[Outcome.HIT]}, memory {t[Outcome.MEMORY]}, rekeyed "
                 f"{t[Outcome.REKEYED]}, misses {t[Outcome.MISS]}, saves {t['SAVE']}, corrupt "
                 f"{t[Outcome.CORRUPT]}, failed {t[Outcome.FAILED]}")
        names = ",".join(kernels) or "-"
        extra = f" {detail}" if detail else ""
        print(f"clmagic: {what:<7} {key[:12]} {names}{extra} ({tally})", file=sys.stderr)

    def clear(self) -> None:
        """Forget the history (and the count of the trips it dropped)."""
        self._kept.clear()
        self.tally.clear()
        self.dropped = 0


def _detail(record: Record) -> str:
    """A debug line's detail: the trip's time, a one-time cost inside it, why it rekeyed or
    failed."""
    detail = f"{record.ms:.1f} ms"
    if record.once_ms:  # said apart, as the result line says it
        detail += f" (+ {record.once_ms:.1f} ms of it once: {record.once_what})"
    if record.outcome in (Outcome.REKEYED, Outcome.FAILED):
        detail += f" · {record.note}"
    return detail
