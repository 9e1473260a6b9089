"""Every rendering clmagic shows, as text and as HTML: the line under a cell, the statistics,
what a clear removed, where the cache is, entry rows of the cache panel, bundle reports.

It imports nothing of clmagic at run time (the types below are for the checker only), so every
layer may use it (errors.py too, for a failed build's log) and it depends on none.
"""

from __future__ import annotations

import html
import re
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .bundle import BundleReport, ImportReport
    from .compiler import BuildResult
    from .devices import DeviceInfo
    from .entry import Entry
    from .manage import CacheInfo, Removed
    from .records import Stats

__all__ = ["result_text", "result_html", "stats_text", "stats_html", "fmt_bytes", "fmt_duration",
           "COLOURS", "removed_text", "removed_html", "info_text", "info_html", "ENTRY_HEAD",
           "entry_line", "panel_status_html", "device_option", "export_text", "export_html",
           "import_text", "import_html", "stats_rows", "map_log_lines", "shown_log",
           "device_label", "count_of", "table_html", "short_key", "fmt_ms", "fmt_time"]

COLOURS = {
    "MISS": "#c0392b",
    "HIT": "#1e8449",
    "MEMORY": "#2471a3",
    "REKEYED": "#148f77",
    "CORRUPT": "#b9770e",
    "BYPASS": "#7f8c8d",
    "FAILED": "#6c3483",
}
_WORD = {"BYPASS": "BUILD"}
#: a device's first use (its context made) is said on the line from this many ms
_SETUP_SHOWN_MS = 5.0
_WARNING = re.compile(r"\bwarning:", re.IGNORECASE)


def _ms(ms: float) -> str:
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms"


#: every duration in a table or a line: ``0.05 ms``, ``5.72 ms``, ``512.3 ms`` (one style)
fmt_ms = _ms


def fmt_time(t: float) -> str:
    """A moment to the second, in UTC: ``2026-12-01 16:02:11 UTC``."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def short_key(key: str) -> str:
    """The first 12 hex digits of a key, enough to tell entries apart and to clear one."""
    return key[:12] + "…" if len(key) > 12 else key


def count_of(n: int, word: str) -> str:
    """``1 entry``, ``2 entries``, ``0 warnings``."""
    if n == 1:
        return f"1 {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"


def device_label(platform_name: str, device_name: str) -> str:
    """A device's one short name everywhere: ``POCL pthread-AMD EPYC``, ``Oclgrind Simulator``,
    ``NVIDIA H200`` (the platform only where the device name does not already say it)."""
    plat = "POCL" if "portable computing language" in platform_name.lower() else platform_name
    return device_name if plat.lower() in device_name.lower() else f"{plat} {device_name}"


def table_html(head: list[str], rows: list[list[str]], note: str = "",
               numeric: frozenset[str] = frozenset()) -> str:
    """A table a person can read: no wrapping inside a value, scrolls sideways when wide,
    ``numeric`` columns right-aligned, and a note under it."""
    cell = "padding:2px 8px;white-space:nowrap;border-bottom:1px solid #ddd;"
    heads = "".join(f'<th style="{cell}text-align:{"right" if h in numeric else "left"}">'
                    f"{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f'<td style="{cell}text-align:{"right" if h in numeric else "left"}">'
                         f"{html.escape(v)}</td>" for h, v in zip(head, row)) + "</tr>"
        for row in rows)
    foot = f'<div style="font-size:85%;color:#666">{html.escape(note)}</div>' if note else ""
    return (f'<div class="clmagic-frame" style="overflow-x:auto">'
            f'<table style="border-collapse:collapse;font-size:90%">'
            f"<thead><tr>{heads}</tr></thead><tbody>{body}</tbody></table>{foot}</div>")


def _parts(r: BuildResult) -> list[str]:
    names = ", ".join(r.kernels) or "(no kernels)"
    if r.outcome == "HIT":
        timing = f"loaded in {_ms(r.ms)} (build was {_ms(r.build_ms)})"
    elif r.outcome == "MEMORY":
        timing = f"{_ms(r.ms)} from memory (build was {_ms(r.build_ms)})"
    elif r.outcome == "REKEYED":
        timing = f"loaded in {_ms(r.ms)} (build was {_ms(r.build_ms)})"
    elif r.outcome == "CORRUPT":
        timing = f"rebuilt in {_ms(r.build_ms)} (stored entry was damaged)"
    else:
        timing = f"built in {_ms(r.build_ms)}"
    if r.outcome != "HIT" and r.ms - r.build_ms > max(1.0, 0.05 * r.ms):
        timing += f", {_ms(r.ms)} in all"  # the key, the store, the save: r.ms is the trip
    setup = r.record.setup_ms
    if setup >= _SETUP_SHOWN_MS:  # where a fresh kernel's first cell spends its time
        timing += f" + {_ms(setup)} to set up the device (first use)"
    parts = [names, timing, r.device.label]
    if r.outcome == "REKEYED":  # "same code as 3f5a…: only comments or spacing changed" first
        parts = [names, r.note, timing, r.device.label]
    opts = r.options.effective
    if r.options.written.strip() and r.options.written.strip() != opts:
        parts.append(f"options {r.options.written.strip()} → {opts or '(driver default)'}")
    elif opts:
        parts.append(f"options {opts}")
    now = r.latest  # "saving" while a MISS's save runs: the user does not wait for it
    if r.outcome not in ("MEMORY", "REKEYED"):
        parts.append(now.note)
    elif r.outcome == "REKEYED" and now.saved_to_store:
        parts.append("saved")
    parts.append(_log_summary(r))
    return [p for p in parts if p]


def _log_title(r: BuildResult) -> str:
    """``build log``, or, for a log that came with a rekeyed binary, whose it is: its line
    numbers are those of the source first built, not of this one."""
    origin = r.record.rekeyed_from
    if not origin:
        return "build log"
    return f"build log of {origin[:4]}… (the first build of this code: its line numbers)"


_LOC = re.compile(
    r"(?:^|(?<=\s))(?P<file>[^\s:]+):(?P<line>\d+):(?:(?P<col>\d+):)?", re.MULTILINE
)


def _is_main_source(name: str) -> bool:
    """The driver's name for the program source: a temp ``*.cl`` file, ``input.cl``,
    ``<kernel>``/``<source>`` (NVIDIA), as opposed to an included header."""
    return name.endswith(".cl") or (name.startswith("<") and name.endswith(">"))


def map_log_lines(log: str, line_offset: int = 0) -> str:
    """Rewrite locations of the program source in a driver build log (``/tmp/x.cl:3:12:``,
    ``<kernel>:3:12:``) to ``line N:12:``, shifted by ``line_offset`` so they match the notebook
    cell's own numbering. Locations in included headers keep their file name."""

    def repl(m: re.Match[str]) -> str:
        if not _is_main_source(m["file"]):
            return m[0]
        col = f":{m['col']}" if m["col"] else ""
        return f"line {int(m['line']) + line_offset}{col}:"

    return _LOC.sub(repl, log)


