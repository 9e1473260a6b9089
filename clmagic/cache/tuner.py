"""Kernel Tuner through clmagic's cache: :class:`FactsObserver` adds what the compiler made of
each configuration's kernel to Kernel Tuner's results (public as ``clmagic.kernel_tuner``).

Why an observer: Kernel Tuner's OpenCL backend builds every configuration with
``pyopencl.Program(ctx, src).build(options=...)``, so under :func:`clmagic.install` a re-tune's
builds are served from clmagic's cache (HITs) with nothing to change in the tuning script; what
Kernel Tuner cannot say for OpenCL is what each build made (its ``RegisterObserver`` raises
``NotImplementedError`` there), and that is what clmagic's kernel facts are.

How the observer sees each kernel: Kernel Tuner hands an observer the backend (``dev``), never the
compiled kernel (its CUDA backends keep ``dev.num_regs`` for that; the OpenCL one keeps nothing).
So :meth:`FactsObserver.register_device` wraps the backend's public ``compile`` method on that
one backend object: the wrapper only notes the kernel it returned, so Kernel Tuner's
``compile_time`` measures what it measured before; the facts are asked of the driver later, in
:meth:`~FactsObserver.get_results` (a few microseconds of ``clGetKernelWorkGroupInfo``).

Where registers and spills come from: OpenCL has no query for them; NVIDIA prints them in the
build log of a build with ``-cl-nv-verbose`` (:mod:`clmagic.opencl.ptxas`). A program served
from clmagic's cache was loaded from its binary, so the driver's log says nothing now: the log
read is then the one the trip's record carries (the first build's, stored in the entry), found in
the history of the compiler the hook builds with.

Kernel Tuner is imported here only, and this module only when ``clmagic.kernel_tuner`` is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyopencl as cl

try:
    from kernel_tuner.observers.observer import BenchmarkObserver
except ImportError as exc:  # one line that says what to install
    raise ImportError(f"clmagic.kernel_tuner needs Kernel Tuner ({exc}): "
                      "pip install 'clmagic[tune]'") from exc

from clmagic._warn import warn_once
from clmagic.opencl import driver
from clmagic.opencl.devices import identity
from clmagic.opencl.facts import KernelFacts, gather
from clmagic.process import hook, session
from clmagic.trip.compiler import Compiler
from clmagic.trip.records import Record, from_origin

__all__ = ["FactsObserver", "COLUMNS", "NVIDIA_COLUMNS", "ORIGIN"]

#: the columns every configuration gets (``None`` where the driver does not say): the driver's
#: ``CL_KERNEL_WORK_GROUP_SIZE`` (the largest group it promises for this build: NVIDIA's driver
#: 580 says 256 for every kernel and runs 1024 all the same), the bytes of ``__local`` memory
#: the kernel uses, the bytes of private memory per work-item, and how clmagic served the build
COLUMNS = ("work_group_size", "local_mem", "private_mem", "clmagic_outcome")
#: the columns added where the build log has NVIDIA's ptxas report (``-cl-nv-verbose``):
#: registers per work-item, bytes spilled (stores and loads)
NVIDIA_COLUMNS = ("registers", "spills")
#: where the hook's records of Kernel Tuner's builds come from (the module that called
#: ``Program.build``: ``kernel_tuner.backends.opencl``)
ORIGIN = "kernel_tuner"
#: said once on NVIDIA when a build log has no ptxas report
VERBOSE_HINT = ("FactsObserver: NVIDIA says registers and spills only in a verbose build log; "
                "tune with compiler_options=['-cl-nv-verbose'] to get those columns")


@dataclass(frozen=True)
class _Compiled:
    """The kernel one ``compile`` of the backend returned, and when (``time.time()``, as the
    trip's records are stamped) that call started and ended."""

    name: str
    kernel: cl.Kernel
    started: float
    ended: float


class FactsObserver(BenchmarkObserver):  # type: ignore[misc]  # Kernel Tuner ships no types
    """A Kernel Tuner observer that adds clmagic's kernel facts for each configuration to the
    results: ``work_group_size``, ``local_mem``, ``private_mem`` (the driver's
    ``clGetKernelWorkGroupInfo``), ``clmagic_outcome`` (``MISS``, ``HIT``, ``MEMORY``, ...:
    how clmagic's cache served the build; ``None`` when it did not go through the cache) and,
    on NVIDIA with ``compiler_options=['-cl-nv-verbose']``, ``registers`` and ``spills``.

    It fills the gap of Kernel Tuner's own ``RegisterObserver``, which raises
    ``NotImplementedError`` for OpenCL. Use it with ``tune_kernel(..., lang="OpenCL",
    observers=[FactsObserver()])``, usually after :func:`clmagic.install`; it works without the
    hook too (no ``clmagic_outcome`` then, and the driver's own log for the ptxas figures). The
    outcome and a HIT's stored log are read from the compiler's history: with
    ``CLMAGIC_RECORD=off`` it keeps none, and the columns are as without the hook.

    ``compiler``: the compiler whose history holds the hook's records (default: the process's,
    the one ``clmagic.install()`` builds with); give the one passed to ``clmagic.install`` if
    it was another. ``observers=[FactsObserver]`` (the class) works too: Kernel Tuner makes one.
    """

    def __init__(self, compiler: Compiler | Mapping[str, Any] | None = None) -> None:
        # the class itself in ``observers=`` is called by Kernel Tuner with a dict of its
        # arguments (device, platform, ...): no compiler named, so the process's
        self._compiler = compiler if isinstance(compiler, Compiler) else None
        self._device: cl.Device | None = None
        self._last: _Compiled | None = None

    def register_device(self, dev: Any) -> None:
        """Kernel Tuner's backend ``dev``: its device is the one the facts are asked of, and its
        ``compile`` is wrapped (on this object only) so each kernel it returns is seen."""
        super().register_device(dev)
        ctx = getattr(dev, "ctx", None)
        if not isinstance(ctx, cl.Context):
            raise NotImplementedError(f"FactsObserver reads OpenCL kernels; Kernel Tuner's "
                                      f"{type(dev).__name__} backend builds none: tune with "
                                      f"lang='OpenCL'")
        self._device = ctx.devices[0]
        dev.compile = self._watching(dev.compile)

    def _watching(self, compile: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def compile_watched(instance: Any) -> Any:
            started = time.time()
            func = compile(instance)
            self._last = (_Compiled(str(instance.name), func, started, time.time())
                          if isinstance(func, cl.Kernel) else None)
            return func

        return compile_watched

    def get_results(self) -> dict[str, Any]:
        """The columns of the configuration just benchmarked (empty if no kernel was seen);
        the kernel is let go of."""
        last, self._last = self._last, None
        if last is None or self._device is None:
            return {}
        record = self._record(last)
        log = (record.build_log if record is not None else
               driver.build_log(last.kernel.get_info(cl.kernel_info.PROGRAM), self._device))
        facts = gather({last.name: last.kernel}, self._device, log)[last.name]
        return self._columns(facts, record)

    def _record(self, last: _Compiled) -> Record | None:
        """The hook's record of ``last``'s build: the newest one made while the backend's
        ``compile`` ran, by Kernel Tuner, of that kernel (``None`` without the hook, with a
        history that keeps nothing, or when pyopencl built it itself)."""
        if not hook.installed():
            return None
        compiler = self._compiler if self._compiler is not None else session.get_compiler()
        for rec in reversed(compiler.history.records):
            if rec.time < last.started:
                break
            if (rec.time <= last.ended and last.name in rec.kernels
                    and from_origin(rec.origin, ORIGIN)):
                return rec
        return None

    def _columns(self, facts: KernelFacts, record: Record | None) -> dict[str, Any]:
        columns: dict[str, Any] = {
            "work_group_size": facts.work_group_size, "local_mem": facts.local_mem,
            "private_mem": facts.private_mem,
            "clmagic_outcome": None if record is None else str(record.outcome)}
        if facts.registers is not None:
            columns.update(registers=facts.registers, spills=facts.spills)
        elif self._device is not None and identity(self._device).platform_name.startswith(
                "NVIDIA"):
            warn_once(VERBOSE_HINT)
        return columns
