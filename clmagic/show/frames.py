"""pandas DataFrames of the stored entries and of this session's build trips.

pandas is imported here only, when a frame is asked for. The frames hold the exact data (full
keys, times to the nanosecond, every column); in a notebook they display as a table a person
reads (a short key, one device label, ms rounded, times to the second, no wrapping inside a
value, the other columns named under it). A frame derived from them is a plain DataFrame.
"""

from __future__ import annotations

import dataclasses
import functools
import html
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from clmagic._format import (
    count_of,
    device_label,
    fmt_bytes,
    fmt_ms,
    fmt_time,
    short_key,
    short_paths,
)
from clmagic.cache.manage import device_fingerprints, entry_origin
from clmagic.entry import META_FIELDS, Usage, sane_time
from clmagic.process.session import or_default
from clmagic.show.fit import Cell, Column, table_html
from clmagic.trip.records import from_origin

if TYPE_CHECKING:
    import pandas as pd

    from clmagic.store import Store
    from clmagic.trip.compiler import Compiler

__all__ = ["cache_frame", "history_frame", "readable", "ms_or_blank", "kernels_html",
           "CACHE_COLUMNS", "HISTORY_COLUMNS"]

_DTYPES = {"str": "string", "int": "Int64", "float": "float64", "tuple[str, ...]": "string",
           "float | None": "float64"}
_TIME = "datetime64[ns, UTC]"
#: the columns of :func:`cache_frame`: the entry's fields marked ``shown``, then its usage
_USAGE = frozenset(f.name for f in dataclasses.fields(Usage))
_FIELDS = [f for f in META_FIELDS if f.metadata["shown"]] + list(dataclasses.fields(Usage))

#: column → dtype of :func:`cache_frame`
CACHE_COLUMNS: dict[str, str] = {
    f.name: _TIME if f.metadata.get("time") else _DTYPES[str(f.type)]
    for f in _FIELDS}

#: column → dtype of :func:`history_frame`
HISTORY_COLUMNS: dict[str, str] = {
    "time": "datetime64[ns, UTC]", "outcome": "string", "kernels": "string", "ms": "float64",
    "build_ms": "float64", "saved_ms": "float64", "device": "string", "key": "string",
    "options": "string", "preview": "string", "source": "string", "saved": "bool",
    "note": "string", "origin": "string",
}


def _frame(columns: dict[str, list[Any]], dtypes: dict[str, str]) -> pd.DataFrame:
    import pandas as pd

    data = {}
    for name, dtype in dtypes.items():
        values = columns[name]
        if dtype.startswith("datetime64"):  # out of range (2300, 1e300, NaN): NaT, not a raise
            values = [sane_time(v) for v in values]
            data[name] = pd.Series(pd.to_datetime(pd.Series(values, dtype="float64"), unit="s",
                                                  utc=True), dtype=dtype)
        else:
            data[name] = pd.Series(values, dtype=dtype)
    return pd.DataFrame(data)


#: the rows a readable table shows (the frame has them all)
_MAX_ROWS = 60


def ms_or_blank(v: Any) -> str:
    """A duration in ms as a table shows it; blank where there is none (``None``, NaN)."""
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt_ms(float(v))


def _when(v: Any) -> str:
    return "" if v is None or v != v else fmt_time(v.timestamp())


def _text(v: Any) -> str:
    return "" if v is None or v != v else str(v)


def _key(v: Any) -> Cell:
    """A key's first 12 hex digits (enough to tell entries apart and to clear one), in full
    in the tooltip."""
    return short_key(_text(v)), _text(v)


def _shortened(v: Any) -> Cell:
    """Options or a note with long paths shortened (:func:`clmagic._format.short_paths`),
    in full in the tooltip (the table cuts what is still too long)."""
    return short_paths(_text(v)), _text(v)


def _clock(v: Any) -> str:
    """A moment of one day's history: ``16:02:11`` (the day and UTC are said under it)."""
    return "" if v is None or v != v else fmt_time(v.timestamp())[11:19]


