"""Kernel facts and compiled code as a person reads them: one line per kernel
(``saxpy · 32 regs · 0 spills · wg ≤ 1024 ×32 · local 0 B · private 0 B``, only the parts the
driver gave), folded under the result line, and the PTX view (``%%clkernel --show ptx``).

It imports only the plain formats at run time; the types are for the checker."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import TYPE_CHECKING

from clmagic._format import fmt_bytes

if TYPE_CHECKING:
    from clmagic.opencl.code import CodeView
    from clmagic.opencl.facts import KernelFacts
    from clmagic.opencl.timing import Timing

__all__ = ["facts_line", "facts_lines", "facts_html", "FACTS_LEGEND", "code_html", "code_text",
           "timing_text", "timing_html", "timing_note"]


def facts_line(f: KernelFacts) -> str:
    """One kernel's figures, those known only."""
    parts = [f.name]
    if f.registers is not None:
        parts.append(f"{f.registers} regs")
    if f.spills is not None:
        parts.append("0 spills" if f.spills == 0 else f"spills {fmt_bytes(f.spill_stores or 0)}"
                     f" stored, {fmt_bytes(f.spill_loads or 0)} loaded")
    if f.shared_mem:
        parts.append(f"smem {fmt_bytes(f.shared_mem)}")
    if f.work_group_size is not None:
        wg = f"wg ≤ {f.work_group_size}"
        if f.preferred_multiple is not None:
            wg += f" ×{f.preferred_multiple}"
        parts.append(wg)
    if f.compile_work_group_size and any(f.compile_work_group_size):
        parts.append("wg = " + "×".join(map(str, f.compile_work_group_size)))
    if f.local_mem is not None:
        parts.append(f"local {fmt_bytes(f.local_mem)}")
    if f.private_mem is not None:
        parts.append(f"private {fmt_bytes(f.private_mem)}")
    return " · ".join(parts)


def facts_lines(facts: Mapping[str, KernelFacts]) -> list[str]:
    return [facts_line(f) for f in facts.values()]


#: what each figure of a facts line means, in the words of a reader who has not read the
#: OpenCL specification (the line under the facts, and its tooltip)
FACTS_LEGEND = {
    "regs": "registers per work-item (NVIDIA)",
    "spills": "registers spilled to memory (NVIDIA)",
    "smem": "shared memory (NVIDIA)",
    "wg ≤": "the most work-items a group may have for this kernel",
    "×N": "the group size the driver prefers a multiple of",
    "wg =": "the group size the kernel requires",
    "local": "local memory the kernel uses (its __local arrays)",
    "private": "private memory per work-item",
}


def _legend(lines: list[str]) -> str:
    """The meaning of each figure the lines use, in one line."""
    text = " ".join(lines)
    used = [(k, v) for k, v in FACTS_LEGEND.items()
            if f" {k} " in text or f"· {k}" in text or (k == "×N" and " ×" in text)]
    return " · ".join(f"{k}: {v}" for k, v in used)


def facts_html(facts: Mapping[str, KernelFacts]) -> str:
    """The lines folded (a ``<details>``), a legend of their figures under them, or nothing
    without facts."""
    if not facts:
        return ""
    n = len(facts)
    lines = facts_lines(facts)
    legend = html.escape(_legend(lines))
    return (f'<details class="clmagic-facts"><summary>kernel facts ({n} '
            f'kernel{"s" if n != 1 else ""})</summary><pre title="{legend}">'
            f"{html.escape(chr(10).join(lines))}</pre>"
            f'<div class="clmagic-legend" style="font-size:85%;color:var(--jp-ui-font-color2,'
            f'#666);font-family:var(--jp-ui-font-family,sans-serif)">{legend}</div></details>')


def code_text(view: CodeView) -> str:
    return view.text if view.text is not None else view.note


def code_html(view: CodeView, title: str = "") -> str:
    """The compiled code folded, highlighted where Pygments knows the language (its ``ptx``
    lexer), else plain; a binary that is not text is said in one line."""
    if view.text is None:
        return f'<div class="clmagic-code">{html.escape(view.note)}</div>'
    body = f"<pre>{html.escape(view.text)}</pre>"
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import get_lexer_by_name

        body = highlight(view.text, get_lexer_by_name("ptx"),
                         HtmlFormatter(noclasses=True, nobackground=True))
    except Exception:  # no Pygments, or none with a PTX lexer: the plain text
        pass
    head = html.escape(title or f"{view.kind} · {view.lines} lines")
    return (f'<details class="clmagic-code" open><summary>{head}</summary>'
            f'<div style="max-height:30em;overflow:auto">{body}</div></details>')


def _us(us: float, unit: str) -> str:
    """A launch time in the unit of the whole line: ``12.3 µs``, ``5.11 ms``."""
    return f"{us / 1000:.2f} ms" if unit == "ms" else f"{us:.1f} µs"


#: a median this many times the fastest launch: the launches did not run alike
NOISY = 2.0


def timing_note(t: Timing) -> str:
    """What to make of launches that did not run alike (a median over :data:`NOISY` × the
    fastest: other work on a CPU device, a clock that had not ramped up), else ""."""
    if t.repeats < 2 or t.min_us <= 0 or t.median_us < NOISY * t.min_us:
        return ""
    return (f"noisy: the median is {t.median_us / t.min_us:.1f}× the fastest launch (other "
            "work on the device? a CPU device shares its cores); time more launches (-r 20) "
            "or compare the min")


def timing_text(t: Timing) -> str:
    """``saxpy · median 12.3 µs · min 11.8 µs · spread 0.4 µs · 20 launches of 1048576
    (groups 256)``; figures of a millisecond or more in ms, and a note when the launches did
    not run alike (:func:`timing_note`)."""
    unit = "ms" if t.min_us >= 1000 else "µs"
    local = "×".join(map(str, t.local_size)) if t.local_size else "driver's choice"
    text = (f"{t.kernel} · median {_us(t.median_us, unit)} · min {_us(t.min_us, unit)} · "
            f"spread {_us(t.spread_us, unit)} · {t.repeats} launches of "
            f"{'×'.join(map(str, t.global_size))} (groups {local})")
    note = timing_note(t)
    return f"{text}\n{note}" if note else text


def timing_html(t: Timing) -> str:
    line, _, note = timing_text(t).partition("\n")
    said = (f'<div style="color:var(--jp-warn-color0,#b9770e)">{html.escape(note)}</div>'
            if note else "")
    return (f'<div class="clmagic-timing" style="font-family:monospace">{html.escape(line)}'
            f"{said}</div>")
