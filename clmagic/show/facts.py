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

__all__ = ["facts_line", "facts_lines", "facts_html", "code_html", "code_text", "timing_text",
           "timing_html"]


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


def facts_html(facts: Mapping[str, KernelFacts]) -> str:
    """The lines folded (a ``<details>``), or nothing without facts."""
    if not facts:
        return ""
    n = len(facts)
    body = html.escape("\n".join(facts_lines(facts)))
    return (f'<details class="clmagic-facts"><summary>kernel facts ({n} '
            f'kernel{"s" if n != 1 else ""})</summary><pre>{body}</pre></details>')


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


def timing_text(t: Timing) -> str:
    """``saxpy · median 12.3 µs · min 11.8 µs · spread 0.4 µs · 20 launches of 1048576 ...``."""
    return str(t)


def timing_html(t: Timing) -> str:
    return f'<div class="clmagic-timing" style="font-family:monospace">{html.escape(str(t))}</div>'
