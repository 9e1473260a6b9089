"""Warming a cache: build every ``.cl`` file under some paths through the cache, in parallel
processes, so that later sessions (a course's notebooks) hit instead of building.

Each worker process builds with its own :class:`~clmagic.trip.compiler.Compiler` over the same store
(the stores are safe for several processes), with the options exactly as given, in the current
working directory (as a notebook cell would: run it where the notebooks run). The workers are
this module run by :mod:`clmagic.cache.pool` (never the user's main module again). Workers
ignore Ctrl-C: on an interrupt the files not started are dropped, the builds under way finish
and are saved whole, and the report says what was done.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyopencl as cl

from clmagic.cache.pool import run_pool, serve
from clmagic.config import Settings
from clmagic.errors import BuildError, ClmagicError, OptionsError
from clmagic.key.includes import MAX_HEADER_BYTES
from clmagic.opencl import driver
from clmagic.opencl.devices import context_for
from clmagic.outcome import Outcome
from clmagic.store._fs import read_regular

if TYPE_CHECKING:
    from clmagic.trip.compiler import Compiler

__all__ = ["warm", "find_sources", "WarmReport", "first_error", "run_builds", "Build", "warm_up"]


@dataclass
class WarmReport:
    """What :func:`warm` did: files built, already cached, failed (with each failure's first
    error line), and whether it was interrupted before every file was tried."""

    location: str = ""
    built: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    skipped: int = 0
    interrupted: bool = False

    def as_dict(self) -> dict[str, object]:
        """The report as JSON-able data."""
        return {"location": self.location, "built": self.built, "cached": self.cached,
                "failed": [{"path": p, "error": e} for p, e in self.failed],
                "skipped": self.skipped, "interrupted": self.interrupted}


def find_sources(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Every ``.cl`` file under ``paths`` (a file named directly is taken whatever its name),
    sorted, each once; a path that does not exist raises :class:`OptionsError`."""
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            found[path] = None
        elif path.is_dir():
            for p in sorted(path.rglob("*.cl")):
                if p.is_file():
                    found[p] = None
        else:
            raise OptionsError(f"no such file or folder: {raw}")
    return list(found)


def first_error(exc: BaseException) -> str:
    """The first line of a build log that says ``error`` (else its first line), or the
    message."""
    if isinstance(exc, BuildError):
        lines = [ln.strip() for ln in exc.log.splitlines() if ln.strip()]
        for line in lines:
            if "error" in line.lower():
                return line
        if lines:
            return lines[0]
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


_worker: Compiler | None = None  # the worker process's compiler (made by _init)
_CACHED = (Outcome.HIT, Outcome.MEMORY)


def _init(settings: Settings) -> None:
    global _worker
    # the parent decides what stops, and a build is never cut: the worker is in a session of
    # its own (the terminal's Ctrl-C does not reach it: the driver's LLVM installs its own
    # SIGINT handler, so ignoring the signal is not enough), and ignores one sent to it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from clmagic.trip.compiler import Compiler

    _worker = Compiler(settings)


#: the warm-up's program: refused at the driver's link step (a function declared, never
#: defined), so that no driver keeps it in its own cache (a warm-up POCL served from its cache
#: would set nothing up) and each one runs the driver's whole compiler
WARM_UP_SOURCE = ("void clmagic_warm_up_missing(__global int *a);\n"
                  "__kernel void clmagic_warm_up(__global int *a) "
                  "{ clmagic_warm_up_missing(a); }\n")
_warmed: set[str] = set()  # the devices (fingerprints) this process's driver has compiled for


def warm_up(compiler: Compiler, source: str | bytes, options: str, device: object) -> float:
    """Before this process's first compile for ``device``, a tiny one (:data:`WARM_UP_SOURCE`):
    a driver's first compile in a process also sets its compiler up (POCL: 0.5 s), which the
    first build's time would otherwise hold (a sweep's first variant would look slow). Returns
    the ms it took (0: not needed, the driver already warm here or ``source`` stored, a HIT
    compiles nothing)."""
    info, dev = compiler.resolve(device)
    if info.fingerprint in _warmed:
        return 0.0
    store = compiler.store
    try:
        if store is not None and store.get(info.fingerprint,
                                           compiler.key(source, options, info)) is not None:
            return 0.0
    except (ClmagicError, OSError):
        pass  # the build says what is wrong
    _warmed.add(info.fingerprint)
    t = time.perf_counter()
    try:
        driver.from_source(context_for(info, dev)[0], [dev], WARM_UP_SOURCE, "", kernels=False)
    except (driver.BuildFailed, cl.Error):
        pass  # refused, as it is meant to be
    return (time.perf_counter() - t) * 1000


