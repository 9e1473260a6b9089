"""Tables that fit their place: a terminal's columns or a notebook's output area. One rule for
both (:func:`fit_columns`): every row on one line; when the columns do not fit the width, the
text columns that may be cut are cut first (to their least width, with ``…``), then whole
columns are dropped, least important first, and the caller is told which went.

:func:`table_html` is that rule for a notebook: the widths are counted in ``ch`` of the code
font (every figure, key and option the same width, so a count of characters is a width on the
page), within :data:`BUDGET_CH`, which fits JupyterLab's output area at 1280×800 with the file
browser open (about 828 px: ``tests/test_browser_tables.py`` measures it, in the light and the
dark theme). A cut or dropped value is not lost: a cut cell has it in full in its tooltip, a
row's tooltip names the values of the dropped columns, and the note under the table says which
columns are not shown and that the data has them.
"""

from __future__ import annotations

import html
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from clmagic._format import middle_cut

__all__ = ["Column", "Cell", "cut", "text_width", "fit_columns", "table_html", "BUDGET_CH"]

#: a table cell: its text, or (text shown, full value for its tooltip)
Cell = str | tuple[str, str]

#: the widest a notebook table is, in ``ch`` of its 12 px code font (7.2 px a ch in DejaVu Sans
#: Mono and Menlo), counting 2 ch between columns for the cells' 12 px of padding: 110 ch make
#: at most about 810 px, inside the 828 px output area of JupyterLab at 1280×800 with the file
#: browser open
BUDGET_CH = 110
#: the padding around a notebook cell's text, in ``ch`` (6 px each side)
_CELL_PAD_CH = 2


@dataclass(frozen=True)
class Column:
    """One column: its heading, alignment, importance and how far it may be cut.

    ``rank``: columns of higher rank are dropped first when even cut columns do not fit.
    ``least``: the narrowest a text column may be cut to (``0``: never cut, e.g. a number or a
    short key). ``middle``: cut in the middle (paths and options keep both ends), else at the
    end (a list of kernel names keeps its first names, an error its start).
    """

    head: str
    rank: int
    right: bool = False
    least: int = 0
    middle: bool = False


def text_width(text: str) -> int:
    """Columns ``text`` takes in a monospace font: two for a wide East Asian character."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def cut(text: str, width: int, middle: bool = False) -> str:
    """``text`` in at most ``width`` columns, ``…`` marking what was left out."""
    if text_width(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    n = width
    while n > 1:
        shown = middle_cut(text, n) if middle else text[: n - 1] + "…"
        if text_width(shown) <= width:
            return shown
        n -= 1
    return "…"


def _natural(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> list[int]:
    return [max([text_width(c.head), *(text_width(r[i]) for r in rows)])
            for i, c in enumerate(columns)]


def _least(c: Column, natural: int) -> int:
    return min(natural, max(c.least, text_width(c.head))) if c.least else natural


def fit_columns(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None,
                gap: int) -> dict[int, int]:
    """Each kept column's index → its width, all of them with ``gap`` between (or around) each
    in at most ``width`` (``None``: no limit, every column at its natural width). Columns of
    the highest rank are dropped until the rest fit at their least widths (the first-ranked
    column always stays); then the cut columns share what is left, the least important cut
    first."""
    natural = _natural(columns, rows)
    kept = list(range(len(columns)))
    if width is None:
        return {i: natural[i] for i in kept}
    while len(kept) > 1 and sum(_least(columns[i], natural[i]) for i in kept) \
            + gap * (len(kept) - 1) > width:
        kept.remove(max(kept, key=lambda i: (columns[i].rank, i)))
    widths = {i: natural[i] for i in kept}
    over = sum(widths.values()) + gap * (len(kept) - 1) - width
    for i in sorted(kept, key=lambda i: -columns[i].rank):  # least important cut first
        c = columns[i]
        if over <= 0 or not c.least:
            continue
        take = max(min(over, widths[i] - _least(c, natural[i])), 0)
        widths[i] -= take
        over -= take
    return widths


# -- the notebook's table ----------------------------------------------------------------------

def _split(value: Cell) -> tuple[str, str]:
    return (value, value) if isinstance(value, str) else value


def _cell(tag: str, text: str, full: str, column: Column, extra: str = "") -> str:
    title = f' title="{html.escape(full)}"' if full and full != text else ""
    align = "right" if column.right else "left"
    return (f'<{tag} style="padding:1px 6px;white-space:nowrap;text-align:{align};'
            f'border-bottom:1px solid var(--jp-border-color2,#ddd){extra}"{title}>'
            f"{html.escape(text)}</{tag}>")


def table_html(head: Sequence[str | Column], rows: Sequence[Sequence[Cell]], note: str = "",
               numeric: frozenset[str] = frozenset(), budget: int = BUDGET_CH) -> str:
    """A table a person can read, in ``budget`` ch: one line per row (nothing wraps inside a
    value), numbers right-aligned, cut and dropped as :func:`fit_columns` says, each value cut
    in full in its cell's tooltip, the dropped columns' values in the row's tooltip and named
    in the note under it. A heading given as a plain string is a column that is never cut,
    dropped right to left (right-aligned when in ``numeric``); a cell given as (shown, full)
    shows the first and has the full value in its tooltip (a path shortened, a key)."""
    columns = [h if isinstance(h, Column) else Column(h, rank=i, right=h in numeric)
               for i, h in enumerate(head)]
    cells = [[_split(v) for v in row] for row in rows]
    widths = fit_columns(columns, [[s for s, _ in row] for row in cells], budget, _CELL_PAD_CH)
    dropped = [i for i in range(len(columns)) if i not in widths]
    heads = "".join(_cell("th", cut(columns[i].head, w), columns[i].head, columns[i])
                    for i, w in widths.items())
    body = []
    for row in cells:
        hidden = " · ".join(f"{columns[i].head}: {row[i][1]}" for i in dropped if row[i][1])
        tds = "".join(_cell("td", cut(row[i][0], w, columns[i].middle), row[i][1], columns[i])
                      for i, w in widths.items())
        title = f' title="{html.escape(hidden)}"' if hidden else ""
        body.append(f"<tr{title}>{tds}</tr>")
    if dropped:
        names = ", ".join(columns[i].head or "mark" for i in dropped)
        note = (f"{note} · " if note else "") + (
            f"not shown in this width: {names} (a row's tooltip has them)")
    foot = (f'<div style="font-size:85%;color:var(--jp-ui-font-color2,#666);'
            f'overflow-wrap:anywhere">{html.escape(note)}</div>' if note else "")
    return ('<div class="clmagic-frame" style="overflow-x:auto;max-width:100%">'
            '<table style="border-collapse:collapse;margin:0;table-layout:auto;'
            'font-family:var(--jp-code-font-family,monospace);font-size:12px">'
            f"<thead><tr>{heads}</tr></thead><tbody>{''.join(body)}</tbody></table>{foot}</div>")
