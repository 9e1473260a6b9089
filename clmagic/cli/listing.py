"""What ``clmagic ls``, ``config`` and ``stats`` print on a terminal: one line per row in the
terminal's width (:mod:`clmagic.cli.table`), sizes and times in the formats every other view
uses (:mod:`clmagic._format`), and a last line that says what was left out and where the rest is.

The exact data stays in ``--csv`` and ``--json``; these are for a person reading.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from clmagic._format import count_of, device_label, fmt_bytes, short_key, short_paths
from clmagic.cli.table import Column, fit

if TYPE_CHECKING:
    from clmagic.trip.records import Stats

__all__ = ["ls_lines", "config_lines", "stats_lines", "age"]

#: ``clmagic ls``: (frame column, how it reads); dropped right to left by rank when narrow
LS_TABLE: tuple[tuple[str, Column], ...] = (
    ("key", Column("key", rank=0)),
    ("kernels", Column("kernels", rank=1, least=10)),
    ("stored_bytes", Column("size", rank=2, right=True)),
    ("build_ms", Column("build ms", rank=3, right=True)),
    ("last_used", Column("last used", rank=4, right=True)),
    ("hits", Column("hits", rank=5, right=True)),
    ("device", Column("device", rank=6, least=12)),
    ("options", Column("options", rank=7, least=14, middle=True)),
)


def _blank(v: Any) -> bool:
    """A missing value of the frame (None, NaN, NaT, pandas' NA), told without pandas (the
    drawing libraries stay in show/): each is unequal to itself, and NA's comparison is NA,
    which refuses to be a bool."""
    try:
        return v is None or bool(v != v)
    except TypeError:
        return True


def _text(v: Any) -> str:
    return "" if _blank(v) else str(v)


def _ls_cell(column: str, rec: Any) -> str:
    v = rec[column]
    if column == "key":
        return short_key(str(v))
    if column == "stored_bytes":
        return "" if _blank(v) else fmt_bytes(int(v))
    if column == "build_ms":
        return "" if _blank(v) else f"{float(v):.1f}"
    if column == "last_used":
        return "" if _blank(v) else f"{age(time.time() - v.timestamp())} ago"
    if column == "device":
        return device_label(_text(rec["platform"]), _text(v), _text(rec["driver"]))
    if column == "options":
        return short_paths(_text(v))
    return _text(v)


def age(seconds: float) -> str:
    """How long ago, in the units ``--older-than`` takes (``45s``, ``12m``, ``5h``, ``3d``,
    ``6w``), so a listing says what ``clmagic clear --older-than 3d`` would pick."""
    for unit, size, upto in (("s", 1, 60), ("m", 60, 3600), ("h", 3600, 86400),
                             ("d", 86400, 14 * 86400)):
        if seconds < upto:
            return f"{max(0, int(seconds // size))}{unit}"
    return f"{int(seconds // (7 * 86400))}w"


def ls_lines(df: Any, width: int | None) -> list[str]:
    """The entries of a :func:`~clmagic.show.frames.cache_frame` (a DataFrame: typed loosely,
    as pandas is the show layer's alone), one line each, and a last line: how many, their
    size, and the columns that did not fit."""
    table = [(name, col) for name, col in LS_TABLE if name in df.columns]
    rows = [[_ls_cell(name, rec) for name, _ in table] for _, rec in df.iterrows()]
    lines, dropped = fit([col for _, col in table], rows, width)
    total = int(df["stored_bytes"].sum()) if "stored_bytes" in df.columns else 0
    notes = [f"{count_of(len(df), 'entry')}, {fmt_bytes(total)}"]
    if dropped:
        notes.append(f"not shown in {width} columns: {', '.join(dropped)} (--csv, --json: all)")
    return [*lines, *_joined(notes, width)]


def _joined(notes: list[str], width: int | None) -> list[str]:
    """The notes on one line joined by `` · ``, or one a line where that would not fit."""
    one = " · ".join(notes)
    return [one] if width is None or len(one) <= width else notes


def config_lines(rows: list[tuple[str, str, str, str]], width: int | None) -> list[str]:
    """``clmagic config``: every setting, its variable, value and origin, left-aligned."""
    columns = [Column("setting", rank=0), Column("variable", rank=2),
               Column("value", rank=1, least=16, middle=True),
               Column("origin", rank=3, least=12)]
    lines, dropped = fit(columns, [list(r) for r in rows], width)
    if dropped:
        lines.append(f"not shown in {width} columns: {', '.join(dropped)} (--json: all)")
    return lines


def stats_lines(s: Stats, full_text: str) -> list[str]:
    """``clmagic stats`` in its own process: the store's lifetime figures (this process made no
    trips, so a session column would only ever read 0), then the store and device lines of
    the statistics view ``full_text`` (from its ``store:`` line on)."""
    from clmagic.show.cache import stats_rows

    below = full_text.splitlines()
    start = next((i for i, ln in enumerate(below) if ln.startswith("store:")), len(below))
    if s.lifetime is None:
        head = ["no lifetime statistics: this kind of cache keeps none on this machine"]
    else:
        rows = [(label, life) for label, _session, life in stats_rows(s)]
        wide = max(len(label) for label, _ in rows)
        head = [f"{'':<{wide}}  {'lifetime':>10}",
                *(f"{label:<{wide}}  {life:>10}" for label, life in rows)]
    return [*head, *below[start:]]
