"""Looking after the cache without IPython: pick entries by device, age and key prefix, remove
them, count what the store holds and what this session's trips saved, say where the cache is.

Every function takes an optional ``compiler`` (default: the process-wide one) and uses its store;
they are the library under ``%clcache`` and the cache widget.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from clmagic._format import device_label
from clmagic.config import parse_age, parse_size
from clmagic.errors import ClmagicError, DeviceError, OptionsError
from clmagic.key.includes import DRIVER_FLAG_VARS
from clmagic.opencl import devices as _devices
from clmagic.process.session import or_default
from clmagic.store.lifetime import counters_for
from clmagic.trip.records import DeviceUsage, Stats, from_origin, tally_of

if TYPE_CHECKING:
    from clmagic.entry import Entry, EntryMeta
    from clmagic.opencl.devices import DeviceInfo
    from clmagic.store import Store
    from clmagic.trip.compiler import Compiler

__all__ = ["parse_age", "device_fingerprints", "select_entries", "remove_entries",
           "clear_cache", "Removed", "to_clear", "stats", "zero_stats", "lifetime_counts",
           "prune", "cache_info", "CacheInfo", "entry_label", "READ_VARIABLES",
           "read_variables"]

_HEX = re.compile(r"^[0-9a-f]{1,64}$")




def entry_label(meta: EntryMeta) -> str:
    """The short name of a stored entry's device: the one :attr:`DeviceInfo.label` gives the
    device itself (:func:`clmagic._format.device_label`), so a device reads alike whether it is
    on this machine or only in the store."""
    return device_label(meta.platform, meta.device, meta.driver)


def device_fingerprints(spec: object, entries: Iterable[Entry] = ()) -> set[str]:
    """The device fingerprints ``spec`` names.

    A device of this machine (``P:D`` index, name substring, fingerprint, :class:`DeviceInfo`)
    names its own fingerprint. For entries of devices this machine lacks, a fingerprint prefix or
    a substring of the stored platform, device or their label matches too. Nothing matched:
    DeviceError.
    """
    try:
        return {_devices.resolve_device(spec)[0].fingerprint}
    except DeviceError as exc:
        needle = str(spec).strip().lower()
        found = {
            e.fingerprint for e in entries
            if needle and (e.fingerprint.startswith(needle)
                           or needle in f"{e.meta.platform} {e.meta.device} "
                                        f"{entry_label(e.meta)}".lower())
        }
        if not found:
            raise exc from None
        return found


def select_entries(store: Store, device: object = None, older_than: str | float | None = None,
                   prefixes: Iterable[str] = (), now: float | None = None,
                   origin: str | None = None) -> list[Entry]:
    """Entries (metadata only) of ``device`` that were last used more than ``older_than`` ago
    (an age string or seconds; last use is the last hit, else the build), whose key starts
    with one of ``prefixes`` (all when empty) and that were first built for ``origin`` (a
    module, or a package taking its modules, or ``cell``; see :func:`entry_origin`)."""
    prefixes = [p.strip().lower() for p in prefixes]
    for p in prefixes:
        if not _HEX.match(p):
            raise OptionsError(f"key prefix {p!r} is not hexadecimal (keys are SHA-256 hex)")
    age = None if older_than is None else parse_age(older_than)
    entries = list(store.entries())
    if device is not None and device != "":
        fps = device_fingerprints(device, entries)
        entries = [e for e in entries if e.fingerprint in fps]
    if age is not None:
        cutoff = (time.time() if now is None else now) - age
        entries = [e for e in entries if e.last_used < cutoff]
    if prefixes:
        entries = [e for e in entries if e.key.startswith(tuple(prefixes))]
    if origin is not None:
        entries = [e for e in entries if from_origin(entry_origin(e), origin)]
    return entries


def entry_origin(e: Entry) -> str:
    """Who asked for the build that made an entry: ``cell``, or the module that called
    ``pyopencl.Program.build`` under :func:`clmagic.install` (entries from before origins were
    kept are cells')."""
    return e.meta.origin or "cell"


@dataclass
class Removed:
    """What a clear removed."""

    entries: int = 0
    bytes: int = 0
    location: str = ""
    keys: list[str] = field(default_factory=list)
    #: what the store holds after it (a prune says it; ``-1``: not counted)
    left_entries: int = -1
    left_bytes: int = -1


def _clearable(store: Store, remote: bool) -> Store:
    """The store a clear acts on: a layered store's local layer unless ``remote`` asks for the
    shared one too; a store others share (Redis) only when ``remote`` asks for it."""
    from clmagic.store.layered import LayeredStore

    if isinstance(store, LayeredStore):
        return store if remote else store.local
    if store.shared and not remote:
        raise ClmagicError(f"the cache {store.location} is shared with others: clearing it "
                           "must be asked for (remote=True, or --remote)")
    return store


def remove_entries(entries: Iterable[Entry], compiler: Compiler | None = None, *,
                   remote: bool = False) -> Removed:
    """Delete these entries from the store and from memory; count what went. On a layered
    store only the local layer is touched unless ``remote`` is true (the shared layer is the
    team's: clearing it must be asked for)."""
    c = or_default(compiler)
    if c.store is None:
        return Removed(location=_where(None))
    store = _clearable(c.store, remote)
    out = Removed(location=_where(store))
    for e in entries:
        c.forget(e.fingerprint, e.key)
        if store.delete(e.fingerprint, e.key):
            out.entries += 1
            out.bytes += e.usage.stored_bytes
            out.keys.append(e.key)
    c.history.changed()
    return out


def clear_cache(device: object = None, older_than: str | float | None = None,
                keys: Iterable[str] = (), compiler: Compiler | None = None, *,
                remote: bool = False, origin: str | None = None) -> Removed:
    """Remove the entries that match every filter given (all entries when none is), from the
    store and from this process's memory; says how many entries and bytes went. With a shared
    store behind the local one (``CLMAGIC_REMOTE``), only the local layer is cleared unless
    ``remote`` is true; a store that is itself shared (Redis) is cleared only with ``remote``.
    ``origin``: only the entries first built for it (``cell``, ``pyopencl``,
    ``silx.opencl.processing``)."""
    c = or_default(compiler)
    keys = list(keys)
    if c.store is None:
        return Removed(location=_where(None))
    store = _clearable(c.store, remote)
    if older_than is None and not keys and origin is None:  # whole devices: the store clears
        entries = list(store.entries()) if device not in (None, "") else []
        fps = [None] if device in (None, "") else sorted(device_fingerprints(device, entries))
        out = Removed(location=_where(store))
        for fp in fps:
            n, freed = store.clear(fp)
            c.forget(fp)
            out.entries += n
            out.bytes += freed
        c.history.changed()
        return out
    return remove_entries(select_entries(store, device, older_than, keys, origin=origin), c,
                          remote=remote)


def to_clear(device: object = None, older_than: str | float | None = None,
             keys: Iterable[str] = (), compiler: Compiler | None = None, *,
             remote: bool = False, origin: str | None = None) -> Removed:
    """What :func:`clear_cache` with the same arguments would remove, counted and not removed:
    so a question can say it ("remove 5 entries (267.7 KiB)?") and an empty cache need not be
    asked about. The same store is chosen (a shared one refused without ``remote``)."""
    c = or_default(compiler)
    if c.store is None:
        return Removed(location=_where(None))
    store = _clearable(c.store, remote)
    out = Removed(location=_where(store))
    for e in select_entries(store, device, older_than, keys, origin=origin):
        out.entries += 1
        out.bytes += e.usage.stored_bytes
        out.keys.append(e.key)
    return out


def _where(store: Store | None) -> str:
    return f"{store.kind} cache {store.location}" if store is not None else "memory only"


def usage(store: Store | None, origin: str | None = None) -> list[DeviceUsage]:
    """Entries, bytes and loads per device fingerprint in ``store`` (of the entries first built
    for ``origin``, when given)."""
    per: dict[str, DeviceUsage] = {}
    for e in store.entries() if store is not None else ():
        if not from_origin(entry_origin(e), origin):
            continue
        d = per.setdefault(e.fingerprint, DeviceUsage(e.fingerprint, entry_label(e.meta)))
        d.entries += 1
        d.bytes += e.usage.stored_bytes
        d.hits += e.usage.hits
    return sorted(per.values(), key=lambda d: d.label)


def stats(compiler: Compiler | None = None, origin: str | None = None) -> Stats:
    """This session's and the store's lifetime hits, misses, memory hits, corrupt entries,
    evictions, hit rate and time saved, side by side, with the entries and bytes the store
    holds per device (and each device's lifetime counts).

    ``origin`` (``cell``, a module such as ``pyopencl.elementwise``, or a package: ``silx``)
    filters every figure given alike: this session's trips of that origin, and the stored
    entries first built for it. The lifetime counters and evictions are kept per device, not
    per origin, so with ``origin`` they are not given (``lifetime`` is ``None``) rather than
    given for every origin beside figures of one."""
    c = or_default(compiler)
    devices = usage(c.store, origin)
    records = [r for r in c.history.records if from_origin(r.origin, origin)]
    s = Stats.of(records, location=_where(c.store), devices=devices,
                 max_size=c.store.max_size if c.store is not None else 0,
                 dropped=c.history.dropped, origin=origin)
    if origin is not None:
        return s
    evicted = tally_of(c.counters.session)
    s.session.evictions, s.session.evicted_bytes = evicted.evictions, evicted.evicted_bytes
    life = lifetime_counts(c.store)
    if life is not None:
        s.lifetime = tally_of(life)
        per = {d.fingerprint: d for d in devices}
        for fp in sorted({fp for fp, _ in life} - set(per)):  # counted, no entries left
            devices.append(DeviceUsage(fp, fp))
        for d in devices:
            d.lifetime = tally_of(life, d.fingerprint)
    return s


def lifetime_counts(store: Store | None) -> dict[tuple[str, str], list[float]] | None:
    """Every process's counts in ``store`` since the last zeroing, per (fingerprint, counter);
    ``None`` where the store keeps none (memory only, a Redis store)."""
    folder = store.stats_folder if store is not None else None
    return counters_for(folder).lifetime() if folder is not None else None


def zero_stats(compiler: Compiler | None = None) -> bool:
    """Set the store's lifetime statistics to zero (this session's are kept); returns whether
    there was anything to zero (``False``: no count since the last zero, nothing written)."""
    c = or_default(compiler)
    if c.store is None or c.store.stats_folder is None:
        where = "the cache is off (memory only)" if c.store is None else \
            f"a {c.store.kind} cache keeps no lifetime statistics on this machine"
        raise OptionsError(f"{where}: nothing to zero")
    try:
        return counters_for(c.store.stats_folder).zero()
    except OSError as exc:
        raise ClmagicError(f"cannot zero the statistics in {c.store.stats_folder}: "
                           f"{exc.strerror or exc}") from None


def prune(max_size: int | str | None = None, older_than: str | float | None = None,
          compiler: Compiler | None = None) -> Removed:
    """Evict least recently used entries until the store holds at most ``max_size`` (bytes or
    ``500M``-style; default: the store's own limit; ``0``: no limit, as in
    ``CLMAGIC_CACHE_MAX_SIZE``), and every entry unused for ``older_than`` (an age or seconds);
    says how many entries and bytes went and what is left. As ccache does, a size below the
    largest entry evicts down to it (every entry, if need be): the user asked for that size.
    Refused: a memory-only cache, and nothing to go by (no size limit and no age)."""
    c = or_default(compiler)
    if c.store is None:
        raise OptionsError("the cache is off (memory only): nothing to prune")
    limit = parse_size(max_size) if max_size is not None else c.store.max_size
    age = parse_age(older_than) if older_than is not None else None
    if not limit and age is None:
        said = "a size of 0 means no limit" if max_size is not None else \
            f"the cache at {c.store.location} has no size limit"
        raise OptionsError(f"{said}: give a size above 0 or an age (--older-than)")
    uses = c.store.usage_list()
    total = sum(u.size for u in uses)
    gone = c.store.evict(limit if limit else total, age, uses=uses)
    out = Removed(location=_where(c.store))
    for u in gone:
        c.forget(u.fingerprint, u.key)
        out.entries += 1
        out.bytes += u.size
        out.keys.append(u.key)
    out.left_entries, out.left_bytes = len(uses) - out.entries, total - out.bytes
    c.history.changed()
    return out


#: the variables of other tools that clmagic reads (besides its own ``CLMAGIC_*``): the device
#: choice and pyopencl's build options and cache switch (the hook follows them), and the
#: drivers' extra build flags (they enter the key)
READ_VARIABLES = frozenset({"PYOPENCL_CTX", "PYOPENCL_BUILD_OPTIONS", "PYOPENCL_NO_CACHE",
                            *DRIVER_FLAG_VARS})


def read_variables(env: dict[str, str]) -> dict[str, str]:
    """The variables of ``env`` that clmagic reads: its own and :data:`READ_VARIABLES`. Not
    those it only passes by (``PYOPENCL_HOME``, which pyopencl sets for itself at import,
    ``POCL_DEVICES``…): a list of what is in effect should hold what changes clmagic."""
    return {k: v for k, v in env.items() if k.startswith("CLMAGIC_") or k in READ_VARIABLES}


@dataclass
class CacheInfo:
    """Where the cache is, which backend, which variables are in effect, which devices exist."""

    location: str
    kind: str
    writable: bool
    reason: str
    env: dict[str, str]
    record: str
    active: str
    devices: list[tuple[DeviceInfo, DeviceUsage | None]]


def cache_info(compiler: Compiler | None = None) -> CacheInfo:
    """Describe the cache of ``compiler`` (active device marked ``*`` in the text form)."""
    c = or_default(compiler)
    store = c.store
    per = {d.fingerprint: d for d in usage(store)}
    infos: list[DeviceInfo] = []
    active = ""
    try:  # a diagnostic must work when the device setting or the platforms do not
        infos = _devices.list_devices()
        active = c.resolve()[0].fingerprint
    except DeviceError:
        pass
    return CacheInfo(
        location=store.location if store else "memory only",
        kind=store.kind if store else "none", writable=bool(store and store.writable),
        reason=(store.reason if store else "") or "", env=read_variables(c.settings.env),
        record=c.settings.record, active=active,
        devices=[(i, per.get(i.fingerprint)) for i in infos],
    )
