"""pandas DataFrames of the stored entries and of this session's build trips.

pandas is imported here only, when a frame is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .manage import _compiler, device_fingerprints, entry_origin, last_used
from .records import from_origin

if TYPE_CHECKING:
    import pandas as pd

    from .compiler import Compiler
    from .store import Store

__all__ = ["cache_frame", "history_frame", "CACHE_COLUMNS", "HISTORY_COLUMNS"]

#: column → dtype of :func:`cache_frame`
CACHE_COLUMNS: dict[str, str] = {
    "key": "string", "kernels": "string", "options": "string", "device": "string",
    "platform": "string", "driver": "string", "source_bytes": "Int64", "binary_bytes": "Int64",
    "build_ms": "float64", "created": "datetime64[ns, UTC]", "last_used": "datetime64[ns, UTC]",
    "hits": "Int64", "stored_bytes": "Int64", "fingerprint": "string", "store": "string",
    "origin": "string",
}

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
        if dtype.startswith("datetime64"):
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
    ``source_bytes``, ``binary_bytes``, ``build_ms``, ``created`` and ``last_used`` (UTC
    datetimes; last use is the last store hit, else the build), ``hits`` (loads from the store),
    ``stored_bytes``, ``fingerprint``, ``store`` (backend and location) and ``origin`` (``cell``
    or the module whose build made the entry). ``device`` filters by index spec, name substring
    or fingerprint, ``origin`` by origin (a package takes its modules). Binaries are not read.
    """
    if store is None:
        store = _compiler(compiler).store
    entries = list(store.entries()) if store is not None else []
    if device is not None and device != "":
        fps = device_fingerprints(device, entries)
        entries = [e for e in entries if e.fingerprint in fps]
    if origin is not None:
        entries = [e for e in entries if from_origin(entry_origin(e), origin)]
    where = f"{store.kind}:{store.location}" if store is not None else ""
    cols: dict[str, list] = {name: [] for name in CACHE_COLUMNS}
    for e in entries:
        m = e.meta
        row = {
            "key": e.key, "kernels": ", ".join(e.kernels), "options": m.get("options", ""),
            "device": m.get("device"), "platform": m.get("platform"), "driver": m.get("driver"),
            "source_bytes": m.get("source_bytes"), "binary_bytes": m.get("binary_bytes"),
            "build_ms": float(m.get("build_ms", float("nan"))), "created": m.get("created"),
            "last_used": last_used(e), "hits": m.get("hits"),
            "stored_bytes": m.get("stored_bytes"), "fingerprint": e.fingerprint,
            "store": m.get("store", where), "origin": entry_origin(e),
        }
        for name, value in row.items():
            cols[name].append(value)
    df = _frame(cols, CACHE_COLUMNS)
    return df.sort_values("last_used", ascending=False, kind="stable", ignore_index=True)


def history_frame(*, compiler: Compiler | None = None, origin: str | None = None
                  ) -> pd.DataFrame:
    """One row per build trip of this process, in order.

    Columns (dtypes in :data:`HISTORY_COLUMNS`): ``time`` (UTC), ``outcome`` (MISS, HIT, MEMORY,
    CORRUPT, BYPASS), ``kernels``, ``ms`` (the trip), ``build_ms`` (the original driver build),
    ``saved_ms`` (build minus load for hits, else 0), ``device``, ``key``, ``options``,
    ``preview`` (first code line), ``source`` (only with ``CLMAGIC_RECORD=full``), ``saved``
    (written to the store), ``note``, ``origin`` (``cell``, or the module that called
    ``pyopencl.Program.build`` under :func:`clmagic.install`); ``origin`` keeps only those trips.
    """
    cols: dict[str, list] = {name: [] for name in HISTORY_COLUMNS}
    for r in _compiler(compiler).history.records:
        if not from_origin(r.origin, origin):
            continue
        row = {
            "time": r.time, "outcome": r.outcome, "kernels": ", ".join(r.kernels), "ms": r.ms,
            "build_ms": r.build_ms, "saved_ms": r.saved_ms, "device": r.device, "key": r.key,
            "options": r.options, "preview": r.preview, "source": r.source,
            "saved": r.saved_to_store, "note": r.note, "origin": r.origin,
        }
        for name, value in row.items():
            cols[name].append(value)
    return _frame(cols, HISTORY_COLUMNS)
