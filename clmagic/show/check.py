"""A checked launch (:class:`~clmagic.cache.checker.findings.CheckReport`) as a person reads
it: one summary line, then each finding once, as a build error is shown (``line 5:14: …``,
the cell's line under it with a caret at the column, who did it); and as a DataFrame.

The caret lines are :func:`clmagic._format.tidy_log`'s, the same that build logs get: a finding
is written as a log message at the cell's line and column, so the two read alike.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from clmagic._format import tidy_log

if TYPE_CHECKING:
    import pandas as pd

    from clmagic.cache.checker.findings import CheckReport, Finding

__all__ = ["check_text", "check_html", "check_frame", "finding_text"]

#: the badge's colour: nothing found, problems found, stopped
_COLOURS = {"CLEAN": "#1e8449", "FOUND": "#c0392b", "STOPPED": "#b9770e"}
#: findings shown in full under the cell (the rest are counted; all are in the frame)
SHOWN = 20


def _word(report: CheckReport) -> str:
    if report.timed_out:
        return "STOPPED"
    return "FOUND" if report.findings else "CLEAN"


def finding_text(f: Finding, report: CheckReport) -> str:
    """One finding: its line and column as a build log says them, the cell's line with a caret
    under it, and who did it (and how often Oclgrind said so)."""
    where = f"line {f.line}:{f.column}: " if f.line is not None and f.column else \
        f"line {f.line}: " if f.line is not None else ""
    details = [f"by {f.who}"] if f.who else []
    if f.other_line is not None:
        details.append(f"the other access at line {f.other_line}")
    if f.times > 1:
        details.append(f"reported {f.times} times by Oclgrind")
    message = where + f.what + ("\n  " + " · ".join(details) if details else "")
    if f.line is None or not report.source:
        return message
    return tidy_log(message, report.line_offset, report.source)


def check_text(report: CheckReport) -> str:
    """``oob: 1 problem: 1 invalid write`` and each finding under it."""
    lines = [f"{_word(report):<7} {report}"]
    for f in report.findings[:SHOWN]:
        lines.append(finding_text(f, report))
    if len(report.findings) > SHOWN:
        lines.append(f"… and {len(report.findings) - SHOWN} more "
                     "(clmagic.check_frame(report) lists them all)")
    return "\n".join(lines)


def check_html(report: CheckReport) -> str:
    """The same with a coloured badge; each finding in a monospaced block."""
    word = _word(report)
    badge = (f'<span style="background:{_COLOURS[word]};color:#fff;padding:1px 6px;'
             f'border-radius:3px;font-weight:bold">{word}</span>')
    body = "".join(f'<pre class="clmagic-finding" data-kind="{html.escape(f.kind)}" '
                   f'style="margin:4px 0 0 0">{html.escape(finding_text(f, report))}</pre>'
                   for f in report.findings[:SHOWN])
    more = (f"<div>… and {len(report.findings) - SHOWN} more (clmagic.check_frame(report) "
            "lists them all)</div>" if len(report.findings) > SHOWN else "")
    return (f'<div class="clmagic-check" data-outcome="{word}" '
            f'style="font-family:monospace;font-size:90%">{badge} '
            f"{html.escape(str(report))}{body}{more}</div>")


def check_frame(report: CheckReport) -> pd.DataFrame:
    """Every finding as a row: kind, what, who, the cell's line and column, the argument, how
    many of Oclgrind's messages it stands for, and the first of them verbatim."""
    import pandas as pd

    columns = ["kind", "what", "who", "line", "column", "argument", "times", "message"]
    rows = [[f.kind, f.what, f.who, f.line, f.column, f.argument, f.times, f.message]
            for f in report.findings]
    frame = pd.DataFrame(rows, columns=columns)
    frame.attrs["summary"] = report.summary
    return frame
