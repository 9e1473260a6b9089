"""Why a build missed: what is new compared with the closest stored entry of the same kernels on
the same device (the key's parts that an entry keeps: kernels, options, source size, headers).
Asked on a MISS only, before its own entry is saved; the HIT path never lists the store."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clmagic.entry import Entry
    from clmagic.store import Store
    from clmagic.trip.records import Record

__all__ = ["why_missed"]


def _closest(rec: Record, entries: list[Entry]) -> Entry | None:
    """The entry of the same kernels that shares the most with ``rec``: options first, then the
    source size, then the newest."""
    same = [e for e in entries if tuple(e.meta.kernels) == tuple(rec.kernels)]
    if not same:
        return None
    return max(same, key=lambda e: (e.meta.options == rec.options,
                                    e.meta.source_bytes == rec.source_bytes, e.meta.created))


def why_missed(store: Store | None, rec: Record) -> str:
    """``first build of these kernels on this device``, ``new options (was -O3)``, ``new source (2f4a… had 812 bytes, this
    has 815)``, ``new source or header`` — or ``""`` when the store cannot say (none, or an
    error listing it: a reason is news, never a failure)."""
    if store is None:
        return ""
    try:
        entries = [e for e in store.entries(rec.fingerprint) if e.key != rec.key]
    except Exception:  # a store that cannot be listed just now: say nothing
        return ""
    near = _closest(rec, entries)
    if near is None:
        return "first build of these kernels on this device"
    m, short = near.meta, near.key[:4] + "…"
    if m.options != rec.options:
        return f"new options (the closest entry, {short}, had {m.options or 'none'})"
    if m.source_bytes != rec.source_bytes:
        return (f"new source ({short} of the same kernels and options had {m.source_bytes} "
                f"bytes, this has {rec.source_bytes})")
    if rec.headers or m.headers:
        return f"new source or header contents (same size as {short}'s source)"
    return f"new source (same size as {short}'s)"
