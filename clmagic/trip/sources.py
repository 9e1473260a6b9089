"""Which source, options and cell made a kernel: what a check of one launch on another device
needs (:mod:`clmagic.cache.checker` builds the same text for Oclgrind and shows the cell's lines).

A kernel a cell binds is a plain ``cl.Kernel``, and pyopencl's kernels take no weak reference;
its program, though, can be asked of the driver (``CL_KERNEL_PROGRAM``, the same handle). So
each build result registers its program here by that handle, beside a weak reference to
clmagic's own ``cl.Program`` object: while that object lives, it holds the handle, so no other
program can be given the same number; when it dies, its entry goes with it. What is kept is the
trip's :class:`~clmagic.trip.records.Record` (plain data: the source, the options, the line
offset): nothing here keeps an OpenCL object alive.
"""

from __future__ import annotations

import threading
import weakref
from typing import cast

import pyopencl as cl

from clmagic.trip.records import Record

__all__ = ["remember", "record_of"]

_KNOWN: dict[int, tuple[weakref.ref[cl.Program], Record]] = {}
#: re-entrant: a weak reference's callback may run (a collection) while the lock is held
_lock = threading.RLock()


def remember(program: cl.Program, record: Record) -> None:
    """Register ``program`` (clmagic's object of a build result) as made by ``record``'s trip;
    a later build of the same program (a memory HIT) replaces it: the same source."""
    handle = int(program.int_ptr)

    def gone(ref: weakref.ref[cl.Program]) -> None:
        with _lock:
            found = _KNOWN.get(handle)
            if found is not None and found[0] is ref:
                del _KNOWN[handle]

    ref = weakref.ref(program, gone)
    with _lock:
        _KNOWN[handle] = (ref, record)


def record_of(kernel: cl.Kernel) -> Record | None:
    """The record of the trip that built ``kernel``'s program, while clmagic's program object
    of it lives; ``None`` for a kernel clmagic did not build (or whose program it let go)."""
    try:
        program = cast("cl.Program", kernel.get_info(cl.kernel_info.PROGRAM))
        handle = int(program.int_ptr)
    except (cl.Error, AttributeError, TypeError):
        return None
    with _lock:
        found = _KNOWN.get(handle)
    if found is None or found[0]() is None:
        return None
    return found[1]
