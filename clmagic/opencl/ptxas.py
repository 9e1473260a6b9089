"""NVIDIA's register, spill and shared-memory figures, read from the ``ptxas`` lines of a build
log (what NVIDIA's OpenCL driver prints with ``-cl-nv-verbose``, as ``nvcc -Xptxas -v`` does).

Why the log: OpenCL has no query for registers or spills (``clGetKernelWorkGroupInfo`` stops at
work-group sizes and memory), and NVIDIA's driver says them only in the verbose build log. The
lines read (one block per function)::

    ptxas info    : Compiling entry function 'saxpy' for 'sm_90'
    ptxas info    : Function properties for saxpy
    ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 8 registers, used 0 barriers, 4096 bytes smem, 372 bytes cmem[0]

A figure the log does not print is ``None``; the one exception is shared memory on a ``Used``
line, which ptxas leaves out when it is zero (so a ``Used`` line without ``smem`` means 0 bytes).
Only ptxas's own lines are read: in its format from the line's start, never the source line a
compiler diagnostic echoes (a ``#warning`` can say anything), and only on NVIDIA
(:func:`clmagic.opencl.facts.gather`). Nothing here imports pyopencl: the parser is plain
text, tested on real ptxas lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

__all__ = ["PtxasUsage", "parse_ptxas", "ptxas_lines"]

_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"Function properties for '?([^'\s:]+)'?")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"\bused (\d+) registers", re.IGNORECASE)
_SMEM = re.compile(r"(\d+) bytes smem")
#: a line in the format of ptxas's (or nvJitLink's ``info :``) resource report, from its start
_REPORT = re.compile(r"^(?:ptxas(?: info\s*:|\s+\.)|info\s*:)")
#: nvcc's continuation line of a ``Function properties`` line: indented figures alone
_CONTINUED = re.compile(r"^\s+\d+ bytes stack frame, ")
#: the caret line under a source line a compiler diagnostic quotes
_CARET = re.compile(r"^\s*\^[~^\s]*$")

@dataclass(frozen=True)
class PtxasUsage:
    """One function's figures as ptxas printed them (bytes; ``None``: not printed)."""

    registers: int | None = None
    shared_mem: int | None = None
    stack_frame: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None

    @property
    def spills(self) -> int | None:
        """Bytes spilled: stores and loads together (``None`` when ptxas said neither)."""
        if self.spill_stores is None and self.spill_loads is None:
            return None
        return (self.spill_stores or 0) + (self.spill_loads or 0)


def _report(log: str) -> list[str]:
    """The lines of ``log`` that are ptxas's own: in its format from the line's start (a
    ``#warning`` or ``#pragma message`` the source holds is printed after a location), never a
    source line a diagnostic quotes (the line above a caret line), whatever it says."""
    lines = log.splitlines()
    out: list[str] = []
    properties = False
    for i, line in enumerate(lines):
        quoted = i + 1 < len(lines) and _CARET.match(lines[i + 1]) is not None
        if not quoted and (_REPORT.match(line) or (properties and _CONTINUED.match(line))):
            out.append(line.rstrip())
            properties = "Function properties for" in line
        else:
            properties = False
    return out


def ptxas_lines(log: str) -> list[str]:
    """The lines of ``log`` that are ptxas's resource report (to show beside the figures)."""
    return _report(log)


def parse_ptxas(log: str) -> dict[str, PtxasUsage]:
    """The figures of every function the log reports, by name (empty when it has no ptxas
    lines: a build without ``-cl-nv-verbose``, or another driver). A figure belongs to the
    function named last (``Compiling entry function`` or ``Function properties for``)."""
    found: dict[str, PtxasUsage] = {}
    current: str | None = None
    for line in _report(log):
        named = _ENTRY.search(line) or _PROPS.search(line)
        if named:
            current = named.group(1)
            found.setdefault(current, PtxasUsage())
            continue
        if current is None:
            continue
        frame = _FRAME.search(line)
        if frame:
            stack, stores, loads = (int(g) for g in frame.groups())
            found[current] = replace(found[current], stack_frame=stack, spill_stores=stores,
                                     spill_loads=loads)
            continue
        used = _USED.search(line)
        if used:
            smem = _SMEM.search(line)
            found[current] = replace(found[current], registers=int(used.group(1)),
                                     shared_mem=int(smem.group(1)) if smem else 0)
    return found
