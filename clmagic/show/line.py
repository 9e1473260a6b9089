"""The line under a cell, as text and as HTML, with its build log (the HTML table every
rendering shares is :mod:`clmagic.show.fit`'s); the renderings of the cache (statistics,
clears, the panel, bundles) are :mod:`clmagic.show.cache`'s, the plain formats (durations,
sizes, keys, device names, a log's locations) :mod:`clmagic._format`'s, on the ground floor,
because layers below need them too.

It imports nothing of clmagic at run time but those formats and :mod:`clmagic.show.facts` (the
types below are for the checker only): a build result gets its line from here through
:mod:`clmagic.show.views`, and the build trip never imports a renderer.
"""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING

from clmagic._format import count_of, fmt_ms, short_paths, tidy_log
from clmagic.show.facts import facts_html

if TYPE_CHECKING:
    from clmagic.trip.results import BuildResult

__all__ = ["result_text", "result_html", "result_bundle", "COLOURS", "shown_log"]

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


def _timing(r: BuildResult) -> str:
    """How long the trip took, in the words of its outcome. A load's time is the load alone:
    a one-time cost inside the trip (``once_ms``) is said apart (:func:`_once`); ``r.ms``, the
    whole trip, is named "in all" wherever it reads as another number than the one said."""
    rec = r.record
    load = r.ms - rec.once_ms
    if r.outcome in ("HIT", "REKEYED"):
        return f"loaded in {fmt_ms(load)} (build was {fmt_ms(r.build_ms)})"
    if r.outcome == "MEMORY":
        return f"{fmt_ms(r.ms)} from memory (build was {fmt_ms(r.build_ms)})"
    if r.outcome == "CORRUPT":
        timing = f"rebuilt in {fmt_ms(r.build_ms)} (stored entry was damaged)"
    else:
        timing = f"built in {fmt_ms(r.build_ms)}"
    if fmt_ms(r.ms) != fmt_ms(r.build_ms):  # the key, the store: r.ms is the whole trip
        timing += f", {fmt_ms(r.ms)} in all"
    return timing


def _once(r: BuildResult) -> str:
    """The trip's one-time costs, each with what it was: the device's first setup (before the
    trip's clock) and a cost inside the trip (a binary from elsewhere checked in a child
    process, a wait for the program's save); nothing under :data:`_SETUP_SHOWN_MS`."""
    rec = r.record
    said = []
    if rec.setup_ms >= _SETUP_SHOWN_MS:  # where a fresh kernel's first cell spends its time
        said.append(f"+ {fmt_ms(rec.setup_ms)} to set up the device (first use)")
    if rec.once_ms >= _SETUP_SHOWN_MS and r.outcome != "MEMORY":
        said.append(f"+ {fmt_ms(rec.once_ms)} once: {rec.once_what}")
    return " · ".join(said)


def _parts(r: BuildResult) -> list[str]:
    names = ", ".join(r.kernels) or "(no kernels)"
    timing = _timing(r)
    parts = [names, timing, _once(r), r.device.label]
    if r.outcome == "REKEYED":  # "same code as 3f5a…: only comments or spacing changed" first
        parts = [names, r.note, timing, _once(r), r.device.label]
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
    return [short_paths(p) if p.startswith("options ") else p for p in parts if p]


def _log_title(r: BuildResult) -> str:
    """``build log``, or, for a log that came with a rekeyed binary, whose it is: its line
    numbers are those of the source first built, not of this one."""
    origin = r.record.rekeyed_from
    if not origin:
        return "build log"
    return f"build log of {origin[:4]}… (the first build of this code: its line numbers)"


def shown_log(r: BuildResult) -> str:
    """The build log as shown: the source's locations as the cell's line numbers, no temp file
    paths (``/…/pocl/…/tempfile_x.cl:4:11:`` → ``line 5:11:`` under a ``%%clkernel`` line),
    each message once, the cell's line under it with a caret (not for a log that came with a
    rekeyed binary: its line numbers are another source's)."""
    rec = r.record
    source = None if rec.rekeyed_from else rec.source
    return tidy_log(r.build_log, rec.line_offset, source)


def _log_summary(r: BuildResult) -> str:
    """``1 warning``, ``2 warnings``, else ``build log: N lines`` (empty for no log); a rekeyed
    binary's log says whose it is."""
    log = tidy_log(r.build_log)  # each message once: POCL says a #warning twice
    if not log:
        return ""
    warnings = len(_WARNING.findall(log))
    if warnings:
        said = count_of(warnings, "warning")
        return said if not r.record.rekeyed_from else f"{said} ({_log_title(r)})"
    return f"{_log_title(r)}: {count_of(len(log.splitlines()), 'line')}"


def result_text(r: BuildResult) -> str:
    """``MISS   saxpy, scale · built in 512.3 ms · POCL pthread-… · saved``."""
    return _text(r, _parts(r))


def result_html(r: BuildResult) -> str:
    """The same line with a coloured outcome badge; the full key is in the tooltip."""
    return _html(r, _parts(r))


def result_bundle(r: BuildResult) -> dict[str, str]:
    """The line as ``display(r)`` shows it (``text/plain`` and ``text/html``), made once."""
    parts = _parts(r)
    return {"text/plain": _text(r, parts), "text/html": _html(r, parts)}


def _text(r: BuildResult, parts: list[str]) -> str:
    word = _WORD.get(r.outcome, r.outcome)
    return f"{word:<6} " + " · ".join(parts)


def _html(r: BuildResult, parts: list[str]) -> str:
    word = _WORD.get(r.outcome, r.outcome)
    colour = COLOURS.get(r.outcome, "#555")
    badge = (
        f'<span style="background:{colour};color:#fff;padding:1px 6px;border-radius:3px;'
        f'font-weight:bold">{word}</span>'
    )
    body = " · ".join(html.escape(p) for p in parts)
    log = ""
    if r.build_log.strip():
        summary = html.escape(_log_summary(r))
        log = (f'<details class="clmagic-log"><summary>{summary}</summary>'
               f"<pre>{html.escape(shown_log(r))}</pre></details>")
    facts = facts_html(r.record.facts or {})  # kept with the trip: no driver query here
    return (
        f'<div class="clmagic-result" data-outcome="{word}" title="key {r.key}" '
        f'style="font-family:monospace;font-size:90%">{badge} {body}{log}{facts}</div>'
    )
