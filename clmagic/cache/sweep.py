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
missing and a changed source or header times again. Only successful timings are kept: a build
the driver refused or a launch that raised is tried again by the next run (the user fixes the
launch and re-runs the cell), and ``fresh`` ignores what was kept.

Why the outcomes are this run's: a variant's outcome says what its build did now (MISS: built
by a worker now, HIT: the cache had it), and this process's load of what its own workers built
a moment before is recorded with the worker's outcome and counted once, by the worker: it is
not a HIT that saved a build. Each worker builds a tiny program first (its driver's one-time
setup, ``warm_up_ms``), so that the first variant it builds does not look slow.

Why ``-cl-nv-verbose`` is added on NVIDIA: registers and spills are what decides a variant
there, and the driver says them only with that option (it changes what the driver prints, not
the code it makes); the variants' options, and so ``best_options``, carry it.

The rows are plain data; the DataFrame and the plot are :mod:`clmagic.show.sweep`'s.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clmagic.cache.warm import Build, first_error, run_builds, warm_up
from clmagic.errors import ClmagicError, OptionsError
from clmagic.key.defines import define_value, is_macro_name
from clmagic.opencl.devices import DeviceInfo
from clmagic.opencl.facts import KernelFacts
from clmagic.opencl.timing import Timing
from clmagic.outcome import Outcome
from clmagic.process.session import get_compiler
from clmagic.store._fs import private_folder, read_json, repair_folder, write_private
from clmagic.trip.compiler import Compiler
from clmagic.trip.results import BuildResult

__all__ = ["Variant", "SweepRun", "sweep_run", "variants", "results_folder",
           "with_register_report"]

#: the results file's format
_VERSION = 1
#: the largest results file read back (thousands of variants take well under a megabyte)
MAX_RESULTS_BYTES = 16 << 20
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
    #: the one-time driver setup (ms) of each process that compiled (the workers, or this one
    #: on its first compile): a warm-up build before its first variant, so that no variant's
    #: build time holds it (a driver's first compile in a process sets up its compiler: POCL's
    #: takes 0.5 s)
    warm_up_ms: list[float] = field(default_factory=list)


def variants(params: Mapping[str, Sequence[object]], options: str = "") -> list[Variant]:
    """Every combination of ``params`` (a name → its values), in order, each with its options:
    ``options`` then ``-DNAME=VALUE`` per parameter. Each name and value is checked first
    (:func:`define_value`): a variant is exactly its defines, nothing pasted into them."""
    choices: list[list[tuple[object, str]]] = []  # per name: (value, its text)
    for name, values in params.items():
        if not isinstance(name, str) or not is_macro_name(name):
            raise OptionsError(f"sweep parameter {name!r} is not a macro name (a C identifier)")
        if isinstance(values, str | bytes) or not isinstance(values, Iterable):
            raise OptionsError(f"sweep parameter {name}: give a list of values")
        choices.append([(v, define_value(name, v)) for v in values])
        texts = [t for _, t in choices[-1]]
        if not texts:
            raise OptionsError(f"sweep parameter {name}: give a list of values")
        twice = next((t for i, t in enumerate(texts) if t in texts[:i]), None)
        if twice is not None:
            raise OptionsError(f"sweep parameter {name}: the value {twice} is given twice")
    out = []
    for combo in itertools.product(*choices):
        chosen = dict(zip(params, (value for value, _ in combo), strict=True))
        defines = " ".join(f"-D{k}={text}" for k, (_, text) in zip(params, combo, strict=True))
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
    """The results file's rows by program key, each of the shape :func:`_row` writes (empty
    when there is none or it cannot be read, and a row of another shape left out: it is only a
    record of timings, so what is damaged is timed again). Read by
    :func:`~clmagic.store._fs.read_json`: no FIFO waited on, no symlink followed, bounded."""
    if path is None or not _own_folder(path.parent):
        return {}
    doc = read_json(path, MAX_RESULTS_BYTES)
    rows = doc.get("rows") if isinstance(doc, dict) and doc.get("version") == _VERSION else None
    return {k: v for k, v in rows.items() if _sound(v)} if isinstance(rows, dict) else {}


def _own_folder(folder: Path) -> bool:
    """Whether ``folder`` is a folder (not a symlink to one) of this user's, made private."""
    try:
        return repair_folder(folder) is None
    except OSError:
        return False


