"""How a build trip ended: the one list of outcomes.

An :class:`~enum.Enum` so that a field typed :class:`Outcome` can hold only these, and a ``str``
so that records, JSON, SQL, the lifetime counter files and the DataFrames keep the plain words
every release wrote (``Outcome.HIT == "HIT"``, ``json.dumps`` gives ``"HIT"``, an f-string
prints ``HIT``). At the ground floor because the store's lifetime counters count them as well
as the build trip does.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Outcome", "SERVED", "UNCACHED"]


class Outcome(str, Enum):
    """How a build trip ended: the same words in the line under a cell, the history DataFrame,
    ``stats()`` and the debug trace. ``list(Outcome)`` gives every one, in the order they are
    shown."""

    _value_: str

    MISS = "MISS"  # built by the driver (and saved when a store is writable)
    HIT = "HIT"  # loaded from the persistent store
    MEMORY = "MEMORY"  # served from this process's memory, no disk, no driver
    REKEYED = "REKEYED"  # same code as a stored entry (comments or spacing changed): loaded
    CORRUPT = "CORRUPT"  # a stored entry failed its checks: rebuilt and rewritten
    BYPASS = "BYPASS"  # built with the cache bypassed (--no-cache)
    FAILED = "FAILED"  # the driver refused the source (the note has its first error line)

    def __str__(self) -> str:
        """The plain word (``HIT``), as the string constants printed, not ``Outcome.HIT``;
        ``format`` follows it on every Python version clmagic supports."""
        return self._value_


#: trips served without a driver build
SERVED = frozenset({Outcome.HIT, Outcome.MEMORY, Outcome.REKEYED})
#: outcomes left out of the hit rate: the cache bypassed, or a build the driver refused
UNCACHED = frozenset({Outcome.BYPASS, Outcome.FAILED})
