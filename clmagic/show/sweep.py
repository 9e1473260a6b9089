"""A sweep as a person reads it: :func:`sweep` (the DataFrame, with a progress bar while it
runs), :func:`sweep_frame` and :func:`plot_sweep`; the kernel facts as a DataFrame of the
stored entries (:func:`kernels_frame`).

pandas, tqdm and matplotlib are imported here only, when a frame, a bar or a plot is asked for
(the sweep itself is :mod:`clmagic.cache.sweep`'s, plain data).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from clmagic._format import count_of, end_cut, fmt_bytes, fmt_duration
from clmagic.cache.sweep import SweepRun, sweep_run, variants
from clmagic.opencl.facts import FACT_FIELDS, KernelFacts, facts_from_json
from clmagic.process.session import or_default
from clmagic.show.fit import Cell, Column, table_html
from clmagic.show.frames import kernels_html, ms_or_blank, readable
from clmagic.show.plot import theme_neutral

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

    from clmagic.trip.compiler import Compiler
    from clmagic.trip.results import BuildResult

__all__ = ["sweep", "sweep_with_bar", "sweep_frame", "plot_sweep", "kernels_frame", "FACT_COLUMNS"]

#: the kernel figures a sweep's and the kernels' frames show, in this order
FACT_COLUMNS = ("registers", "spills", "shared_mem", "work_group_size", "preferred_multiple",
                "local_mem", "private_mem")


def _facts_row(f: KernelFacts | None) -> dict[str, object]:
    return {c: (getattr(f, c) if f is not None else None) for c in FACT_COLUMNS}


def sweep_frame(run: SweepRun) -> pd.DataFrame:
    """One row per variant: its parameters, ``outcome``, ``build_ms``, ``error``, the timed
    kernel's facts and the launch times (µs); ``attrs``: ``best`` (the best variant's
    parameters, or ``None``), ``best_options``, ``kernel``, ``interrupted``, ``results``,
    ``warm_up_ms`` (each process's one-time driver setup, before its first compile)."""
    rows = [{**v.params, "outcome": v.outcome, "build_ms": v.build_ms, "error": v.error,
             **_facts_row(v.facts), "median_us": v.median_us, "min_us": v.min_us,
             "spread_us": v.spread_us, "resumed": v.resumed, "options": v.options}
            for v in run.variants]
    df = readable(sweep_html)(rows)
    for c in FACT_COLUMNS:
        df[c] = df[c].astype("Int64")
    best = run.variants[run.best] if run.best is not None else None
    df.attrs.update(best=dict(best.params) if best else None,
                    best_options=best.options if best else None, kernel=run.kernel,
                    interrupted=run.interrupted,
                    results=str(run.results) if run.results else None,
                    warm_up_ms=list(run.warm_up_ms))
    return df


#: the heading of each kernel figure in the readable table, and how its value reads
_FACT_HEADS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "registers": ("regs", str), "spills": ("spills", fmt_bytes),
    "shared_mem": ("shared", fmt_bytes), "work_group_size": ("wg ≤", str),
    "preferred_multiple": ("×mult", str), "local_mem": ("local", fmt_bytes),
    "private_mem": ("private", fmt_bytes)}
_ERROR_WIDTH = 40


def _known(v: Any) -> bool:
    import pandas as pd

    return not bool(pd.isna(v))


def _us(v: Any) -> str:
    return f"{v:.1f}" if _known(v) else ""


def _error(v: Any) -> Cell:
    text = str(v) if _known(v) else ""
    return end_cut(text, _ERROR_WIDTH), text


