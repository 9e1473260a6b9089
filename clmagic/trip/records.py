"""What a build trip leaves: its :class:`Record`, and the tallies and statistics drawn from records
(the history that keeps them is :mod:`clmagic.trip.history`)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clmagic.entry import Entry
from clmagic.key.includes import strip_comments
from clmagic.opencl.facts import facts_to_json
from clmagic.outcome import SERVED, UNCACHED, Outcome

if TYPE_CHECKING:
    from collections.abc import Mapping

    from clmagic.opencl.devices import DeviceInfo
    from clmagic.opencl.facts import KernelFacts

__all__ = ["Record", "Stats", "DeviceUsage", "from_origin", "kernels_in",
           "RECORD_LEVELS", "Tally", "tally_of"]


#: what ``CLMAGIC_RECORD`` may say: nothing recorded, each trip without its source, with it
RECORD_LEVELS = ("off", "summary", "full")


@dataclass(frozen=True)
class Record:
    """One build trip: what was built, for which device and key, how it ended and how long it
    took. The history keeps it, the result under the cell shows it (``BuildResult.record``),
    and the entry saved for a MISS is made from it (:meth:`entry`)."""

    time: float
    outcome: Outcome
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
    #: added to the source's line numbers in the build log (1 under a ``%%clkernel`` line)
    line_offset: int = 0
    #: before the trip's clock: choosing the device and making its context (its first use in
    #: the process: pyopencl and the driver start up); ``ms`` does not include it
    setup_ms: float = 0.0
    saved_to_store: bool = False
    note: str = ""
    #: who asked for the build: ``cell`` (``%%clkernel`` or :func:`clmagic.build`), else the
    #: module that called ``pyopencl.Program.build`` (``pyopencl.elementwise``, ``silx.…``)
    origin: str = "cell"
    #: the key of the source's code alone ("" when it cannot be rekeyed)
    code_key: str = ""
    #: the key of the source whose build made the binary and log, when not this one (REKEYED,
    #: and HITs of a rekeyed entry): the log's line numbers are that source's
    rekeyed_from: str = ""
    #: what the compiler made of each kernel (``None``: not known); kept in the saved entry
    facts: Mapping[str, KernelFacts] | None = None
    #: a one-time cost inside ``ms`` (a binary from elsewhere checked in a child process, a wait
    #: for this program's save), and what it was: the line says it apart from the load
    once_ms: float = 0.0
    once_what: str = ""

    @property
    def fingerprint(self) -> str:
        """The device fingerprint."""
        return self.device.fingerprint

    @property
    def saved_ms(self) -> float:
        """Build time avoided by this trip (0 for a build)."""
        if self.outcome in SERVED:
            return max(self.build_ms - self.ms, 0.0)
        return 0.0

    def entry(self, binary: bytes) -> Entry:
        """The store entry of this trip's build (``binary`` read out of the driver)."""
        return Entry.create(self.key, self.device.fingerprint, binary, **self.entry_fields())

    def entry_fields(self) -> dict[str, Any]:
        """What :meth:`entry` stores besides the key, the device and the binary: plain JSON
        values (another process may make the entry from them: :mod:`clmagic.trip.finish`)."""
        d = self.device
        return dict(
            kernels=list(self.kernels), options=self.options, device=d.device_name,
            platform=d.platform_name, driver=d.driver_version, device_version=d.device_version,
            platform_version=d.platform_version, source_bytes=self.source_bytes,
            build_ms=round(self.build_ms, 3), created=self.time, build_log=self.build_log,
            headers=list(self.headers), origin=self.origin, code_key=self.code_key,
            rekeyed_from=self.rekeyed_from,
            kernel_facts=None if self.facts is None else facts_to_json(self.facts))


_KERNEL = re.compile(r"\b(?:__)?kernel\s+(?:__attribute__\s*\(\(.*?\)\)\s*)?void\s+"
                     r"([A-Za-z_]\w*)\s*\(", re.DOTALL)