def _minute(v: Any) -> Cell:
    """When an entry was last used, to the minute (``2026-12-05 16:02``), to the second in
    the tooltip."""
    return ("", "") if v is None or v != v else (fmt_time(v.timestamp())[:16], _when(v))


def _size(v: Any) -> str:
    return "" if v is None or v != v else fmt_bytes(int(v))


def _int(v: Any) -> str:
    return "" if v is None or v != v else str(int(v))


#: what each readable frame shows, in this order: column → (how it reads in the table, how a
#: value reads). A lower rank stays longer when the output area is narrow, and is cut last:
#: what tells rows apart (the options of sweep variants, the kernels, the outcome) before the
#: device, which a session mostly has one of; a history's origin (the module that asked for the
#: build under the hook, else ``cell``) after the key, and shown when it is picked
_SHOWN: dict[str, dict[str, tuple[Column, Callable[[Any], Cell]]]] = {
    "cache": {
        "key": (Column("key", 0), _key),
        "kernels": (Column("kernels", 1, least=10), _text),
        "options": (Column("options", 2, least=20, middle=True), _shortened),
        "stored_bytes": (Column("size", 3, right=True), _size),
        "build_ms": (Column("build", 4, right=True), ms_or_blank),
        "hits": (Column("hits", 5, right=True), _text),
        "last_used": (Column("last used", 6), _minute),
        "device": (Column("device", 7, least=20, middle=True), _text)},
    "history": {
        "time": (Column("time", 0), _when),
        "outcome": (Column("outcome", 1), _text),
        "options": (Column("options", 2, least=24, middle=True), _shortened),
        "kernels": (Column("kernels", 3, least=12), _text),
        "ms": (Column("took", 4, right=True), ms_or_blank),
        "build_ms": (Column("build", 5, right=True), ms_or_blank),
        "key": (Column("key", 6), _key),
        "origin": (Column("origin", 7, least=16, middle=True), _text),
        "note": (Column("note", 8, least=16), _shortened),
        "saved_ms": (Column("saved", 9, right=True), lambda v: ms_or_blank(v) if v else ""),
        "device": (Column("device", 10, least=20, middle=True), _text)},
    "kernels": {
        "kernel": (Column("kernel", 0, least=12), _text),
        "key": (Column("key", 1), _key),
        "options": (Column("options", 2, least=20, middle=True), _shortened),
        "work_group_size": (Column("wg ≤", 3, right=True), _int),
        "preferred_multiple": (Column("×mult", 4, right=True), _int),
        "local_mem": (Column("local", 5, right=True), _size),
        "private_mem": (Column("private", 6, right=True), _size),
        "registers": (Column("regs", 7, right=True), _int),
        "spills": (Column("spills", 8, right=True), _size),
        "shared_mem": (Column("shared", 9, right=True), _size),
        "args": (Column("args", 10, least=12), _text),
        "device": (Column("device", 11, least=20, middle=True), _text)},
}
#: a kernel figure no row has (the driver does not report it) is named, not shown empty
_FIGURES = frozenset({"work_group_size", "preferred_multiple", "local_mem", "private_mem",
                      "registers", "spills", "shared_mem"})


#: what an empty frame says
_EMPTY = {"cache": "no entries yet: each program built (a %%clkernel cell, clmagic.build) is "
                   "stored here",
          "history": "no builds in this session yet",
          "kernels": "no kernels in the cache yet: each program built is listed here with its "
                     "kernels' facts"}


def _device_cell(kind: str, rec: Any) -> Cell:
    """A stored entry's device in its one short name (the frame keeps the driver's words)."""
    if kind != "cache":
        return _text(rec["device"])
    return device_label(_text(rec.get("platform")), _text(rec["device"]),
                        _text(rec.get("driver")))


