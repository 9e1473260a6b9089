"""How a build result looks under a cell: one line of text, and the same line in HTML."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .compiler import BuildResult

__all__ = ["result_text", "result_html", "COLOURS"]

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
