"""Warming a cache: build every ``.cl`` file under some paths through the cache, in parallel
processes, so that later sessions (a course's notebooks) hit instead of building.

Each worker process builds with its own :class:`~clmagic.trip.compiler.Compiler` over the same store
(the stores are safe for several processes), with the options exactly as given, in the current
working directory (as a notebook cell would: run it where the notebooks run). Workers ignore
Ctrl-C: on an interrupt the files not started are dropped, the builds under way finish and are
saved whole, and the report says what was done.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

from clmagic._secret import allow_to_children
from clmagic.config import Settings
from clmagic.errors import BuildError, ClmagicError, OptionsError
from clmagic.key.includes import MAX_HEADER_BYTES
from clmagic.outcome import Outcome
from clmagic.store._fs import read_regular

__all__ = ["warm", "find_sources", "WarmReport", "first_error"]


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

    def as_dict(self) -> dict:
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


_worker = None  # the worker process's compiler
_CACHED = (Outcome.HIT, Outcome.MEMORY)


def _init(settings: Settings) -> None:
    global _worker
    # Ctrl-C reaches the terminal's foreground process group; the parent decides what stops,
    # and a build is never cut (the driver's LLVM installs its own SIGINT handler, so ignoring
    # the signal is not enough: the worker leaves the group)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(os, "setpgrp"):
        os.setpgrp()
    from clmagic.trip.compiler import Compiler

    _worker = Compiler(settings)


def _build_one(path: str, options: str, device: str | None) -> tuple[str, Outcome, str]:
    """(path, outcome, first error line) of one file, built in a worker."""
    try:
        source, _ = read_regular(path, MAX_HEADER_BYTES, follow=True)  # a FIFO: failed, no wait
        result = _worker.build(source, options, device)  # type: ignore[union-attr]
    except (ClmagicError, OSError) as exc:
        return path, Outcome.FAILED, first_error(exc)
    if result.outcome == Outcome.BYPASS or (result.outcome not in _CACHED and not result.saved):
        return path, Outcome.FAILED, result.note  # built, but nothing a later session can load
    return path, result.outcome, ""


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
    allow_to_children()  # the settings' team secret goes to the workers (and only there)
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(files)), mp_context=get_context("spawn"),
                               initializer=_init, initargs=(settings,))
    pending: set[Future] = set()
    names: dict[Future, str] = {}
    try:
        for f in files:
            names[pool.submit(_build_one, str(f), options, device)] = str(f)
        pending = set(names)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                _tally(report, fut, names[fut], progress)
    except KeyboardInterrupt:
        report.interrupted = True
        for fut in pending:
            fut.cancel()
        running = [f for f in pending if not f.cancelled()]
        report.skipped = len(pending) - len(running)
        for fut in running:  # under way: let them finish and save whole
            while True:
                try:
                    wait([fut])
                    break
                except KeyboardInterrupt:
                    continue
            _tally(report, fut, names[fut], progress)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return report


def _tally(report: WarmReport, fut: Future[tuple[str, Outcome, str]], path: str,
           progress: Callable[[str, Outcome], None] | None) -> None:
    try:
        path, outcome, why = fut.result()
    except Exception as exc:  # a worker that died (killed, out of memory): that file failed
        outcome, why = Outcome.FAILED, f"the worker process died ({type(exc).__name__})"
    if outcome == Outcome.FAILED:
        report.failed.append((path, why))
    elif outcome in _CACHED:
        report.cached.append(path)
    else:
        report.built.append(path)
    if progress is not None:
        progress(path, outcome)