def _build_cell(kind: str, rec: Any) -> Cell:
    """An entry's build time; a rekeyed copy whose original is listed has none of its own
    (:func:`cache_frame` counts each build once): it says so, and whose build it is."""
    value = rec["build_ms"]
    original = _text(rec.get("rekeyed_from")) if kind == "cache" else ""
    if original and (value is None or value != value):
        return "rekeyed", (f"the binary of {short_key(original)}, reused: its build time is "
                           "counted on that entry's row")
    return ms_or_blank(value)


def frame_html(df: pd.DataFrame, kind: str) -> str:
    """The readable table of a :func:`cache_frame` (``kind="cache"``), :func:`history_frame`
    (``"history"``) or :func:`kernels_frame` (``"kernels"``), or of the rows and columns a user
    picked from one: its columns formatted and fitted to the output area
    (:func:`clmagic.show.fit.table_html`), the rest named under it."""
    if df.empty:  # words, not a table of headings over nothing
        return (f'<div class="clmagic-frame"><i>{html.escape(_EMPTY[kind])}</i> (columns: '
                f"{html.escape(', '.join(map(str, df.columns)))})</div>")
    spec = _SHOWN[kind]
    names = [c for c in spec if c in df.columns
             and not (c in _FIGURES and not df[c].notna().any())]
    day = _one_day(df) if kind == "history" else None
    rows = []
    for _, rec in df.head(_MAX_ROWS).iterrows():
        rows.append([_device_cell(kind, rec) if c == "device" else
                     _build_cell(kind, rec) if c == "build_ms" else
                     _clock(rec[c]) if (c == "time" and day) else spec[c][1](rec[c])
                     for c in names])
    hidden = [c for c in df.columns if c not in names]
    note = count_of(len(df), "row")
    if len(df) > _MAX_ROWS:
        note += f" (the first {_MAX_ROWS} shown)"
    if hidden:
        note += f" · also in the DataFrame: {', '.join(hidden)}"
    note += (" · keys and long values shortened (a cell's tooltip has it in full), times in UTC"
             f"{f' on {day}' if day else ''} (the data is exact)")
    return table_html([spec[c][0] for c in names], rows, note)


def _one_day(df: pd.DataFrame) -> str | None:
    """The one UTC day every trip of a history frame is on (``2026-12-01``), else ``None``."""
    if "time" not in df.columns:
        return None
    days = {fmt_time(t.timestamp())[:10] for t in df["time"] if t == t}
    return days.pop() if len(days) == 1 else None


@functools.cache
def readable(view: Callable[[Any], str], kept: bool = False) -> type:
    """A DataFrame class whose notebook display is ``view(df)`` (pandas imported here); the
    frame itself is pandas' own, every column kept.

    ``kept``: the rows and columns picked from it (``df[df.kernel == "matmul"][["key",
    "options"]]``) are still shown by ``view``, which then shows the columns it knows of those
    there; a frame whose rows are no longer the entries (a grouping, ``describe()``: a named
    or non-integer index) is shown as pandas shows it. Otherwise operations give plain
    DataFrames."""
    import pandas as pd

    # the ignore: pandas ships no types here (no pandas-stubs), so its DataFrame is Any to mypy
    class DataFrame(pd.DataFrame):  # type: ignore[misc]
        @property
        def _constructor(self) -> Callable[..., pd.DataFrame]:
            return DataFrame if kept else pd.DataFrame

        def _repr_html_(self) -> str:
            index = self.index
            if kept and (index.name is not None or index.dtype.kind not in "iu"):
                return str(self.to_html(notebook=True, max_rows=_MAX_ROWS))  # pandas' own
            return view(self)

    return DataFrame


def _cache_html(df: pd.DataFrame) -> str:
    return frame_html(df, "cache")


def _history_html(df: pd.DataFrame) -> str:
    return frame_html(df, "history")


def kernels_html(df: pd.DataFrame) -> str:
    """The table of a kernels frame (:func:`clmagic.show.sweep.kernels_frame`)."""
    return frame_html(df, "kernels")


