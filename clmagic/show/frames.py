"""pandas DataFrames of the stored entries and of this session's build trips.

pandas is imported here only, when a frame is asked for. The frames hold the exact data (full
keys, times to the nanosecond, every column); in a notebook they display as a table a person
reads (a short key, one device label, ms rounded, times to the second, no wrapping inside a
value, the other columns named under it). A frame derived from them is a plain DataFrame.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from clmagic._format import (
    count_of,
    device_label,
    end_cut,
    fmt_bytes,
    fmt_ms,
    fmt_time,
    middle_cut,
    short_key,
    short_paths,
)
from clmagic.cache.manage import device_fingerprints, entry_origin
from clmagic.entry import META_FIELDS, Usage, sane_time
from clmagic.process.session import or_default
from clmagic.show.line import Cell, table_html
from clmagic.trip.records import from_origin

if TYPE_CHECKING:
    import pandas as pd

    from clmagic.store import Store
    from clmagic.trip.compiler import Compiler

__all__ = ["cache_frame", "history_frame", "readable", "ms_or_blank", "CACHE_COLUMNS",
           "HISTORY_COLUMNS"]

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


#: what the readable display of each frame shows: column → (heading, how a value reads)
_MAX_ROWS = 60


def ms_or_blank(v: Any) -> str:
    """A duration in ms as a table shows it; blank where there is none (``None``, NaN)."""
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt_ms(float(v))


def _when(v: Any) -> str:
    return "" if v is None or v != v else fmt_time(v.timestamp())


def _text(v: Any) -> str:
    return "" if v is None or v != v else str(v)


#: the widest a text column is shown (options, notes): a history's ten columns fit 1280 px
#: with room for builds of seconds and a save's time (at 36 a slow machine's history of
#: 1613.2 ms builds ran 12 px past); the cell's tooltip has it all
_TEXT_WIDTH = 28


def _shortened(v: Any) -> Cell:
    """Options shortened for the table, in full in the tooltip: paths by
    :func:`clmagic._format.short_paths`, then cut in the middle (the end is the last option)."""
    full = _text(v)
    return middle_cut(short_paths(full), _TEXT_WIDTH), full


def _said(v: Any) -> Cell:
    """A note cut at its end for the table (its start says what happened), in full in the
    tooltip."""
    return end_cut(short_paths(_text(v)), _TEXT_WIDTH), _text(v)


#: the widest a device's label is shown (POCL names its device by its CPU target and model:
#: "POCL pthread-skylake-avx512-AMD EPYC" took the history past 1280 px)
_DEVICE_WIDTH = 24


def _device(v: Any) -> Cell:
    """A device's label cut in the middle (its driver and its model's end stay), in full in
    the tooltip."""
    full = _text(v)
    return middle_cut(full, _DEVICE_WIDTH), full


def _clock(v: Any) -> str:
    """A moment of one day's history: ``16:02:11`` (the day and UTC are said under it)."""
    return "" if v is None or v != v else fmt_time(v.timestamp())[11:19]


_SHOWN: dict[str, list[tuple[str, str, Any]]] = {
    "cache": [("key", "key", short_key), ("kernels", "kernels", _text),
              ("options", "options", _shortened), ("device", "device", None),
              ("stored_bytes", "size", lambda v: fmt_bytes(int(v))),
              ("build_ms", "build", ms_or_blank), ("hits", "hits", _text),
              ("last_used", "last used", _when)],
    "history": [("time", "time", _when), ("outcome", "outcome", _text),
                ("kernels", "kernels", _text), ("ms", "took", ms_or_blank),
                ("build_ms", "build", ms_or_blank),
                ("saved_ms", "saved", lambda v: ms_or_blank(v) if v else ""),
                ("device", "device", _device), ("key", "key", short_key),
                ("options", "options", _shortened), ("note", "note", _said)],
}
_NUMERIC = frozenset({"size", "build", "hits", "took", "saved"})


def frame_html(df: pd.DataFrame, kind: str) -> str:
    """The readable table of a :func:`cache_frame` (``kind="cache"``) or :func:`history_frame`
    (``"history"``): shown columns formatted, the rest named under it."""
    shown = [c for c in _SHOWN[kind] if c[0] in df.columns]
    day = _one_day(df) if kind == "history" else None
    if day:  # a session of one day: its moments as clock times, the day said once below
        shown = [(c, h, _clock if c == "time" else f) for c, h, f in shown]
    rows = []
    for _, rec in df.head(_MAX_ROWS).iterrows():
        row: list[Cell] = []
        for col, _head, fmt in shown:
            if col == "device" and kind == "cache":
                row.append(_device(device_label(_text(rec.get("platform")), _text(rec["device"]),
                                                _text(rec.get("driver")))))
            else:
                row.append(fmt(rec[col]))
        rows.append(row)
    hidden = [c for c in df.columns if c not in {s[0] for s in shown}]
    note = count_of(len(df), "row")
    if len(df) > _MAX_ROWS:
        note += f" (the first {_MAX_ROWS} shown)"
    if hidden:
        note += f" · also in the DataFrame: {', '.join(hidden)}"
    note += (" · keys and long paths shortened (a cell's tooltip has it in full), times in UTC"
             f"{f' on {day}' if day else ''} to the second (the data is exact)")
    return table_html([h for _, h, _ in shown], rows, note, _NUMERIC)


def _one_day(df: pd.DataFrame) -> str | None:
    """The one UTC day every trip of a history frame is on (``2026-12-01``), else ``None``."""
    days = {fmt_time(t.timestamp())[:10] for t in df["time"] if t == t}
    return days.pop() if len(days) == 1 else None


@functools.cache
def readable(view: Callable[[Any], str]) -> type:
    """A DataFrame class whose notebook display is ``view(df)`` (pandas imported here); the
    frame itself is pandas' own, every column kept."""
    import pandas as pd

    # operations on it give plain DataFrames (_constructor); the ignore: pandas ships no
    # types here (no pandas-stubs), so its DataFrame is Any to mypy
    class DataFrame(pd.DataFrame):  # type: ignore[misc]
        def _repr_html_(self) -> str:
            return view(self)

    return DataFrame


def _cache_html(df: pd.DataFrame) -> str:
    return frame_html(df, "cache")


def _history_html(df: pd.DataFrame) -> str:
    return frame_html(df, "history")


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
    return readable(_cache_html)(df)


def history_frame(*, compiler: Compiler | None = None, origin: str | None = None
                  ) -> pd.DataFrame:
    """One row per build trip of this process, in order.

    Columns (dtypes in :data:`HISTORY_COLUMNS`): ``time`` (UTC), ``outcome`` (MISS, HIT, MEMORY,
    REKEYED, CORRUPT, BYPASS, FAILED), ``kernels``, ``ms`` (the trip), ``build_ms`` (the
    original driver build), ``saved_ms`` (build minus load for HIT/MEMORY/REKEYED, else 0), ``device``, ``key``, ``options``,
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
    return readable(_history_html)(_frame(cols, HISTORY_COLUMNS))
