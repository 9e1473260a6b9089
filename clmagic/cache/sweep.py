"""Sweeps through the cache: every variant of a source over ``-D`` parameters built in parallel
processes, then loaded and timed here with the user's launch (:func:`sweep`).

Why in two phases: the builds are what takes long and what processes can share (each worker
builds through the same store, :func:`clmagic.cache.warm.run_builds`, as ``clmagic warm``
does); the launches need the user's buffers, so they run in this process, after the builds,
each variant then a HIT. A variant the driver refuses is skipped with its first error line.

Why a results file: a sweep is long, and a notebook may be stopped in the middle; the timings
already made are kept (``sweeps/<id>.json`` beside the store's statistics, keyed by the source,
the parameters, the options, the device and the ``label`` the caller gives for the problem, as
Kernel Tuner's cachefile), each with the program's cache key, so a re-run times only what is
missing and a changed source or header times again.

Why ``-cl-nv-verbose`` is added on NVIDIA: registers and spills are what decides a variant
there, and the driver says them only with that option (it changes what the driver prints, not
the code it makes); the variants' options, and so ``best_options``, carry it.

The rows are plain data; the DataFrame and the plot are :mod:`clmagic.show.sweep`'s.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clmagic.cache.warm import first_error, run_builds
from clmagic.errors import ClmagicError, OptionsError
from clmagic.opencl.facts import KernelFacts
from clmagic.opencl.timing import Timing
from clmagic.outcome import Outcome
from clmagic.process.session import get_compiler
from clmagic.trip.compiler import Compiler
from clmagic.trip.results import BuildResult

__all__ = ["Variant", "SweepRun", "sweep_run", "variants", "results_folder",
           "with_register_report"]

#: the results file's format
_VERSION = 1
#: what ``progress`` is told: (the variant's label, the step: "built", "failed", "timed", ...)
Progress = Callable[[str, str], None]


@dataclass
class Variant:
    """One point of the sweep: its parameters, the options they make, how its build ended
    (``outcome``: MISS when built now, HIT when the cache had it, FAILED), the driver's build
    time, the first error line of a failed build or launch, the facts of the timed kernel and
    the launch timing (µs). ``resumed``: the timing comes from the results file."""

    params: dict[str, object]
    options: str
    key: str = ""
    outcome: str = ""
    build_ms: float | None = None
    error: str = ""
    facts: KernelFacts | None = None
    median_us: float | None = None
    min_us: float | None = None
    spread_us: float | None = None
    resumed: bool = False

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.params.items())


@dataclass
class SweepRun:
    """A sweep's variants in order, the kernel timed, the best variant (lowest median launch
    time) and its build result (its kernels, to bind), whether it was interrupted, and the
    results file (``None``: none kept)."""

    variants: list[Variant] = field(default_factory=list)
    kernel: str | None = None
    best: int | None = None
    best_result: BuildResult | None = None
    interrupted: bool = False
    results: Path | None = None


def variants(params: Mapping[str, Sequence[object]], options: str = "") -> list[Variant]:
    """Every combination of ``params`` (a name → its values), in order, each with its options:
    ``options`` then ``-DNAME=VALUE`` per parameter."""
    for name, values in params.items():
        if not str(name).isidentifier():
            raise OptionsError(f"sweep parameter {name!r} is not a macro name")
        if isinstance(values, str | bytes) or not values:
            raise OptionsError(f"sweep parameter {name}: give a list of values")
    out = []
    for combo in itertools.product(*params.values()):
        chosen = dict(zip(params, combo))
        defines = " ".join(f"-D{k}={v}" for k, v in chosen.items())
        out.append(Variant(chosen, f"{options} {defines}".strip()))
    return out


def results_folder(compiler: Compiler) -> Path | None:
    """Where the sweeps' results files go: ``sweeps`` beside the store's ``stats`` (a directory
    store's own folder, ``cache.db.sweeps`` beside a SQLite file); ``None`` without one."""
    stats = compiler.store.stats_folder if compiler.store is not None else None
    if stats is None or not stats.name.endswith("stats"):
        return None
    return stats.with_name(stats.name[: -len("stats")] + "sweeps")


def _results_path(compiler: Compiler, source: str, params: Mapping[str, Sequence[object]],
                  options: str, fingerprint: str, label: str) -> Path | None:
    folder = results_folder(compiler)
    if folder is None:
        return None
    ident = json.dumps([source, {k: [str(v) for v in vs] for k, vs in params.items()}, options,
                        fingerprint, label], sort_keys=True)
    return folder / (hashlib.sha256(ident.encode()).hexdigest()[:32] + ".json")


def _load(path: Path | None) -> dict[str, dict[str, Any]]:
    """The results file's rows by program key (empty when there is none or it is unreadable:
    it is only a record of timings, so a damaged one is timed again)."""
    if path is None:
        return {}
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    rows = doc.get("rows") if isinstance(doc, dict) and doc.get("version") == _VERSION else None
    return {k: v for k, v in rows.items() if isinstance(v, dict)} if isinstance(rows, dict) else {}


def _save(path: Path | None, rows: dict[str, dict[str, Any]]) -> None:
    """Write the results file whole (a temp file renamed into place; a private folder)."""
    if path is None:
        return
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": _VERSION, "rows": rows}, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass  # timings not kept: a re-run times again


def _build_all(compiler: Compiler, source: str, todo: list[Variant], device: str, jobs: int,
               progress: Progress | None) -> bool:
    """Build ``todo`` through the cache: in worker processes over the same store when the
    store is one they can share, else here. Returns whether it was interrupted."""
    by_label = {v.label: v for v in todo}

    def done(label: str, outcome: Outcome, why: str) -> None:
        v = by_label[label]
        v.outcome, v.error = outcome.value, why
        if progress is not None:
            progress(label, "failed" if outcome == Outcome.FAILED else "built")

    if compiler.settings.cache is not None and compiler.store is not None and jobs > 1:
        interrupted, _ = run_builds(compiler.settings, jobs,
                                    [(v.label, v.options, device, source) for v in todo], done)
        return interrupted
    for v in todo:  # memory only (workers could not share it), or one job: here
        try:
            r = compiler.build(source, v.options, device)
        except ClmagicError as exc:
            done(v.label, Outcome.FAILED, first_error(exc))
        else:
            done(v.label, Outcome.MISS if r.outcome == Outcome.MISS else Outcome(r.outcome), "")
    return False


def _time(v: Variant, result: BuildResult, run: Callable[[BuildResult], object]) -> None:
    """Launch through the user's ``run`` (KeyboardInterrupt goes through: the caller stops)."""
    try:
        got = run(result)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        v.error = f"run failed: {type(exc).__name__}: {exc}".splitlines()[0]
        return
    if isinstance(got, Timing):
        v.median_us, v.min_us, v.spread_us = got.median_us, got.min_us, got.spread_us
    elif isinstance(got, int | float) and not isinstance(got, bool):
        v.median_us = v.min_us = float(got)
        v.spread_us = 0.0
    else:
        v.error = (f"run returned {type(got).__name__}: return clmagic.time_kernel(...) or "
                   "a time in µs")


def _restore(v: Variant, row: dict[str, Any]) -> bool:
    """Take a finished variant's row from the results file; whether it was one."""
    if row.get("error"):
        v.error, v.resumed = str(row["error"]), True
        v.outcome = v.outcome or str(row.get("outcome", ""))
        return True
    if not isinstance(row.get("median_us"), int | float):
        return False
    v.median_us, v.min_us = float(row["median_us"]), float(row.get("min_us", row["median_us"]))
    v.spread_us, v.resumed = float(row.get("spread_us", 0.0)), True
    return True


def _row(v: Variant) -> dict[str, Any]:
    return {"params": {k: str(x) for k, x in v.params.items()}, "outcome": v.outcome,
            "error": v.error, "median_us": v.median_us, "min_us": v.min_us,
            "spread_us": v.spread_us}


def _settle(run: SweepRun, v: Variant, result: BuildResult) -> None:
    v.outcome = v.outcome or result.outcome.value
    v.build_ms = result.build_ms
    facts = result.kernel_info
    run.kernel = run.kernel or next(iter(facts), None)
    v.facts = facts.get(run.kernel) if run.kernel else None


def sweep_run(source: str, params: Mapping[str, Sequence[object]],
              run: Callable[[BuildResult], object] | None = None, *, options: str = "",
              device: object = None, kernel: str | None = None, jobs: int | None = None,
              compiler: Compiler | None = None, label: str = "", fresh: bool = False,
              progress: Progress | None = None) -> SweepRun:
    """Build every variant of ``source`` over ``params`` through the cache, then time each
    with ``run(result)`` (which returns :func:`clmagic.time_kernel`'s timing, or µs); see the
    module's note. ``kernel``: whose facts to report (default: the first); ``label``: what
    else the timings depend on (the problem size), in the results file's key; ``fresh``:
    time everything again. On Ctrl-C (or a ``run`` that raises KeyboardInterrupt) what was
    done is kept and returned, ``interrupted``."""
    compiler = compiler or get_compiler()
    info, _ = compiler.resolve(device)
    options = with_register_report(options, info.platform_name)
    out = SweepRun(variants=variants(params, options), kernel=kernel)
    for v in out.variants:
        v.key = compiler.key(source, v.options, info)
    out.results = _results_path(compiler, source, params, options, info.fingerprint, label)
    kept = {} if fresh else _load(out.results)
    done = {v.key for v in out.variants if v.key in kept and _restore(v, kept[v.key])}
    todo = [v for v in out.variants if v.key not in done]
    jobs = jobs if jobs is not None else min(os.cpu_count() or 1, max(len(todo), 1))
    try:
        out.interrupted = _build_all(compiler, source, todo, info.spec, jobs, progress)
        for v in out.variants:
            if out.interrupted:
                break
            if v.outcome == Outcome.FAILED.value or (v.error and v.key in done):
                continue
            try:
                result = compiler.build(source, v.options, info)
            except ClmagicError as exc:
                v.outcome, v.error = Outcome.FAILED.value, first_error(exc)
                continue
            _settle(out, v, result)
            if run is not None and v.key not in done:
                _time(v, result, run)
                if progress is not None:
                    progress(v.label, "timed")
            if v.error or v.median_us is not None:
                kept[v.key] = _row(v)
                _save(out.results, kept)
    except KeyboardInterrupt:
        out.interrupted = True
    for v in out.variants:  # failures are kept too: a re-run does not build them again
        if v.outcome == Outcome.FAILED.value and v.key not in kept:
            kept[v.key] = _row(v)
    _save(out.results, kept)
    _choose(out, compiler, source, info)
    return out


def with_register_report(options: str, platform: str) -> str:
    """``options`` with ``-cl-nv-verbose`` on NVIDIA's platform (once), unchanged elsewhere."""
    if not platform.startswith("NVIDIA") or "-cl-nv-verbose" in options.split():
        return options
    return f"{options} -cl-nv-verbose".strip()


def _choose(out: SweepRun, compiler: Compiler, source: str, device: object) -> None:
    """The best variant: the lowest median launch time (a tie: the first)."""
    timed = [(v.median_us, i) for i, v in enumerate(out.variants)
             if v.median_us is not None and not v.error]
    if not timed:
        return
    out.best = min(timed)[1]
    out.best_result = compiler.build(source, out.variants[out.best].options, device)
