"""Tables for a terminal, as ``git`` and ``ccache`` print them: every row on one line, never
wrapped. When the columns do not fit the terminal's width, the text columns that may be cut are
cut first (to their least width, with ``…``), then whole columns are dropped, least important
first, and the caller is told which went (so it can say so and point to ``--csv``/``--json``):
the rule of :mod:`clmagic.show.fit`, which the notebook's tables follow too.

The width is the terminal's (``COLUMNS`` first, as :func:`shutil.get_terminal_size` reads it);
output that goes to a pipe or a file without ``COLUMNS`` has no width limit, so ``clmagic ls |
grep k1`` finds what a wide terminal would show.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence

from clmagic.show.fit import Column, cut, fit_columns, text_width

__all__ = ["Column", "fit", "terminal_width", "cut"]

_GAP = 2  # spaces between columns


def terminal_width() -> int | None:
    """The width to fit: ``COLUMNS`` when set, else the terminal's when stdout is one, else
    ``None`` (a pipe or a file: no limit)."""
    if os.environ.get("COLUMNS", "").strip().isdigit() or sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def fit(columns: Sequence[Column], rows: Sequence[Sequence[str]],
        width: int | None) -> tuple[list[str], list[str]]:
    """The table's lines (heading first) in at most ``width`` characters each (``None``: no
    limit), and the headings of the columns dropped to fit (the rule is
    :func:`clmagic.show.fit.fit_columns`, the notebook's tables' too)."""
    widths = fit_columns(columns, rows, width, _GAP)

    def line(cells: Sequence[str]) -> str:
        parts = []
        for i, w in widths.items():
            c = columns[i]
            text = cut(cells[i], w, c.middle)
            pad = " " * (w - text_width(text))
            parts.append(pad + text if c.right else text + pad)
        return (" " * _GAP).join(parts).rstrip()

    lines = [line([c.head for c in columns]), *(line(r) for r in rows)]
    dropped = [c.head for i, c in enumerate(columns) if i not in widths]
    return lines, dropped
