"""pandas DataFrames of the stored entries and of this session's build trips.

pandas is imported here only, when a frame is asked for.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from .entry import META_FIELDS, Usage, sane_time
from ._session import or_default
from .manage import device_fingerprints, entry_origin
from .records import from_origin

if TYPE_CHECKING:
    import pandas as pd

    from .compiler import Compiler
    from .store import Store

__all__ = ["cache_frame", "history_frame", "CACHE_COLUMNS", "HISTORY_COLUMNS"]

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


def _frame(columns: dict[str, list], dtypes: dict[str, str]) -> pd.DataFrame:
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


def cache_frame(device: object = None, *, compiler: Compiler | None = None,
                store: Store | None = None, origin: str | None = None) -> pd.DataFrame:
    """One row per stored entry, most recently used first.

    Columns (dtypes in :data:`CACHE_COLUMNS`): ``key`` (full hex), ``kernels`` (comma-separated),
    ``options`` (what the driver received), ``device``, ``platform``, ``driver``,
    ``source_bytes``, ``binary_bytes``, ``build_ms``, ``created`` (UTC), ``fingerprint``,
    ``last_used`` (UTC; the last store hit, else the build), ``hits`` (loads from the store),
    ``stored_bytes`` and ``store`` (the backend or layers holding it, and the store's location),
    and ``origin`` after ``fingerprint`` (``cell`` or the module whose build made the entry).
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
    df = _frame(cols, CACHE_COLUMNS)
    return df.sort_values("last_used", ascending=False, kind="stable", ignore_index=True)


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
    cols: dict[str, list] = {name: [] for name in HISTORY_COLUMNS}
    for r in or_default(compiler).history.records:
        if not from_origin(r.origin, origin):
            continue
        row = {
            "time": r.time, "outcome": r.outcome, "kernels": ", ".join(r.kernels), "ms": r.ms,
            "build_ms": r.build_ms, "saved_ms": r.saved_ms, "device": r.device.label,
            "key": r.key,
            "options": r.options, "preview": r.preview, "source": r.source,
            "saved": r.saved_to_store, "note": r.note, "origin": r.origin,
        }
        for name, value in row.items():
            cols[name].append(value)
    return _frame(cols, HISTORY_COLUMNS)
