"""How a build result looks under a cell: one line of text, and the same line in HTML."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .compiler import BuildResult
    from .records import Stats

__all__ = ["result_text", "result_html", "stats_text", "stats_html", "fmt_bytes", "fmt_duration",
           "COLOURS"]

COLOURS = {
    "MISS": "#c0392b",
    "HIT": "#1e8449",
    "MEMORY": "#2471a3",
    "CORRUPT": "#b9770e",
    "BYPASS": "#7f8c8d",
}
_WORD = {"BYPASS": "BUILD"}


def _ms(ms: float) -> str:
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms"


def _parts(r: BuildResult) -> list[str]:
    names = ", ".join(r.kernels) or "(no kernels)"
    if r.outcome == "HIT":
        timing = f"loaded in {_ms(r.ms)} (build was {_ms(r.build_ms)})"
    elif r.outcome == "MEMORY":
        timing = f"{_ms(r.ms)} from memory (build was {_ms(r.build_ms)})"
    elif r.outcome == "CORRUPT":
        timing = f"rebuilt in {_ms(r.build_ms)} (stored entry was damaged)"
    else:
        timing = f"built in {_ms(r.build_ms)}"
    parts = [names, timing, r.device.label]
    opts = r.options.effective
    if r.options.written.strip() and r.options.written.strip() != opts:
        parts.append(f"options {r.options.written.strip()} → {opts or '(driver default)'}")
    elif opts:
        parts.append(f"options {opts}")
    if r.outcome != "MEMORY":
        parts.append(r.note)
    if r.build_log:
        n = len(r.build_log.splitlines())
        parts.append(f"build log: {n} line{'s' if n != 1 else ''}")
    return [p for p in parts if p]


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
    if r.build_log:
        log = (f"<details><summary>build log</summary><pre>{html.escape(r.build_log)}</pre>"
               "</details>")
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
    return f"{n / 1_000_000:.2f} MB"


def fmt_duration(ms: float) -> str:
    """``850 ms``, ``12.4 s``, ``3.2 min``."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.1f} min"


def _rate(s: Stats) -> str:
    return "n/a" if s.hit_rate is None else f"{s.hit_rate:.0%}"


def stats_text(s: Stats) -> str:
    """Counts of this session, then one line per device in the store."""
    lines = [
        f"session: {s.hits} hits, {s.memory} memory hits, {s.misses} misses, "
        f"{s.corrupt} corrupt, {s.bypass} bypassed · hit rate {_rate(s)} · "
        f"{fmt_duration(s.saved_ms)} saved",
        f"store:   {s.location} · {s.entries} entries · {fmt_bytes(s.bytes)}",
    ]
    for d in s.devices:
        lines.append(f"  {d.label} ({d.fingerprint}): {d.entries} entries, "
                     f"{fmt_bytes(d.bytes)}, {d.hits} hits")
    return "\n".join(lines)


def stats_html(s: Stats) -> str:
    """The statistics as two small tables."""
    cells = [("hits", s.hits), ("memory hits", s.memory), ("misses", s.misses),
             ("corrupt", s.corrupt), ("bypassed", s.bypass), ("hit rate", _rate(s)),
             ("time saved", fmt_duration(s.saved_ms))]
    head = "".join(f"<th>{html.escape(k)}</th>" for k, _ in cells)
    row = "".join(f"<td>{html.escape(str(v))}</td>" for _, v in cells)
    devs = "".join(
        f"<tr><td>{html.escape(d.label)}</td><td><code>{d.fingerprint}</code></td>"
        f"<td>{d.entries}</td><td>{fmt_bytes(d.bytes)}</td><td>{d.hits}</td></tr>"
        for d in s.devices
    ) or '<tr><td colspan="5">no entries</td></tr>'
    return (
        '<div class="clmagic-stats">'
        f"<table><tr>{head}</tr><tr>{row}</tr></table>"
        f"<p>store: <code>{html.escape(s.location)}</code> · {s.entries} entries · "
        f"{fmt_bytes(s.bytes)}</p>"
        "<table><tr><th>device</th><th>fingerprint</th><th>entries</th><th>size</th>"
        f"<th>hits</th></tr>{devs}</table></div>"
    )