def shown_log(r: BuildResult) -> str:
    """The build log as shown: the source's locations as the cell's line numbers, no temp file
    paths (``/…/pocl/…/tempfile_x.cl:4:11:`` → ``line 5:11:`` under a ``%%clkernel`` line)."""
    return map_log_lines(r.build_log.strip(), r.record.line_offset)


def _log_summary(r: BuildResult) -> str:
    """``1 warning``, ``2 warnings``, else ``build log: N lines`` (empty for no log); a rekeyed
    binary's log says whose it is."""
    log = r.build_log.strip()
    if not log:
        return ""
    warnings = len(_WARNING.findall(log))
    if warnings:
        said = count_of(warnings, "warning")
        return said if not r.record.rekeyed_from else f"{said} ({_log_title(r)})"
    return f"{_log_title(r)}: {count_of(len(log.splitlines()), 'line')}"


def result_text(r: BuildResult) -> str:
    """``MISS   saxpy, scale · built in 512.3 ms · POCL pthread-… · saved``."""
    word = _WORD.get(r.outcome, r.outcome)
    return f"{word:<6} " + " · ".join(_parts(r))


def result_html(r: BuildResult) -> str:
    """The same line with a coloured outcome badge; the full key is in the tooltip."""
    word = _WORD.get(r.outcome, r.outcome)
    colour = COLOURS.get(r.outcome, "#555")
    badge = (
        f'<span style="background:{colour};color:#fff;padding:1px 6px;border-radius:3px;'
        f'font-weight:bold">{word}</span>'
    )
    body = " · ".join(html.escape(p) for p in _parts(r))
    log = ""
    if r.build_log.strip():
        summary = html.escape(_log_summary(r))
        log = (f'<details class="clmagic-log"><summary>{summary}</summary>'
               f"<pre>{html.escape(shown_log(r))}</pre></details>")
    return (
        f'<div class="clmagic-result" data-outcome="{word}" title="key {r.key}" '
        f'style="font-family:monospace;font-size:90%">{badge} {body}{log}</div>'
    )


def fmt_bytes(n: int) -> str:
    """``512 B``, ``12.3 KB``, ``4.56 MB`` (powers of 1000)."""
    if n < 1000:
        return f"{n} B"
    if n < 1_000_000:
        return f"{n / 1000:.1f} KB"
    if n < 1_000_000_000:
        return f"{n / 1_000_000:.2f} MB"
    return f"{n / 1_000_000_000:.2f} GB"


