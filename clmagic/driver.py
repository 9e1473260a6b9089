"""The few pyopencl calls clmagic makes: a program built from source or from a binary, for one
device, with exactly the options given; the binary readout; the build log.

Why pyopencl's private ``cl._cl._Program`` (the C++ class under ``cl.Program``) and its
``_build`` (the bare ``clBuildProgram``), rather than ``cl.Program(...).build()`` — what the
public path does, read in pyopencl 2026.1 (``pyopencl/__init__.py``, ``Program.build``, and
``pyopencl/_monkeypatch.py``, ``program_build``):

- it adds options of its own (``-I`` pyopencl's include folder, per-platform options, and
  ``PYOPENCL_BUILD_OPTIONS`` from the environment), so the driver would not receive the options
  the cache key was computed from, and a key would not say what was built;
- for devices without a driver-side source cache (``pyopencl.characterize.has_src_build_cache``
  is not true: every device but POCL and NVIDIA), it builds through pyopencl's own binary cache
  (``pyopencl.cache``): a second cache between clmagic and the driver, so a MISS would time a
  cache retrieval and store a binary clmagic did not see built;
- a failed build writes the source to a temp file and folds the logs into the exception text,
  and a successful build that printed a log raises a ``CompilerWarning``, where clmagic shows
  the log under the cell itself.

The built program is handed out as a public ``cl.Program`` (its one-argument form).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import pyopencl as cl

__all__ = ["Built", "BuildFailed", "from_source", "from_binaries", "binary_of", "build_log",
           "probe"]


@dataclass(frozen=True)
class Built:
    """A program built for its devices: the kernels made (none when asked for none), their
    names, the build time, and the driver's log (of every device, joined)."""

    program: cl.Program
    kernels: dict[str, cl.Kernel]
    names: list[str]
    context: cl.Context
    build_ms: float
    log: str
    #: the key of another source whose line numbers the log uses (a rekeyed entry's), or ""
    log_from: str = ""


class BuildFailed(Exception):
    """The driver refused the source; ``log`` is what it said."""

    def __init__(self, log: str):
        super().__init__(log)
        self.log = log


def from_source(ctx: cl.Context, devs: Sequence[cl.Device], source: str, options: str,
                kernels: bool = True) -> Built:
    """Build ``source`` for ``devs`` in one driver call, with exactly ``options``; raises
    :class:`BuildFailed` with the driver's log when it refuses."""
    prg = cl._cl._Program(ctx, source)
    t = time.perf_counter()
    try:
        prg._build(options=options.encode(), devices=list(devs))
    except cl.Error as exc:
        raise BuildFailed(_logs(prg, devs) or str(exc)) from None
    return _built(ctx, prg, (time.perf_counter() - t) * 1000, _logs(prg, devs), kernels)


def from_binaries(ctx: cl.Context, devs: Sequence[cl.Device], binaries: Sequence[bytes],
                  options: str, kernels: bool = True) -> Built:
    """Load one binary per device and build (link) them with ``options``; ``build_ms`` is the
    load time. Raises ``cl.Error`` when the driver refuses a binary."""
    t = time.perf_counter()
    prg = cl._cl._Program(ctx, list(devs), list(binaries))
    prg._build(options=options.encode(), devices=list(devs))
    return _built(ctx, prg, (time.perf_counter() - t) * 1000, _logs(prg, devs), kernels)


def _built(ctx: cl.Context, prg: Any, build_ms: float, log: str, kernels: bool) -> Built:
    """``kernels=False`` makes no kernel objects (the pyopencl hook hands the program back and
    pyopencl makes the kernels it needs); the names are read from the program then."""
    if kernels:
        made = {k.function_name: k for k in prg.all_kernels()}
        names = list(made)
    else:
        made = {}
        names = [n for n in str(prg.get_info(cl.program_info.KERNEL_NAMES)).split(";") if n]
    return Built(cl.Program(prg), made, names, ctx, build_ms, (log or "").strip())


def _logs(prg: Any, devs: Sequence[cl.Device]) -> str:
    return "\n".join(filter(None, (build_log(prg, d) for d in devs)))


def probe(ctx: cl.Context, dev: cl.Device, source: str) -> str | None:
    """Whether the driver can compile ``source`` for ``dev``: ``None``, else its build log (or
    error). The compiler alone first (cheaper than a build, and where an unknown CPU fails);
    for a driver without ``clCompileProgram``, a whole build decides."""
    program = cl._cl._Program(ctx, source)
    try:
        program.compile(options=b"", devices=[dev])
        return None
    except cl.Error:
        pass
    program = cl._cl._Program(ctx, source)
    try:
        program._build(options=b"", devices=[dev])
        return None
    except cl.Error as exc:
        return build_log(program, dev) or str(exc)


def build_log(prg: Any, dev: cl.Device) -> str:
    """The driver's build log for ``dev`` (empty when it has none or cannot say)."""
    try:
        return str(prg.get_build_info(dev, cl.program_build_info.LOG) or "").strip()
    except cl.Error:
        return ""


def binary_of(program: Any, dev: cl.Device) -> bytes:
    """The binary the driver built for ``dev``."""
    devs = cast("list[cl.Device]", program.get_info(cl.program_info.DEVICES))
    binaries = cast("list[bytes]", program.get_info(cl.program_info.BINARIES))
    return bytes(binaries[devs.index(dev)])