def sweep_html(df: pd.DataFrame) -> str:
    """A sweep's table as a person reads it: the parameters, how each build ended and took,
    the kernel figures the driver gave (a column the driver gave for no variant is left out
    and named under the table), the launch times in µs, the best variant marked, an error cut
    to its start (in full in its tooltip)."""
    params = [c for c in df.columns if c not in _NOT_PARAMS]
    facts = [c for c in FACT_COLUMNS if c in df.columns and df[c].notna().any()]
    unknown = [c for c in FACT_COLUMNS if c in df.columns and c not in facts]
    best = df.attrs.get("best") or {}
    # what stays in a narrow output area: the mark, the parameters, the outcome and the
    # median, then the error's start (in full in its tooltip); the other figures go first
    head = [Column("", 0), *(Column(p, 0) for p in params), Column("outcome", 1),
            Column("build", 4, right=True),
            *(Column(_FACT_HEADS[c][0], 7, right=True) for c in facts),
            Column("median µs", 2, right=True), Column("min µs", 5, right=True),
            Column("spread µs", 6, right=True), Column("error", 3, least=16)]
    rows: list[list[Cell]] = []
    for _, r in df.iterrows():
        is_best = bool(best) and all(str(r[c]) == str(best.get(c)) for c in params)
        rows.append(["★" if is_best else ("↺" if bool(r.get("resumed")) else ""),
                     *(str(r[c]) for c in params), str(r["outcome"]),
                     ms_or_blank(r["build_ms"]),
                     *(_FACT_HEADS[c][1](int(r[c])) if _known(r[c]) else "" for c in facts),
                     _us(r["median_us"]), _us(r["min_us"]), _us(r["spread_us"]),
                     _error(r["error"])])
    failed = int((df["outcome"] == "FAILED").sum())
    note = count_of(len(df), "variant") + (f" · {failed} failed to build" if failed else "")
    if best:
        note += " · ★ best: " + " ".join(f"{k}={v}" for k, v in best.items())
    if df.get("resumed") is not None and bool(df["resumed"].any()):
        note += " · ↺ timing kept from an earlier run (--fresh or fresh=True: time again)"
    if unknown:
        note += (f" · not reported by this driver: {', '.join(unknown)}"
                 + (" (NVIDIA gives registers and spills)" if "registers" in unknown else ""))
    warm_up = df.attrs.get("warm_up_ms") or []
    if warm_up:  # paid once per process, before its first compile: in no variant's build time
        note += (f" · the driver set up before the first build ({fmt_duration(max(warm_up))}, "
                 "in no build time)")
    note += " · also in the DataFrame: options, resumed"
    return table_html(head, rows, note)


@contextmanager
def _bar(total: int, show: bool) -> Iterator[Callable[[str, str], None] | None]:
    """A tqdm bar over builds and launches (``tqdm.auto``: a widget in a notebook)."""
    if not show:
        yield None
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc="sweep", unit="step", leave=False)
    try:
        def step(label: str, what: str) -> None:
            if what == "finished":  # the steps not needed (refused, resumed) are not owed:
                bar.total = bar.n  # a bar short of its total is drawn red, as if it failed
                return
            bar.set_postfix_str(f"{label} {what}", refresh=False)
            bar.update(1)

        yield step
    finally:
        bar.close()


def sweep(source: str, params: Mapping[str, Sequence[object]],
          run: Callable[[BuildResult], object] | None = None, *, options: str = "",
          device: object = None, kernel: str | None = None, jobs: int | None = None,
          compiler: Compiler | None = None, label: str = "", fresh: bool = False,
          progress: bool = True) -> pd.DataFrame:
    """Build every ``-D`` variant of ``source`` over ``params`` through the cache in parallel
    processes, time each with ``run(result)`` (return :func:`clmagic.time_kernel`'s timing or
    µs), and return the DataFrame (:func:`sweep_frame`); ``df.attrs["best_options"]`` are the
    best variant's options (``clmagic.build(source, df.attrs["best_options"])`` is then a
    memory hit with its kernels). A re-run is all HITs and times only what a stopped sweep had
    not, or what failed (a failed launch is never kept: fix ``run`` and run again);
    ``fresh=True`` times every variant again (see :mod:`clmagic.cache.sweep`). Each value is
    one define value (:func:`clmagic.key.defines.define_value`), else one line says why."""
    done = sweep_with_bar(source, params, run, options=options, device=device, kernel=kernel,
                          jobs=jobs, compiler=compiler, label=label, fresh=fresh,
                          progress=progress)
    return sweep_frame(done)


