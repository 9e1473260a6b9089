"""Tables for a terminal, as ``git`` and ``ccache`` print them: every row on one line, never
wrapped. When the columns do not fit the terminal's width, the text columns that may be cut are
cut first (to their least width, with ``…``), then whole columns are dropped, least important
first, and the caller is told which went (so it can say so and point to ``--csv``/``--json``).

The width is the terminal's (``COLUMNS`` first, as :func:`shutil.get_terminal_size` reads it);
output that goes to a pipe or a file without ``COLUMNS`` has no width limit, so ``clmagic ls |
grep k1`` finds what a wide terminal would show.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from clmagic._format import middle_cut

__all__ = ["Column", "fit", "terminal_width", "cut"]

_GAP = 2  # spaces between columns


@dataclass(frozen=True)
class Column:
    """One column: its heading, alignment, importance and how far it may be cut.

    ``rank``: columns of higher rank are dropped first when even cut columns do not fit.
    ``least``: the narrowest a text column may be cut to (``0``: never cut, e.g. a number or a
    short key). ``middle``: cut in the middle (paths and options keep both ends), else at the
    end (a list of kernel names keeps its first names).
    """

    head: str
    rank: int
    right: bool = False
    least: int = 0
    middle: bool = False


def terminal_width() -> int | None:
    """The width to fit: ``COLUMNS`` when set, else the terminal's when stdout is one, else
    ``None`` (a pipe or a file: no limit)."""
    if os.environ.get("COLUMNS", "").strip().isdigit() or sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def cut(text: str, width: int, middle: bool = False) -> str:
    """``text`` in at most ``width`` characters, ``…`` marking what was left out."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    return middle_cut(text, width) if middle else text[: width - 1] + "…"


def _natural(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> list[int]:
    return [max([len(c.head), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]


def _kept(columns: Sequence[Column], natural: list[int], width: int) -> list[int]:
    """Indices of the columns that fit in ``width`` at their least widths (dropping the
    highest rank first; the first-ranked column always stays)."""
    kept = list(range(len(columns)))

    def least(i: int) -> int:
        c = columns[i]
        return min(natural[i], max(c.least, len(c.head))) if c.least else natural[i]

    while len(kept) > 1 and sum(least(i) for i in kept) + _GAP * (len(kept) - 1) > width:
        kept.remove(max(kept, key=lambda i: (columns[i].rank, i)))
    return kept


def _widths(columns: Sequence[Column], natural: list[int], kept: list[int],
            width: int | None) -> dict[int, int]:
    """Each kept column's width: its natural width when all fit, else the cut columns share
    what is left, the most important first."""
    widths = {i: natural[i] for i in kept}
    if width is None:
        return widths
    over = sum(widths.values()) + _GAP * (len(kept) - 1) - width
    for i in sorted(kept, key=lambda i: -columns[i].rank):  # least important cut first
        c = columns[i]
        if over <= 0 or not c.least:
            continue
        floor = max(c.least, len(c.head))
        take = min(over, widths[i] - floor) if widths[i] > floor else 0
        widths[i] -= take
        over -= take
    return widths


def fit(columns: Sequence[Column], rows: Sequence[Sequence[str]],
        width: int | None) -> tuple[list[str], list[str]]:
    """The table's lines (heading first) in at most ``width`` characters each (``None``: no
    limit), and the headings of the columns dropped to fit."""
    natural = _natural(columns, rows)
    kept = _kept(columns, natural, width) if width is not None else list(range(len(columns)))
    widths = _widths(columns, natural, kept, width)

    def line(cells: Sequence[str]) -> str:
        parts = []
        for i in kept:
            c, w = columns[i], widths[i]
            text = cut(cells[i], w, c.middle)
            parts.append(text.rjust(w) if c.right else text.ljust(w))
        return (" " * _GAP).join(parts).rstrip()

    lines = [line([c.head for c in columns]), *(line(r) for r in rows)]
    dropped = [c.head for i, c in enumerate(columns) if i not in kept]
    return lines, dropped