def kernels_in(source: str) -> list[str]:
    """The kernel names a source defines, by a light scan (``__kernel void NAME(``, comments
    left out): what a FAILED trip, which made no kernels, is named by in the history."""
    return list(dict.fromkeys(_KERNEL.findall(strip_comments(source))))


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
    #: loads of the entries the store holds now, each counted since it was stored (the
    #: entries' own use counts): not the HIT trips of :class:`Tally`, which count since the
    #: last zeroing, entries since removed included; shown as "loads", never as "hits"
    hits: int = 0
    #: every process's counts for this device since the last zeroing (``None``: not kept)
    lifetime: Tally | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-able usage."""
        return {"fingerprint": self.fingerprint, "label": self.label, "entries": self.entries,
                "bytes": self.bytes, "hits": self.hits,
                "lifetime": self.lifetime.as_dict() if self.lifetime is not None else None}


@dataclass
class Tally:
    """Counts of trips by outcome (any outcome name), time saved, and evictions."""

    counts: dict[str, int] = field(default_factory=dict)
    saved_ms: float = 0.0
    evictions: int = 0
    evicted_bytes: int = 0

    def __getitem__(self, outcome: str) -> int:
        return self.counts.get(outcome, 0)

    @property
    def hit_rate(self) -> float | None:
        """Share of cached trips (not BYPASS nor FAILED) served without a driver build (HIT,
        MEMORY, REKEYED); ``None`` before any trip."""
        total = sum(n for o, n in self.counts.items() if o not in UNCACHED)
        return sum(self[o] for o in SERVED) / total if total else None

    def as_dict(self) -> dict[str, Any]:
        """JSON-able counts."""
        return {"counts": dict(self.counts), "hit_rate": self.hit_rate,
                "saved_ms": self.saved_ms, "evictions": self.evictions,
                "evicted_bytes": self.evicted_bytes}


def tally_of(counters: dict[tuple[str, str], list[float]],
             fingerprint: str | None = None) -> Tally:
    """The lifetime :class:`Tally` from counters keyed by (fingerprint, name) with [count,
    value] (``value``: ms saved, bytes for evictions), of one device or all."""
    out = Tally()
    for (fp, name), (count, value) in counters.items():
        if fingerprint is not None and fp != fingerprint:
            continue
        if name == "EVICT":
            out.evictions += int(count)
            out.evicted_bytes += int(value)
        else:
            out.counts[name] = out.counts.get(name, 0) + int(count)
            out.saved_ms += value
    return out


@dataclass
class Stats:
    """This session's build trips and the store's lifetime figures, with what the store holds
    per device.

    ``session`` counts this process's trips (from the history) and the evictions its saves
    caused; ``lifetime`` every process's since the last zeroing (``None`` where the store keeps
    none); ``hit_rate`` is the share of cached trips (not BYPASS nor FAILED) that did not
    need the driver's build (HIT, MEMORY, REKEYED); ``saved_ms`` is original build time minus
    load time, summed.
    """

    session: Tally = field(default_factory=Tally)
    lifetime: Tally | None = None
    location: str = "memory only"
    devices: list[DeviceUsage] = field(default_factory=list)
    max_size: int = 0
    #: this session's older trips the history no longer keeps (``CLMAGIC_HISTORY_MAX``), so
    #: ``session`` does not count them; ``lifetime`` does
    dropped: int = 0
    #: the origin every figure is of (``None``: all): ``session`` counts its trips, ``devices``
    #: its entries; ``lifetime`` and the evictions, kept per device and not per origin, are
    #: then not given (``None``, and the renderings say so) rather than given for every origin
    origin: str | None = None

    @classmethod
    def of(cls, records: list[Record], **kwargs: Any) -> Stats:
        """Count ``records`` (other fields from ``kwargs``)."""
        n = Counter(r.outcome.value for r in records)  # plain names, as the lifetime's
        session = Tally(counts=dict(n), saved_ms=sum(r.saved_ms for r in records))
        return cls(session=session, **kwargs)

    @property
    def hits(self) -> int:
        """Store hits this session."""
        return self.session[Outcome.HIT]

    @property
    def misses(self) -> int:
        """Misses this session."""
        return self.session[Outcome.MISS]

    @property
    def memory(self) -> int:
        """Memory hits this session."""
        return self.session[Outcome.MEMORY]

    @property
    def corrupt(self) -> int:
        """Corrupt entries met this session."""
        return self.session[Outcome.CORRUPT]

    @property
    def bypass(self) -> int:
        """Builds that bypassed the cache this session."""
        return self.session[Outcome.BYPASS]

    @property
    def rekeyed(self) -> int:
        """Entries of the same code loaded under a new key this session."""
        return self.session[Outcome.REKEYED]

    @property
    def failed(self) -> int:
        """Builds the driver refused this session."""
        return self.session[Outcome.FAILED]

    @property
    def saved_ms(self) -> float:
        """Build time this session's hits avoided."""
        return self.session.saved_ms

    @property
    def hit_rate(self) -> float | None:
        """This session's hit rate (see :attr:`Tally.hit_rate`)."""
        return self.session.hit_rate

    @property
    def entries(self) -> int:
        """Entries in the store, all devices."""
        return sum(d.entries for d in self.devices)

    @property
    def bytes(self) -> int:
        """Bytes the store's entries take, all devices."""
        return sum(d.bytes for d in self.devices)

    def outcomes(self) -> list[str]:
        """Every outcome counted (session or lifetime), known ones first."""
        seen = [o.value for o in Outcome]
        for t in (self.session, self.lifetime):
            for name in t.counts if t is not None else ():
                if name not in seen:
                    seen.append(name)
        return seen

    def as_dict(self) -> dict[str, Any]:
        """JSON-able statistics."""
        return {"location": self.location, "entries": self.entries, "bytes": self.bytes,
                "max_size": self.max_size, "origin": self.origin,
                "session": self.session.as_dict(),
                "lifetime": self.lifetime.as_dict() if self.lifetime is not None else None,
                "devices": [d.as_dict() for d in self.devices]}
