"""Renderings of the cache, as text and as HTML: the statistics, what a clear removed, where the
cache is, the cache panel's rows and status, bundle reports (the result line under a cell and
the formats every rendering shares are :mod:`clmagic.show.line`'s).

It imports nothing of clmagic at run time but the plain formats (the types below are for the
checker only); :mod:`clmagic.show.views` attaches these views to their types.
"""

from __future__ import annotations

import html
import time
from typing import TYPE_CHECKING, Any

from clmagic._format import (
    count_of,
    device_label,
    fmt_bytes,
    fmt_duration,
    fmt_ms,
    middle_cut,
    short_key,
    short_paths,
    wrapped,
)

if TYPE_CHECKING:
    from clmagic.cache.bundle import BundleReport, ImportReport
    from clmagic.cache.manage import CacheInfo, Removed
    from clmagic.cache.warm import WarmReport
    from clmagic.entry import Entry
    from clmagic.opencl.devices import DeviceInfo
    from clmagic.trip.records import Stats

__all__ = ["LABELS", "stats_rows", "stats_text", "stats_html", "removed_text", "removed_html",
           "info_text", "info_html", "device_option", "device_lines", "RECORDS", "ENTRY_HEAD",
           "entry_line",
           "panel_status_html", "export_text", "export_html", "import_text", "import_html",
           "warm_text", "warm_html"]


#: how each counter is named in statistics (one not listed shows as its name, lower case)
LABELS = {"HIT": "hits", "MEMORY": "memory hits", "REKEYED": "rekeyed", "MISS": "misses",
          "CORRUPT": "corrupt", "BYPASS": "bypassed", "FAILED": "failed", "EVICT": "evictions"}


#: what a device's "loads" count, apart from the "hits" of the statistics (HIT trips since the
#: last zeroing, entries since removed included)
_LOADS = ("loads of the entries the store holds now, each counted since it was stored "
         "(an imported entry's since its import)")


def _rate(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate:.0%}"


def stats_rows(s: Stats) -> list[tuple[str, str, str]]:
    """(figure, this session, lifetime) for every outcome counted, evictions, hit rate and time
    saved; the lifetime column is ``-`` where the store keeps none. Statistics of one origin
    (:attr:`Stats.origin`) have no evictions row and an empty lifetime column, which the views
    leave out: those counters are kept per device, not per origin."""
    life, origin = s.lifetime, s.origin is not None
    none = "" if origin else "-"
    rows = [(LABELS.get(o, o.lower()), str(s.session[o]), none if life is None else str(life[o]))
            for o in s.outcomes()]
    if not origin:
        rows.append(("evictions", str(s.session.evictions),
                     "-" if life is None else str(life.evictions)))
    rows.append(("hit rate", _rate(s.session.hit_rate),
                 none if life is None else _rate(life.hit_rate)))
    rows.append(("time saved", fmt_duration(s.session.saved_ms),
                 none if life is None else fmt_duration(life.saved_ms)))
    return rows


def _origin_lines(s: Stats) -> list[str]:
    """What statistics of one origin count, and what they leave out (nothing for all)."""
    if s.origin is None:
        return []
    return [f"only {s.origin}: its trips this session, the stored entries first built for it",
            "(lifetime counts and evictions are kept per device, not per origin)"]


def _limit(s: Stats, total: int | None = None) -> str:
    used = s.bytes if total is None else total
    if s.origin is not None and total is None:  # the limit is the whole store's
        return f"only {s.origin}'s entries"
    if not s.max_size:
        return "no size limit"
    return f"limit {fmt_bytes(s.max_size)} ({used / s.max_size:.0%} used)"


def _not_kept(dropped: int) -> str:
    return f"{count_of(dropped, 'older trip')} not kept (CLMAGIC_HISTORY_MAX)"