def _sound(row: object) -> bool:
    """Whether ``row`` has the shape :func:`_row` writes: its timings absent, ``null`` or
    finite numbers, its texts text, its parameters an object."""
    if not isinstance(row, dict) or not isinstance(row.get("params", {}), dict):
        return False
    if not all(isinstance(row.get(k, ""), str) for k in ("error", "outcome")):
        return False
    for k in ("median_us", "min_us", "spread_us"):
        x = row.get(k)
        if x is None:
            continue
        if isinstance(x, bool) or not isinstance(x, int | float) or not abs(x) < 1e300:
            return False  # (NaN and infinities are not below it, nor a 400-digit integer)
    return True


def _save(path: Path | None, rows: dict[str, dict[str, Any]]) -> None:
    """Write the results file whole, 0600, in a private folder
    (:func:`~clmagic.store._fs.write_private`: a temp file renamed into place, a symlink there
    replaced, never followed); not kept when the folder is not clmagic's own."""
    if path is None:
        return
    try:
        private_folder(path.parent)
        if _own_folder(path.parent):  # a symlink, another's folder: not written
            write_private(path, json.dumps({"version": _VERSION, "rows": rows},
                                           sort_keys=True, allow_nan=False).encode())
    except (OSError, ValueError):
        pass  # timings not kept: a re-run times again


#: the note of this process's load of what a worker of the same sweep built or found
_BY_WORKER = {Outcome.MISS: "built by a sweep worker", Outcome.HIT: "found by a sweep worker"}


@dataclass
class _Sweep:
    """One sweep under way: what its steps share, and the builds made in this process (by
    variant label), which the launches use as they are (no second trip to count)."""

    compiler: Compiler
    source: str
    info: DeviceInfo
    out: SweepRun
    line_offset: int
    progress: Progress | None
    made: dict[str, BuildResult] = field(default_factory=dict)

    def step(self, v: Variant, what: str) -> None:
        if self.progress is not None:
            self.progress(v.label, what)

    def build_all(self, todo: list[Variant], jobs: int) -> bool:
        """Build ``todo`` through the cache: in worker processes over the same store when the
        store is one they can share, else here; each process's driver warmed up before its
        first compile (its one-time cost in ``out.warm_up_ms``). Returns whether it was
        interrupted."""
        by_label = {v.label: v for v in todo}

        def done(label: str, outcome: Outcome, why: str) -> None:
            v = by_label[label]
            v.outcome, v.error = outcome.value, why
            self.step(v, "failed" if outcome == Outcome.FAILED else "built")

        c = self.compiler
        if c.settings.cache is not None and c.store is not None and jobs > 1:
            builds: list[Build] = [(v.label, v.options, self.info.spec, self.source,
                                    self.line_offset) for v in todo]
            interrupted, _ = run_builds(c.settings, jobs, builds, done,
                                        warmed=self.out.warm_up_ms.append)
            return interrupted
        for v in todo:  # memory only (workers could not share it), or one job: here
            try:
                warm_ms = warm_up(c, self.source, v.options, self.info)
                if warm_ms:
                    self.out.warm_up_ms.append(warm_ms)
                r = c.build(self.source, v.options, self.info, line_offset=self.line_offset)
            except ClmagicError as exc:
                done(v.label, Outcome.FAILED, first_error(exc))
            else:
                self.made[v.label] = r
                done(v.label, r.outcome, "")
        return False

    def load(self, v: Variant) -> BuildResult | None:
        """The variant's program here: the build made here, else a load of what a worker
        built or found (recorded with the worker's outcome, counted once: by the worker), else
        (a resumed variant) a trip of this process's own; ``None`` when the driver refuses."""
        made = self.made.get(v.label)
        if made is not None:
            return made
        by = Outcome(v.outcome) if v.outcome else None
        try:
            return self.compiler.build(
                self.source, v.options, self.info, line_offset=self.line_offset,
                done_elsewhere=None if by is None else (
                    by, _BY_WORKER.get(by, f"{by} in a sweep worker")))
        except ClmagicError as exc:
            v.outcome, v.error = Outcome.FAILED.value, first_error(exc)
            return None

    def launch_all(self, run: Callable[[BuildResult], object] | None, resumed: set[str],
                   kept: dict[str, dict[str, Any]]) -> None:
        """Each variant built: loaded here (its facts), timed with ``run`` unless its timing
        was resumed, its timing kept when the launch succeeded (only then: a failed launch is
        tried again next time), and the best one chosen."""
        out = self.out
        for i, v in enumerate(out.variants):
            if v.outcome == Outcome.FAILED.value:
                continue
            result = self.load(v)
            if result is None:
                continue
            v.outcome = v.outcome or result.outcome.value  # what this run did
            v.build_ms = result.build_ms
            facts = result.kernel_info
            out.kernel = out.kernel or next(iter(facts), None)
            v.facts = facts.get(out.kernel) if out.kernel else None
            if run is not None and v.key not in resumed:
                _time(v, result, run)
                self.step(v, "timed")
                if v.median_us is not None and not v.error:
                    kept[v.key] = _row(v)
                    _save(out.results, kept)
            best = out.variants[out.best].median_us if out.best is not None else None
            if v.median_us is not None and not v.error and (best is None or v.median_us < best):
                out.best, out.best_result = i, result


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
        times = (got.median_us, got.min_us, got.spread_us)
    elif isinstance(got, int | float) and not isinstance(got, bool):
        times = (float(got), float(got), 0.0)
    else:
        v.error = (f"run returned {type(got).__name__}: return clmagic.time_kernel(...) or "
                   "a time in µs")
        return
    if not all(math.isfinite(t) for t in times):  # nothing to compare, nothing to keep
        v.error = f"run returned {got!r}: not a time (a finite number of µs)"
        return
    v.median_us, v.min_us, v.spread_us = times