def fmt_duration(ms: float) -> str:
    """``850 ms``, ``12.4 s``, ``3.2 min``."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.1f} min"


#: how each counter is named in statistics (one not listed shows as its name, lower case)
LABELS = {"HIT": "hits", "MEMORY": "memory hits", "REKEYED": "rekeyed", "MISS": "misses",
          "CORRUPT": "corrupt", "BYPASS": "bypassed", "FAILED": "failed", "EVICT": "evictions"}


def _rate(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate:.0%}"


def stats_rows(s: Stats) -> list[tuple[str, str, str]]:
    """(figure, this session, lifetime) for every outcome counted, evictions, hit rate and time
    saved; the lifetime column is ``-`` where the store keeps none."""
    life = s.lifetime
    rows = [(LABELS.get(o, o.lower()), str(s.session[o]), "-" if life is None else str(life[o]))
            for o in s.outcomes()]
    rows.append(("evictions", str(s.session.evictions),
                 "-" if life is None else str(life.evictions)))
    rows.append(("hit rate", _rate(s.session.hit_rate),
                 "-" if life is None else _rate(life.hit_rate)))
    rows.append(("time saved", fmt_duration(s.session.saved_ms),
                 "-" if life is None else fmt_duration(life.saved_ms)))
    return rows


def _limit(s: Stats, total: int | None = None) -> str:
    used = s.bytes if total is None else total
    if not s.max_size:
        return "no size limit"
    return f"limit {fmt_bytes(s.max_size)} ({used / s.max_size:.0%} used)"


def stats_text(s: Stats) -> str:
    """This session and the lifetime side by side, then the store and one line per device."""
    rows = [("", "session", "lifetime"), *stats_rows(s)]
    width = max(len(r[0]) for r in rows)
    lines = [f"{a:<{width}}  {b:>10}  {c:>10}" for a, b, c in rows]
    lines.append(f"store: {s.location} · {count_of(s.entries, 'entry')} · "
                 f"{fmt_bytes(s.bytes)} · {_limit(s)}")
    for d in s.devices:
        line = (f"  {d.label} ({d.fingerprint}): {count_of(d.entries, 'entry')}, "
                f"{fmt_bytes(d.bytes)}, "
                f"{d.hits} hits")
        if d.lifetime is not None:
            t = d.lifetime
            line += (f" · lifetime {t['HIT']} hits, {t['MISS']} misses, "
                     f"{t.evictions} evictions")
        lines.append(line)
    return "\n".join(lines)


def stats_html(s: Stats) -> str:
    """The statistics as two small tables: session and lifetime side by side, then devices."""
    body = "".join(f"<tr><th>{html.escape(a)}</th><td>{html.escape(b)}</td>"
                   f"<td>{html.escape(c)}</td></tr>" for a, b, c in stats_rows(s))
    devs = "".join(
        f"<tr><td>{html.escape(d.label)}</td><td><code>{d.fingerprint}</code></td>"
        f"<td>{d.entries}</td><td>{fmt_bytes(d.bytes)}</td><td>{d.hits}</td>"
        f"<td>{d.lifetime.evictions if d.lifetime is not None else '-'}</td></tr>"
        for d in s.devices
    ) or '<tr><td colspan="6">no entries</td></tr>'
    return (
        '<div class="clmagic-stats">'
        f"<table><tr><th></th><th>session</th><th>lifetime</th></tr>{body}</table>"
        f"<p>store: <code>{html.escape(s.location)}</code> · {count_of(s.entries, 'entry')} · "
        f"{fmt_bytes(s.bytes)} · {html.escape(_limit(s))}</p>"
        "<table><tr><th>device</th><th>fingerprint</th><th>entries</th><th>size</th>"
        f"<th>hits</th><th>evictions</th></tr>{devs}</table></div>"
    )


# -- cache management: what a clear removed, where the cache is -----------------------------

def removed_text(r: Removed) -> str:
    """``removed 3 entries (12.3 KB) from directory cache /path``."""
    where = f" from {r.location}" if r.location else ""
    return f"removed {count_of(r.entries, 'entry')} ({fmt_bytes(r.bytes)}){where}"


def removed_html(r: Removed) -> str:
    return f'<div class="clmagic-removed">{html.escape(removed_text(r))}</div>'


def info_text(i: CacheInfo) -> str:
    """Where the cache is, the record level, the variables in effect, one line per device
    (``*`` marks the active one) with what the store holds for it."""
    state = "" if i.writable or i.kind == "none" else f" (read-only: {i.reason})"
    lines = [f"cache:   {i.location} ({i.kind}){state}", f"record:  {i.record}"]
    lines += [f"env:     {k}={v}" for k, v in sorted(i.env.items())] or ["env:     (none)"]
    for info, use in i.devices:
        mark = "*" if info.fingerprint == i.active else " "
        held = (f"{count_of(use.entries, 'entry')}, {fmt_bytes(use.bytes)}" if use
                else "no entries")
        if not info.usable:
            held += f" · cannot build here: {info.problem}"
        lines.append(f"{mark} {info.spec:<5} {info.type:<5} {info.platform_name} · "
                     f"{info.device_name} · driver {info.driver_version} · "
                     f"{info.fingerprint} · {held}")
    return "\n".join(lines)


def info_html(i: CacheInfo) -> str:
    return f'<pre class="clmagic-info">{html.escape(info_text(i))}</pre>'


# -- the cache panel: device choices, entry rows, status ------------------------------------

def device_option(info: DeviceInfo) -> str:
    """A device as the panel offers it; one that cannot build here says so, and why."""
    text = f"{info.platform_name} · {info.device_name}"
    return text if info.usable else f"{text} · cannot build here: {info.problem}"


#: the header over :func:`entry_line` rows
ENTRY_HEAD = (f"{'key':<13} {'kernels':<24} {'options':<22} {'binary':>9} {'build':>10} "
              f"{'hits':>5}  last used")


def entry_line(e: Entry) -> str:
    """One entry as a fixed-width row: short key (two builds that differ only in a header's
    contents differ there), kernels, options, binary size, build time, hits, last use (local
    time, to the second)."""
    m = e.meta
    kernels = ", ".join(m.kernels) or "(none)"
    opts = m.options or "-"
    used = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.last_used))
    return (f"{short_key(e.key):<13} {kernels[:24]:<24} {opts[:22]:<22} "
            f"{fmt_bytes(m.binary_bytes):>9} {fmt_ms(m.build_ms):>10} {e.usage.hits:>5}  {used}")


def panel_status_html(entries: list[Entry], s: Stats, where: str, total: int = 0) -> str:
    """The panel's status line: entries and MB of the device, the session's hit rate and time
    saved, and where the store is; then, where the store keeps lifetime figures, its size
    (``total`` bytes) against its limit (``s.max_size``) and the lifetime figures."""
    size = sum(e.usage.stored_bytes for e in entries)
    n = count_of(len(entries), "entry").split(" ", 1)
    text = (f"<b>{n[0]}</b> {n[1]} · <b>{fmt_bytes(size)}</b> · hit rate "
            f"<b>{_rate(s.hit_rate)}</b> · <b>{fmt_duration(s.saved_ms)}</b> saved this "
            f"session · <code>{html.escape(where)}</code>")
    life = s.lifetime
    if life is not None:
        text += (f"<br>store: <b>{fmt_bytes(total)}</b>, {html.escape(_limit(s, total))} · "
                 f"lifetime: hit rate <b>{_rate(life.hit_rate)}</b>, "
                 f"<b>{fmt_duration(life.saved_ms)}</b> saved, <b>{life.evictions}</b> "
                 "evictions")
    return text


# -- bundles ---------------------------------------------------------------------------------

def export_text(r: BundleReport) -> str:
    devs = ", ".join(f"{d['device']} ({d['entries']})" for d in r.devices) or "no devices"
    bad = f", {r.failed} damaged entries left out" if r.failed else ""
    return (f"exported {count_of(r.entries, 'entry')} ({fmt_bytes(r.bytes)}) to {r.path}: "
            f"{devs}{bad}")


def export_html(r: BundleReport) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(d['device'])}</td><td><code>{d['fingerprint']}</code></td>"
        f"<td>{d['entries']}</td></tr>" for d in r.devices)
    return (f"<div class='clmagic-bundle'><b>exported {count_of(r.entries, 'entry')}</b> "
            f"({fmt_bytes(r.bytes)}) to <code>{html.escape(r.path)}</code>"
            f"<table><tr><th>device</th><th>fingerprint</th><th>entries</th></tr>{rows}"
            "</table></div>")


def import_text(r: ImportReport) -> str:
    text = (f"imported {r.imported}, skipped {r.skipped} (already cached), "
            f"failed {r.failed} from {r.path}")
    for fp, d in r.missing_devices.items():
        text += (f"\n  {count_of(d['entries'], 'entry')} for {d['device']} ({fp}): "
                 "not on this machine")
    for reason in r.reasons[:5]:
        text += f"\n  failed: {reason}"
    return text


def import_html(r: ImportReport) -> str:
    extra = "".join(
        f"<li>{count_of(d['entries'], 'entry')} for {html.escape(d['device'])} "
        f"(<code>{fp}</code>): not on this machine</li>"
        for fp, d in r.missing_devices.items())
    extra += "".join(f"<li>failed: {html.escape(reason)}</li>" for reason in r.reasons[:5])
    return (f"<div class='clmagic-bundle'><b>imported {r.imported}</b>, skipped "
            f"{r.skipped} (already cached), failed {r.failed} from "
            f"<code>{html.escape(r.path)}</code><ul>{extra}</ul></div>")