def stats_text(s: Stats, width: int | None = None) -> str:
    """This session and the lifetime side by side, then the store and each device: its name on
    a line, its figures under it; past ``width`` (a terminal's), a line wraps at its ``·``."""
    rows = [("", "session", "lifetime" if s.origin is None else ""), *stats_rows(s)]
    wide = max(len(r[0]) for r in rows)
    lines = [f"{a:<{wide}}  {b:>10}  {c:>10}".rstrip() for a, b, c in rows]
    lines += _origin_lines(s)
    if s.dropped:  # the session column counts the trips the history keeps
        lines.append(f"session: {_not_kept(s.dropped)}")
    lines += wrapped(f"store: {s.location}", [count_of(s.entries, "entry"), fmt_bytes(s.bytes),
                                             _limit(s)], width, 7)
    for d in s.devices:
        lines += wrapped(f"  {d.label}", [f"({short_key(d.fingerprint)})"], width, 4, " ")
        figures = [f"lifetime {count_of(d.lifetime['HIT'], 'hit')}, {d.lifetime['MISS']} "
                   f"misses, {count_of(d.lifetime.evictions, 'eviction')}"
                   ] if d.lifetime is not None else []
        lines += wrapped(f"    {count_of(d.entries, 'entry')}, {fmt_bytes(d.bytes)}, "
                         f"{count_of(d.hits, 'load')}", figures, width, 4)
    return "\n".join(lines)


def stats_html(s: Stats) -> str:
    """The statistics as two small tables: session and lifetime side by side, then devices."""
    life = s.origin is None  # one origin's: no lifetime column, no evictions (not kept so)
    body = "".join(f"<tr><th>{html.escape(a)}</th><td>{html.escape(b)}</td>"
                   + (f"<td>{html.escape(c)}</td>" if life else "") + "</tr>"
                   for a, b, c in stats_rows(s))
    devs = "".join(
        f"<tr><td>{html.escape(d.label)}</td><td><code>{d.fingerprint}</code></td>"
        f"<td>{d.entries}</td><td>{fmt_bytes(d.bytes)}</td><td>{d.hits}</td>"
        + (f"<td>{d.lifetime.evictions if d.lifetime is not None else '-'}</td>" if life else "")
        + "</tr>" for d in s.devices
    ) or '<tr><td colspan="6">no entries</td></tr>'
    return (
        '<div class="clmagic-stats">'
        f"<table><tr><th></th><th>session</th>{'<th>lifetime</th>' if life else ''}</tr>{body}"
        "</table>" + "".join(f"<p>{html.escape(line)}</p>" for line in _origin_lines(s))
        + (f"<p>session: {_not_kept(s.dropped)}</p>" if s.dropped else "")
        + f"<p>store: <code>{html.escape(s.location)}</code> · {count_of(s.entries, 'entry')} · "
        f"{fmt_bytes(s.bytes)} · {html.escape(_limit(s))}</p>"
        "<table><tr><th>device</th><th>fingerprint</th><th>entries</th><th>size</th>"
        f'<th title="{_LOADS}">loads</th>{"<th>evictions</th>" if life else ""}</tr>{devs}'
        "</table></div>"
    )


# -- cache management: what a clear removed, where the cache is -----------------------------

def removed_text(r: Removed) -> str:
    """``removed 3 entries (12.3 KiB) from directory cache /path``."""
    where = f" from {r.location}" if r.location else ""
    return f"removed {count_of(r.entries, 'entry')} ({fmt_bytes(r.bytes)}){where}"


def removed_html(r: Removed) -> str:
    return f'<div class="clmagic-removed">{html.escape(removed_text(r))}</div>'


#: what each ``CLMAGIC_RECORD`` level keeps of a build, in words
RECORDS = {"summary": "each build's outcome, times, key and first code line "
                      "(CLMAGIC_RECORD=summary; full keeps the source too)",
           "full": "each build's outcome, times, key and its whole source (CLMAGIC_RECORD=full)",
           "off": "nothing: no history of builds (CLMAGIC_RECORD=off)"}


def device_lines(info: DeviceInfo, mark: str, held: str = "",
                 width: int | None = None) -> list[str]:
    """A device as ``clmagic devices`` and ``info`` list it: mark, spec, type and its short
    name first, then what the store holds for it (``held``), its platform, driver and
    fingerprint, and why it cannot build here; past ``width``, the details wrap under the
    name, never inside one."""
    head = f"{mark} {info.spec:<5} {info.type:<5} {info.label}"
    parts = [held, info.platform_name, f"driver {info.driver_version}",
             f"fingerprint {info.fingerprint}"]
    if not info.usable:
        parts.append(f"cannot build here: {info.problem}")
    return wrapped(head, parts, width, indent=len(f"{mark} {info.spec:<5} {info.type:<5} "))


