"""The history of build trips in this process, and the tally drawn from it."""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .entry import Entry
from .report import stats_html, stats_text

if TYPE_CHECKING:
    from .devices import DeviceInfo

__all__ = ["Outcome", "Record", "History", "Stats", "DeviceUsage", "from_origin"]


class Outcome:
    """How a build trip ended (plain strings, so they print and compare simply)."""

    MISS = "MISS"  # built by the driver (and saved when a store is writable)
    HIT = "HIT"  # loaded from the persistent store
    MEMORY = "MEMORY"  # served from this process's memory, no disk, no driver
    CORRUPT = "CORRUPT"  # a stored entry failed its checks: rebuilt and rewritten
    BYPASS = "BYPASS"  # built with the cache bypassed (--no-cache)
    ALL = (MISS, HIT, MEMORY, CORRUPT, BYPASS)


@dataclass(frozen=True)
class Record:
    """One build trip: what was built, for which device and key, how it ended and how long it
    took. The history keeps it, the result under the cell shows it (``BuildResult.record``),
    and the entry saved for a MISS is made from it (:meth:`entry`)."""

    time: float
    outcome: str
    kernels: list[str]
    ms: float
    build_ms: float
    device: DeviceInfo
    key: str
    options: str
    preview: str
    source: str | None = None
    source_bytes: int = 0
    headers: tuple[str, ...] = ()
    build_log: str = ""
    saved_to_store: bool = False
    note: str = ""
    #: who asked for the build: ``cell`` (``%%clkernel`` or :func:`clmagic.build`), else the
    #: module that called ``pyopencl.Program.build`` (``pyopencl.elementwise``, ``silx.…``)
    origin: str = "cell"

    @property
    def fingerprint(self) -> str:
        """The device fingerprint."""
        return self.device.fingerprint

    @property
    def saved_ms(self) -> float:
        """Build time avoided by this trip (0 for a build)."""
        if self.outcome in (Outcome.HIT, Outcome.MEMORY):
            return max(self.build_ms - self.ms, 0.0)
        return 0.0

    def entry(self, binary: bytes) -> Entry:
        """The store entry of this trip's build (``binary`` read out of the driver)."""
        d = self.device
        return Entry.create(
            self.key, d.fingerprint, binary, kernels=self.kernels, options=self.options,
            device=d.device_name, platform=d.platform_name, driver=d.driver_version,
            device_version=d.device_version, platform_version=d.platform_version,
            source_bytes=self.source_bytes, build_ms=round(self.build_ms, 3), created=self.time,
            build_log=self.build_log, headers=list(self.headers), origin=self.origin)


@dataclass
class History:
    """Every trip of this process; prints one debug line per event when ``debug`` is set."""

    debug: bool = False
    keep_source: bool = False
    records: list[Record] = field(default_factory=list)
    tally: Counter[str] = field(default_factory=Counter)

    def add(self, record: Record) -> Record:
        """Append a record (dropping its source unless the record level is ``full``)."""
        if not self.keep_source and record.source is not None:
            record = dataclasses.replace(record, source=None)
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


def from_origin(origin: str, wanted: str | None) -> bool:
    """Whether a record's or entry's ``origin`` is ``wanted``: the same module or one inside it
    (``pyopencl`` takes ``pyopencl.elementwise``); ``None`` takes every origin."""
    return wanted is None or origin == wanted or origin.startswith(wanted + ".")


@dataclass
class DeviceUsage:
    """What one device's entries take in the store."""

    fingerprint: str
    label: str
    entries: int = 0
    bytes: int = 0
    hits: int = 0


@dataclass
class Stats:
    """This session's build trips and what the store holds, per device.

    ``hit_rate`` is the share of cached trips (HIT, MEMORY, MISS, CORRUPT; not BYPASS) that did
    not need the driver's build; ``saved_ms`` is original build time minus load time, summed.
    """

    hits: int = 0
    misses: int = 0
    memory: int = 0
    corrupt: int = 0
    bypass: int = 0
    saved_ms: float = 0.0
    location: str = "memory only"
    devices: list[DeviceUsage] = field(default_factory=list)

    @classmethod
    def of(cls, records: list[Record], **kwargs: Any) -> Stats:
        """Count ``records`` (other fields from ``kwargs``)."""
        n = Counter(r.outcome for r in records)
        return cls(hits=n[Outcome.HIT], misses=n[Outcome.MISS], memory=n[Outcome.MEMORY],
                   corrupt=n[Outcome.CORRUPT], bypass=n[Outcome.BYPASS],
                   saved_ms=sum(r.saved_ms for r in records), **kwargs)

    @property
    def hit_rate(self) -> float | None:
        """Share of cached trips served without a driver build; ``None`` before any trip."""
        total = self.hits + self.memory + self.misses + self.corrupt
        return (self.hits + self.memory) / total if total else None

    @property
    def entries(self) -> int:
        """Entries in the store, all devices."""
        return sum(d.entries for d in self.devices)

    @property
    def bytes(self) -> int:
        """Bytes the store's entries take, all devices."""
        return sum(d.bytes for d in self.devices)

    def __str__(self) -> str:
        return stats_text(self)

    def _repr_html_(self) -> str:
        return stats_html(self)