def sweep_with_bar(source: str, params: Mapping[str, Sequence[object]],
                   run: Callable[[BuildResult], object] | None = None, *,
                   progress: bool = True, **kwargs: Any) -> SweepRun:
    """:func:`clmagic.cache.sweep.sweep_run` with a progress bar (the magic binds the best
    variant's kernels from the run). The parameters are checked before the bar is drawn:
    a bad value is one line, with no bar left above it."""
    n = len(variants(params))
    with _bar(n * (2 if run is not None else 1), progress) as step:
        done = sweep_run(source, params, run, progress=step, **kwargs)
        if step is not None and not done.interrupted:  # an interrupted sweep's bar stays short
            step("", "finished")
        return done


def plot_sweep(df: pd.DataFrame, ax: Axes | None = None) -> None:
    """The median launch time of each variant as a bar (the spread as an error bar), the best
    one marked; variants that failed or were not timed are left out. Draws on ``ax`` when
    given (an axes of your own, to arrange or label further), else on a new figure that
    matplotlib shows as it shows any plot: once, under the cell. Returns nothing, so a cell
    that ends with it prints no ``<Axes: …>`` above the plot."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.2))
    timed = df[df["median_us"].notna()]
    names = [c for c in df.columns if c not in _NOT_PARAMS]
    labels = [" ".join(f"{c}={row[c]}" for c in names) for _, row in timed.iterrows()]
    best = df.attrs.get("best")
    colours = ["#1e8449" if best and all(str(row[c]) == str(best[c]) for c in names)
               else "#2471a3" for _, row in timed.iterrows()]
    ax.bar(range(len(timed)), timed["median_us"], yerr=timed["spread_us"].fillna(0) / 2,
           color=colours, capsize=3)
    ax.set_xticks(range(len(timed)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("launch, median µs")
    failed = int((df["outcome"] == "FAILED").sum())
    ax.set_title(f"sweep of {len(df)} variants" + (f" ({failed} failed to build)" if failed
                                                  else ""), fontsize=10)
    figure = ax.get_figure()
    if figure is not None and hasattr(figure, "tight_layout"):  # not a SubFigure
        figure.tight_layout()
    theme_neutral(ax)  # no white box in a dark theme


_NOT_PARAMS = frozenset({"outcome", "build_ms", "error", *FACT_COLUMNS, "median_us", "min_us",
                         "spread_us", "resumed", "options"})


def kernels_frame(device: object = None, compiler: Compiler | None = None) -> pd.DataFrame:
    """One row per kernel of every stored entry (of one device with ``device``): the entry's
    key, device and options, the kernel's name and its facts (``<NA>`` where the driver did
    not say, or the entry was saved before clmagic kept facts)."""
    import pandas as pd

    from clmagic.cache.manage import device_fingerprints, entry_label

    c = or_default(compiler)
    store = c.store
    fingerprints = device_fingerprints(device) if device is not None else None
    rows: list[dict[str, Any]] = []
    for entry in store.entries() if store is not None else ():
        if fingerprints is not None and entry.fingerprint not in fingerprints:
            continue
        facts = facts_from_json(entry.meta.kernel_facts) or {}
        for name in entry.meta.kernels:
            f = facts.get(name)
            rows.append({"kernel": name, "key": entry.key, "device": entry_label(entry.meta),
                         "options": entry.meta.options,
                         **{k: (getattr(f, k) if f is not None else None) for k in FACT_FIELDS},
                         "args": (", ".join(a.name or "?" for a in f.args)
                                  if f is not None and f.args else None)})
    columns = ["kernel", "key", "device", "options", *FACT_FIELDS, "args"]
    df = pd.DataFrame(rows, columns=columns)
    for k in FACT_FIELDS:
        if k != "compile_work_group_size":
            df[k] = df[k].astype("Int64")
    return readable(kernels_html, kept=True)(df)