def cache_frame(device: object = None, *, compiler: Compiler | None = None,
                store: Store | None = None, origin: str | None = None) -> pd.DataFrame:
    """One row per stored entry, most recently used first.

    Columns (dtypes in :data:`CACHE_COLUMNS`): ``key`` (full hex), ``kernels`` (comma-separated),
    ``options`` (what the driver received), ``device``, ``platform``, ``driver``,
    ``source_bytes``, ``binary_bytes``, ``build_ms``, ``created`` (UTC), ``fingerprint``,
    ``last_used`` (UTC; the last store hit, else the build), ``hits`` (loads from the store),
    ``stored_bytes`` and ``store`` (the backend or layers holding it, and the store's location),
    and ``origin`` after ``fingerprint`` (``cell`` or the module whose build made the entry),
    ``rekeyed_from`` (the entry whose binary a REKEYED copy reuses, else empty). Each build is
    counted once: a copy whose original is listed too has no ``build_ms`` (the original's row
    has that build), so sums and "slowest builds" do not count one build twice.
    ``device`` filters by index spec, name substring or fingerprint, ``origin`` by origin (a
    package takes its modules). Binaries are not read.
    """
    if store is None:
        store = or_default(compiler).store
    entries = list(store.entries()) if store is not None else []
    if device is not None and device != "":
        fps = device_fingerprints(device, entries)
        entries = [e for e in entries if e.fingerprint in fps]
    if origin is not None:
        entries = [e for e in entries if from_origin(entry_origin(e), origin)]
    cols: dict[str, list[Any]] = {name: [] for name in CACHE_COLUMNS}
    for e in entries:
        for name in CACHE_COLUMNS:
            value = getattr(e.usage if name in _USAGE else e.meta, name)
            if name == "last_used":
                value = e.last_used  # the one rule: last load, else the build
            elif name == "store":
                value = f"{value}:{store.location}" if store is not None else value
            elif isinstance(value, tuple):
                value = ", ".join(value)
            cols[name].append(value)
    listed = {(e.fingerprint, e.key) for e in entries}
    cols["build_ms"] = [None if (e.fingerprint, e.meta.rekeyed_from) in listed else ms
                        for e, ms in zip(entries, cols["build_ms"], strict=True)]
    df = _frame(cols, CACHE_COLUMNS)
    df = df.sort_values("last_used", ascending=False, kind="stable", ignore_index=True)
    return readable(_cache_html, kept=True)(df)


def history_frame(*, compiler: Compiler | None = None, origin: str | None = None
                  ) -> pd.DataFrame:
    """One row per build trip of this process, in order.

    Columns (dtypes in :data:`HISTORY_COLUMNS`): ``time`` (UTC), ``outcome`` (MISS, HIT, MEMORY,
    REKEYED, CORRUPT, BYPASS, FAILED), ``kernels``, ``ms`` (the trip), ``build_ms`` (the
    original driver build), ``saved_ms`` (build minus load for HIT/MEMORY/REKEYED, else 0),
    ``device``, ``key``, ``options``,
    ``preview`` (first code line), ``source`` (only with ``CLMAGIC_RECORD=full``), ``saved``
    (written to the store), ``note``, ``origin`` (``cell``, or the module that called
    ``pyopencl.Program.build`` under :func:`clmagic.install`); ``origin`` keeps only those trips.
    """
    cols: dict[str, list[Any]] = {name: [] for name in HISTORY_COLUMNS}
    for r in or_default(compiler).history.records:
        if not from_origin(r.origin, origin):
            continue
        row = {
            "time": r.time, "outcome": r.outcome.value, "kernels": ", ".join(r.kernels), "ms": r.ms,
            "build_ms": r.build_ms, "saved_ms": r.saved_ms, "device": r.device.label,
            "key": r.key,
            "options": r.options, "preview": r.preview, "source": r.source,
            "saved": r.saved_to_store, "note": r.note, "origin": r.origin,
        }
        for name, value in row.items():
            cols[name].append(value)
    return readable(_history_html, kept=True)(_frame(cols, HISTORY_COLUMNS))
