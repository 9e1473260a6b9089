"""Why a build missed: what is new compared with the closest stored entry of the same kernels on
the same device (the key's parts that an entry keeps: kernels, options, source size, headers).
Asked on a MISS only, before its own entry is saved; the HIT path never lists the store."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clmagic.entry import Entry
    from clmagic.key.stamps import Headers
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


def _spelt(name: str) -> str:
    """A header as the source names it: ``"params.h" @.`` (its key name: the spelling and
    where the search found it) is ``params.h``."""
    return name.split(" @", 1)[0].strip().strip('"<>')


def _named(names: set[str] | list[str], one: str = "header") -> str:
    listed = sorted(names)
    shown = ", ".join(listed[:3]) + (f" and {len(listed) - 3} more" if len(listed) > 3 else "")
    return f"{one}{'s' if len(listed) > 1 else ''} {shown}"


def _edited_since(files: Headers | None, created: float) -> list[str]:
    """The headers read whose file was modified after ``created`` (an entry's build time): by
    the stat taken when they were read (no file is opened again)."""
    if files is None or len(files.stamps) != len(files):
        return []
    after = int(created * 1e9)
    return sorted({_spelt(name) for (name, _), stamp in zip(files, files.stamps, strict=True)
                   if stamp[4] > after})


def _header_news(rec: Record, near: Entry, short: str, files: Headers | None) -> str:
    """What changed in the headers against the entry ``near`` (``short``: its key's start),
    else ``""``: headers read now and not then, or the reverse, or the ones edited since."""
    now, then = {_spelt(n) for n in rec.headers}, {_spelt(n) for n in near.meta.headers}
    if now - then:
        return f"reads {_named(now - then, 'new header')} ({short} of the same source size did not)"
    if then - now:
        return f"no longer reads {_named(then - now)} ({short} did)"
    edited = _edited_since(files, near.meta.created)
    return f"{_named(edited)} changed since {short} was built" if edited else ""


def why_missed(store: Store | None, rec: Record, files: Headers | None = None) -> str:
    """``first build of these kernels on this device``, ``new options (...)``, ``new source
    (2f4a… had 812 bytes, this has 815)``, ``header params.h changed since 2f4a… was built``
    (``files``: the headers read, with the stat of each), ``new source (same size as 2f4a…'s)``
    — or ``""`` when the store cannot say (none, or an error listing it: a reason is news,
    never a failure)."""
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
        news = _header_news(rec, near, short, files)
        return news or f"new source or header contents (same size as {short}'s source)"
    return f"new source (same size as {short}'s)"
