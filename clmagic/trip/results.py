"""What a build hands back: :class:`BuildResult` (one device, kernels made: ``%%clkernel`` and
:func:`clmagic.build`) and :class:`ProgramBuild` (a caller's context and devices, no kernels:
the pyopencl hook). Both carry the trip's records; neither repeats their fields."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyopencl as cl

from clmagic.key.options import BuildOptions
from clmagic.opencl.code import CodeView, code_of
from clmagic.opencl.facts import KernelFacts, gather
from clmagic.outcome import Outcome
from clmagic.trip.pending import Pending
from clmagic.trip.records import Record
from clmagic.trip.sources import remember

__all__ = ["BuildResult", "ProgramBuild"]


@dataclass(frozen=True)
class BuildResult:
    """What one build trip produced: the program and its kernels, the context and queue they
    live in, the options as written and as passed, and the trip's :class:`Record` (outcome,
    times, key, device, note), whose fields read through as attributes."""

    program: cl.Program
    kernels: dict[str, cl.Kernel]
    context: cl.Context
    queue: cl.CommandQueue
    options: BuildOptions
    record: Record
    #: the save of a MISS, done in the background (``None``: nothing to save)
    pending: Pending[Record] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        remember(self.program, self.record)  # its kernels' source, for a check of a launch

    outcome = property(lambda self: self.record.outcome, doc="How the trip ended (Outcome).")
    ms = property(lambda self: self.record.ms, doc="The trip's time in ms.")
    build_ms = property(lambda self: self.record.build_ms, doc="The driver's build time, ms.")
    key = property(lambda self: self.record.key, doc="The cache key.")
    device = property(lambda self: self.record.device, doc="The device (DeviceInfo).")
    saved = property(lambda self: self.settled.saved_to_store,
                     doc="Written to the store (waits for a save under way).")
    note = property(lambda self: self.settled.note,
                    doc="What happened, in words (waits for a save under way).")
    build_log = property(lambda self: self.record.build_log, doc="The driver's build log.")
    saved_ms = property(lambda self: self.record.saved_ms, doc="Build time this trip avoided.")

    @property
    def settled(self) -> Record:
        """The trip's record once its save (if any) has finished: waits for it."""
        return self.pending.wait() if self.pending is not None else self.record

    @property
    def latest(self) -> Record:
        """The trip's record as it stands now (``saving`` while the save runs): no waiting."""
        return self.pending.value if self.pending is not None else self.record

    @property
    def kernel_info(self) -> dict[str, KernelFacts]:
        """What the compiler made of each kernel for this device, by name
        (:class:`~clmagic.opencl.facts.KernelFacts`: work-group sizes, local and private
        memory, arguments; registers and spills on NVIDIA with ``-cl-nv-verbose``), ``None``
        in each figure the driver does not give. Gathered at the build and kept in the entry,
        so a HIT shows the MISS's; for an entry saved before clmagic kept them, asked of the
        driver now (with the ptxas figures of the stored log, if any)."""
        facts = self.record.facts
        if facts is None:
            facts = gather(self.kernels, self.queue.device, self.record.build_log)
        return dict(facts)

    @property
    def code(self) -> CodeView:
        """The compiled code for this device where the driver's binary is readable (NVIDIA's
        PTX), else what the binary is (:func:`clmagic.opencl.code.code_of`)."""
        return code_of(self.program, self.queue.device)

    @property
    def ptx(self) -> str | None:
        """NVIDIA's PTX of the program, ``None`` on drivers whose binary is not PTX (then
        :attr:`code` says what it is: POCL's poclbin archive, Oclgrind's LLVM bitcode, ...)."""
        view = self.code
        return view.text if view.kind == "PTX" else None

    def __getitem__(self, name: str) -> cl.Kernel:
        return self.kernels[name]

    def __repr__(self) -> str:
        """A short data repr: the line under a cell is ``show/``'s (IPython shows it; outside
        IPython, :func:`clmagic.show.text_of`), so the build trip imports no renderer."""
        return (f"<BuildResult {self.outcome} {', '.join(self.kernels) or '(no kernels)'} "
                f"key {self.key[:12]}… on {self.device.label}>")


@dataclass(frozen=True)
class ProgramBuild:
    """What :meth:`Compiler.build_program` hands back: the driver's program (no kernels made)
    and one record per device."""

    program: cl.Program
    outcome: Outcome
    records: list[Record]
    build_log: str = ""