def info_text(i: CacheInfo, width: int | None = None) -> str:
    """Where the cache is, what the history keeps, the variables in effect, one line per
    device (``*`` marks the active one) with what the store holds for it; past ``width``, each
    value wraps under its label (at ``·``, a comma or a space, never inside a word)."""
    state = "" if i.writable or i.kind == "none" else f"(read-only: {i.reason})"
    lines = wrapped(f"cache:   {i.location}", [f"({i.kind})", state], width, 9, " ")
    lines += wrapped("history:", RECORDS.get(i.record, i.record).split(" "), width, 9, " ")
    lines += [f"env:     {k}={v}" for k, v in sorted(i.env.items())] or ["env:     (none)"]
    if i.devices:
        lines.append("devices: (* the one %%clkernel and clmagic.build use)")
    for info, use in i.devices:
        mark = "*" if info.fingerprint == i.active else " "
        held = (f"{count_of(use.entries, 'entry')}, {fmt_bytes(use.bytes)}" if use
                else "no entries")
        lines += device_lines(info, mark, held, width)
    return "\n".join(lines)


def info_html(i: CacheInfo) -> str:
    """The same lines, each one breaking at a space between words when the output area is
    narrow (a ``<pre>`` in JupyterLab breaks anywhere, mid-word; here only a word longer than
    the line, a long path, is broken), wrapped lines indented under their label."""
    rows = "".join(
        f'<div style="padding-left:9ch;text-indent:-9ch">{html.escape(line)}</div>'
        for line in info_text(i).splitlines())
    return (f'<div class="clmagic-info" style="font-family:monospace;font-size:90%;'
            f'white-space:pre-wrap;word-break:normal;overflow-wrap:break-word">{rows}</div>')


# -- the cache panel: device choices, entry rows, status ------------------------------------

def device_option(info: DeviceInfo) -> str:
    """A device as the panel offers it; one that cannot build here says so, and why."""
    text = info.label
    return text if info.usable else f"{text} · cannot build here: {info.problem}"


#: the header over :func:`entry_line` rows
ENTRY_HEAD = (f"{'key':<13} {'kernels':<24} {'options':<22} {'size':>9} {'build':>10} "
              f"{'hits':>5}  last used")


def entry_options(options: str) -> str:
    """An entry's options as a table cell shows them: long paths shortened
    (:func:`clmagic._format.short_paths`: ``-I <pyopencl>/cl``), ``-`` for none."""
    return short_paths(options) if options else "-"


def entry_line(e: Entry) -> str:
    """One entry as a fixed-width row: short key (two builds that differ only in a header's
    contents differ there), kernels, options (long paths shortened, then cut in the middle:
    the build time and hits stay in view), size (what the store reports it takes: the one
    size of an entry, as the status and a clear count it), build time, hits, last use (local
    time, to the second)."""
    m = e.meta
    kernels = middle_cut(", ".join(m.kernels) or "(none)", 24)
    opts = middle_cut(entry_options(m.options), 22)
    used = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.last_used))
    return (f"{short_key(e.key):<13} {kernels:<24} {opts:<22} "
            f"{fmt_bytes(e.usage.stored_bytes):>9} {fmt_ms(m.build_ms):>10} "
            f"{e.usage.hits:>5}  {used}")


def panel_status_html(entries: list[Entry], s: Stats, where: str, total: int = 0,
                      device: str = "this device") -> str:
    """The panel's status, each figure with its scope: the shown ``device``'s entries and the
    bytes they take, this session's hit rate and time saved *on that device* (``s`` holds its
    trips), where the store is; then, where the store keeps lifetime figures, the whole store
    (``total`` bytes, all devices) against its limit (``s.max_size``), and the device's
    lifetime figures (``s.lifetime``)."""
    size = sum(e.usage.stored_bytes for e in entries)
    n = count_of(len(entries), "entry").split(" ", 1)
    text = (f"{html.escape(device)}: <b>{n[0]}</b> {n[1]} · <b>{fmt_bytes(size)}</b> · this "
            f"session on it: hit rate <b>{_rate(s.hit_rate)}</b>, "
            f"<b>{fmt_duration(s.saved_ms)}</b> saved · <code>{html.escape(where)}</code>")
    life = s.lifetime
    if life is not None:
        evicted = count_of(life.evictions, "eviction").split(" ", 1)
        text += (f"<br>store (all devices): <b>{fmt_bytes(total)}</b>, "
                 f"{html.escape(_limit(s, total))} · lifetime on {html.escape(device)}: hit "
                 f"rate <b>{_rate(life.hit_rate)}</b>, <b>{fmt_duration(life.saved_ms)}</b> "
                 f"saved, <b>{evicted[0]}</b> {evicted[1]}")
    return text


