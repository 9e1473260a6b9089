"""The history of build trips in this process, and the tally drawn from it."""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["Outcome", "Record", "History"]


class Outcome:
    """How a build trip ended (plain strings, so they print and compare simply)."""

    MISS = "MISS"  # built by the driver (and saved when a store is writable)
    HIT = "HIT"  # loaded from the persistent store
    MEMORY = "MEMORY"  # served from this process's memory, no disk, no driver
    CORRUPT = "CORRUPT"  # a stored entry failed its checks: rebuilt and rewritten
    BYPASS = "BYPASS"  # built with the cache bypassed (--no-cache)
    ALL = (MISS, HIT, MEMORY, CORRUPT, BYPASS)


@dataclass
class Record:
    """One build trip."""

    time: float
    outcome: str
    kernels: list[str]
    ms: float
    build_ms: float
    device: str
    fingerprint: str
    key: str
    options: str
    preview: str
    source: str | None = None
    saved_to_store: bool = False
    note: str = ""

    @property
    def saved_ms(self) -> float:
        """Build time avoided by this trip (0 for a build)."""
        if self.outcome in (Outcome.HIT, Outcome.MEMORY):
            return max(self.build_ms - self.ms, 0.0)
        return 0.0


@dataclass
class History:
    """Every trip of this process; prints one debug line per event when ``debug`` is set."""

    debug: bool = False
    keep_source: bool = False
    records: list[Record] = field(default_factory=list)
    tally: Counter[str] = field(default_factory=Counter)

    def add(self, record: Record) -> Record:
        """Append a record (dropping its source unless the record level is ``full``)."""
        if not self.keep_source:
            record.source = None
        self.records.append(record)
        self.event(record.outcome, record.key, record.kernels, count=True,
                   detail=f"{record.ms:.1f} ms")
        if record.saved_to_store:
            self.event("SAVE", record.key, record.kernels, count=True)
        return record

    def event(self, what: str, key: str, kernels: list[str], count: bool = False,
              detail: str = "") -> None:
        """Print one ``clmagic: WHAT key kernels (tally)`` debug line to stderr."""
        if count:
            self.tally[what] += 1
        if not self.debug:
            return
        t = self.tally
        tally = (f"hits {t[Outcome.HIT]}, memory {t[Outcome.MEMORY]}, misses {t[Outcome.MISS]}, "
                 f"saves {t['SAVE']}, corrupt {t[Outcome.CORRUPT]}")
        names = ",".join(kernels) or "-"
        extra = f" {detail}" if detail else ""
        print(f"clmagic: {what:<7} {key[:12]} {names}{extra} ({tally})", file=sys.stderr)

    def clear(self) -> None:
        """Forget the history."""
        self.records.clear()
        self.tally.clear()


def now() -> float:
    """Wall-clock time for records."""
    return time.time()