def _restore(v: Variant, row: dict[str, Any]) -> bool:
    """Take a variant's timing from its row in the results file (a :func:`_sound` one: its
    timings finite numbers or ``null``); whether there was one. Only successful timings are
    kept (a row with an error, an older file's, is not one: that build or launch is tried
    again)."""
    median, low, spread = (row.get(k) for k in ("median_us", "min_us", "spread_us"))
    if row.get("error") or median is None:
        return False
    v.median_us, v.min_us = float(median), float(median if low is None else low)
    v.spread_us, v.resumed = float(spread or 0.0), True
    return True


def _row(v: Variant) -> dict[str, Any]:
    return {"params": {k: str(x) for k, x in v.params.items()}, "outcome": v.outcome,
            "error": v.error, "median_us": v.median_us, "min_us": v.min_us,
            "spread_us": v.spread_us}


def sweep_run(source: str, params: Mapping[str, Sequence[object]],
              run: Callable[[BuildResult], object] | None = None, *, options: str = "",
              device: object = None, kernel: str | None = None, jobs: int | None = None,
              compiler: Compiler | None = None, label: str = "", fresh: bool = False,
              progress: Progress | None = None, line_offset: int = 0) -> SweepRun:
    """Build every variant of ``source`` over ``params`` through the cache, then time each
    with ``run(result)`` (which returns :func:`clmagic.time_kernel`'s timing, or µs); see the
    module's note. ``kernel``: whose facts to report (default: the first); ``label``: what
    else the timings depend on (the problem size), in the results file's key; ``fresh``:
    ignore the timings kept from earlier runs and time everything again; ``line_offset``:
    added to a build error's line numbers (1 under a ``%%clkernel`` line, as a plain build
    of the cell). On Ctrl-C (or a ``run`` that raises KeyboardInterrupt) what was done is
    kept and returned, ``interrupted``."""
    compiler = compiler or get_compiler()
    info, _ = compiler.resolve(device)
    options = with_register_report(options, info.platform_name)
    out = SweepRun(variants=variants(params, options), kernel=kernel)
    for v in out.variants:
        v.key = compiler.key(source, v.options, info)
    out.results = _results_path(compiler, source, params, options, info.fingerprint, label)
    kept = {} if fresh else _load(out.results)
    resumed = {v.key for v in out.variants if v.key in kept and _restore(v, kept[v.key])}
    todo = [v for v in out.variants if v.key not in resumed]
    jobs = jobs if jobs is not None else min(os.cpu_count() or 1, max(len(todo), 1))
    sweep = _Sweep(compiler, source, info, out, line_offset, progress)
    try:
        out.interrupted = sweep.build_all(todo, jobs)
        if not out.interrupted:
            sweep.launch_all(run, resumed, kept)
    except KeyboardInterrupt:
        out.interrupted = True
    return out


def with_register_report(options: str, platform: str) -> str:
    """``options`` with ``-cl-nv-verbose`` on NVIDIA's platform (once), unchanged elsewhere."""
    if not platform.startswith("NVIDIA") or "-cl-nv-verbose" in options.split():
        return options
    return f"{options} -cl-nv-verbose".strip()