# -- bundles ---------------------------------------------------------------------------------

def _bundle_device(d: dict[str, Any]) -> str:
    """A device of a bundle's manifest by its one short name (:func:`device_label`)."""
    return device_label(str(d.get("platform", "")), str(d.get("device", "")),
                        str(d.get("driver", "")))


def export_text(r: BundleReport) -> str:
    devs = ", ".join(f"{_bundle_device(d)} ({d['entries']})" for d in r.devices) or "no devices"
    bad = f", {count_of(r.failed, 'damaged entry')} left out" if r.failed else ""
    return (f"exported {count_of(r.entries, 'entry')} ({fmt_bytes(r.bytes)}) to {r.path}: "
            f"{devs}{bad}")


def export_html(r: BundleReport) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(_bundle_device(d))}</td><td><code>{d['fingerprint']}</code>"
        f"</td><td>{d['entries']}</td></tr>" for d in r.devices)
    return (f"<div class='clmagic-bundle'><b>exported {count_of(r.entries, 'entry')}</b> "
            f"({fmt_bytes(r.bytes)}) to <code>{html.escape(r.path)}</code>"
            f"<table><tr><th>device</th><th>fingerprint</th><th>entries</th></tr>{rows}"
            "</table></div>")


#: failures an import report lists one line each (the report's ``reasons`` has them all)
_REASONS_SHOWN = 50


def _proven(r: ImportReport) -> str:
    return f" ({r.proven} proven loadable here)" if r.proven else ""


def _failures(r: ImportReport) -> list[str]:
    """One line per entry that was not imported, and how many more the report holds."""
    more = len(r.reasons) - _REASONS_SHOWN
    return [f"failed: {why}" for why in r.reasons[:_REASONS_SHOWN]] + (
        [f"… and {more} more (the report's reasons list them all)"] if more > 0 else [])


def import_text(r: ImportReport) -> str:
    """The counts, then one line per device this machine lacks and per entry not imported."""
    text = (f"imported {r.imported}{_proven(r)}, skipped {r.skipped} (already cached), "
            f"failed {r.failed} from {r.path}")
    for fp, d in r.missing_devices.items():
        text += (f"\n  {count_of(d['entries'], 'entry')} for {d['device']} ({fp}): "
                 "not on this machine")
    return "\n  ".join([text, *_failures(r)])


def import_html(r: ImportReport) -> str:
    extra = "".join(
        f"<li>{count_of(d['entries'], 'entry')} for {html.escape(d['device'])} "
        f"(<code>{fp}</code>): not on this machine</li>"
        for fp, d in r.missing_devices.items())
    extra += "".join(f"<li>{html.escape(line)}</li>" for line in _failures(r))
    return (f"<div class='clmagic-bundle'><b>imported {r.imported}</b>{_proven(r)}, skipped "
            f"{r.skipped} (already cached), failed {r.failed} from "
            f"<code>{html.escape(r.path)}</code><ul>{extra}</ul></div>")


# -- warming ---------------------------------------------------------------------------------

def warm_text(r: WarmReport) -> str:
    """``built 3 · already cached 1 · failed 1 (/path)``, then one line per failure."""
    text = f"built {len(r.built)} · already cached {len(r.cached)} · failed {len(r.failed)}"
    if r.interrupted:
        text += f" · interrupted, {r.skipped} not tried"
    if r.location:
        text += f" ({r.location})"
    for path, why in r.failed:
        text += f"\n  failed: {path}: {why}"
    return text


def warm_html(r: WarmReport) -> str:
    return f"<pre class='clmagic-warm'>{html.escape(warm_text(r))}</pre>"