def _build_one(label: str, options: str, device: str | None, text: str | None = None,
               line_offset: int = 0) -> tuple[str, Outcome, str, float]:
    """(label, outcome, first error line, the driver's warm-up ms) of one build in a worker:
    the file ``label``, or the source ``text`` when given (a sweep's variant, its build
    log's line numbers shifted by ``line_offset``)."""
    if _worker is None:
        raise RuntimeError("_build_one runs in a worker of run_builds' pool (started by _init)")
    warm_ms = 0.0
    try:
        source: str | bytes = text if text is not None else (  # a FIFO: failed, no wait
            read_regular(label, MAX_HEADER_BYTES, follow=True)[0])
        warm_ms = warm_up(_worker, source, options, device)
        result = _worker.build(source, options, device, line_offset=line_offset)
    except (ClmagicError, OSError) as exc:
        return label, Outcome.FAILED, first_error(exc), warm_ms
    if result.outcome == Outcome.BYPASS or (result.outcome not in _CACHED and not result.saved):
        return label, Outcome.FAILED, result.note, warm_ms  # nothing a later session can load
    return label, result.outcome, "", warm_ms


#: one build for :func:`run_builds`: (label, options, device, source text or None for a file,
#: the line offset of its build log)
Build = tuple[str, str, "str | None", "str | None", int]


def warm(paths: Iterable[str | os.PathLike[str]], options: str = "", device: str | None = None,
         jobs: int | None = None, settings: Settings | None = None,
         progress: Callable[[str, Outcome], None] | None = None) -> WarmReport:
    """Build every ``.cl`` file under ``paths`` through the cache in ``jobs`` processes
    (default: one per CPU); ``progress(path, outcome)`` is called as each file is done. On
    Ctrl-C the builds under way finish, the rest are skipped, and the report says so."""
    settings = settings or Settings.from_env()
    files = find_sources(paths)
    jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    if jobs < 1:
        raise OptionsError(f"--jobs {jobs}: need at least one process")
    if settings.cache is None:
        raise OptionsError("the cache is off (memory only): set CLMAGIC_CACHE_DIR to warm one")
    report = WarmReport(location=settings.cache)
    if not files:
        return report
    report.interrupted, report.skipped = run_builds(
        settings, jobs, [(str(f), options, device, None, 0) for f in files],
        lambda path, outcome, why: _tally(report, path, outcome, why, progress))
    return report


def run_builds(settings: Settings, jobs: int, builds: list[Build],
               done: Callable[[str, Outcome, str], None],
               warmed: Callable[[float], None] | None = None) -> tuple[bool, int]:
    """Build each of ``builds`` through the cache in at most ``jobs`` worker processes, each
    with its own compiler over the store of ``settings``; ``done(label, outcome, first error
    line)`` as each ends (a worker that died: FAILED), ``warmed(ms)`` for each worker's
    driver warm-up (before its first compile: in no build time). On Ctrl-C the builds not
    started are dropped and those under way finish and are saved whole. Returns
    (interrupted, how many were dropped). What ``clmagic warm`` and
    :mod:`clmagic.cache.sweep` share."""
    if not builds:
        return False, 0

    def finish(build: tuple[Any, ...], answer: Any, why: str) -> None:
        label, outcome, error, warm_ms = (
            answer if answer is not None else (build[0], Outcome.FAILED, why, 0.0))
        if warm_ms and warmed is not None:
            warmed(warm_ms)
        done(label, outcome, error)

    return run_pool("clmagic.cache.warm", settings, builds, jobs, finish)  # its __main__ below


def _tally(report: WarmReport, path: str, outcome: Outcome, why: str,
           progress: Callable[[str, Outcome], None] | None) -> None:
    if outcome == Outcome.FAILED:
        report.failed.append((path, why))
    elif outcome in _CACHED:
        report.cached.append(path)
    else:
        report.built.append(path)
    if progress is not None:
        progress(path, outcome)


if __name__ == "__main__":  # a worker of run_builds' pool
    sys.exit(serve(_init, _build_one))
