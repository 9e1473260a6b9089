"""Work a build need not wait for, done on one background thread: a MISS's binary readout and
save, and the hit counter.

The user waits for the driver's build only. The readout can cost more than the build itself
(POCL generates the machine code of every kernel when its binary is read, pyopencl #731) and
the save is file or network I/O, so both run on a worker thread at the lowest CPU priority,
which the driver calls leave the GIL to. Nothing is lost on the way:

- a pending save completes before the same key is looked up again (:meth:`Saver.wait`), before
  anyone reads the compiler's store (``Compiler.store``), and before the process exits normally
  (an ``atexit`` handler flushes every saver);
- a save is written to a temp file and renamed into place by the stores, so a process that dies
  mid-save leaves no half-written entry;
- a job that fails is reported once (as a synchronous save would be) and never takes the
  worker down.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable, Hashable

import pyopencl as cl

from .config import warn_once

__all__ = ["Saver", "flush_all", "read_binary"]

_SAVERS: weakref.WeakSet[Saver] = weakref.WeakSet()


class Saver:
    """A queue of jobs run in order by one daemon thread, started on the first job; jobs may be
    tagged with a key that :meth:`wait` can wait for."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._jobs: deque[tuple[Hashable, Callable[[], object]]] = deque()
        self._pending: dict[Hashable, int] = {}
        self._busy = 0  # jobs queued or running
        self._thread: threading.Thread | None = None
        _SAVERS.add(self)

    def submit(self, tag: Hashable, job: Callable[[], object]) -> None:
        """Run ``job()`` on the worker thread; ``tag`` (``None``: untagged) is pending until then."""
        with self._cond:
            self._jobs.append((tag, job))
            self._busy += 1
            if tag is not None:
                self._pending[tag] = self._pending.get(tag, 0) + 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="clmagic-saver",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def pending(self, tag: Hashable) -> bool:
        """Whether a job tagged ``tag`` has not finished yet (no waiting)."""
        return tag in self._pending

    def wait(self, tag: Hashable) -> None:
        """Wait until no job tagged ``tag`` is queued or running (at once when none is)."""
        if tag not in self._pending or self._on_worker():
            return
        with self._cond:
            while tag in self._pending:
                self._cond.wait()

    def flush(self) -> None:
        """Wait until every job submitted so far has finished."""
        if not self._busy or self._on_worker():
            return
        with self._cond:
            while self._busy:
                self._cond.wait()

    @property
    def busy(self) -> int:
        """Jobs queued or running."""
        return self._busy

    def _on_worker(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def _run(self) -> None:
        try:  # the lowest priority for this thread alone (Linux): the user's work comes first
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (AttributeError, OSError):
            pass
        while True:
            with self._cond:
                while not self._jobs:
                    self._cond.wait()
                tag, job = self._jobs.popleft()
            try:
                job()
            except Exception as exc:  # a save that fails is reported, never fatal
                warn_once(f"clmagic could not finish a save in the background ({exc})")
            finally:
                with self._cond:
                    self._busy -= 1
                    if tag is not None:
                        left = self._pending[tag] - 1
                        if left:
                            self._pending[tag] = left
                        else:
                            del self._pending[tag]
                    self._cond.notify_all()


def flush_all() -> None:
    """Finish every pending save of every saver (run at normal exit)."""
    for saver in list(_SAVERS):
        saver.flush()


atexit.register(flush_all)


# -- the binary readout without the GIL ------------------------------------------------------------

_CL_PROGRAM_NUM_DEVICES = 0x1162
_CL_PROGRAM_DEVICES = 0x1163
_CL_PROGRAM_BINARY_SIZES = 0x1165
_CL_PROGRAM_BINARIES = 0x1166
_opencl: object = None  # the loaded ICD loader (ctypes), False when none was found


def _loader() -> ctypes.CDLL | None:
    """The OpenCL ICD loader pyopencl itself loaded (read from this process's memory map)."""
    global _opencl
    if _opencl is None:
        _opencl = False
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
                paths = [line.split(None, 5)[-1].strip() for line in fh if "libOpenCL" in line]
            if paths:
                lib = ctypes.CDLL(paths[0])
                lib.clGetProgramInfo.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_size_t,
                                                 ctypes.c_void_p, ctypes.c_void_p]
                lib.clGetProgramInfo.restype = ctypes.c_int
                _opencl = lib
        except (OSError, AttributeError):
            _opencl = False
    return _opencl or None


def read_binary(program: cl.Program, dev: cl.Device) -> bytes:
    """The binary the driver built for ``dev``, read with ``clGetProgramInfo`` through ctypes,
    which lets go of the GIL while the driver works (pyopencl's ``get_info`` holds it: on POCL
    that is the machine code of every kernel). Falls back to pyopencl's readout."""
    lib = _loader()
    if lib is None:
        return _pyopencl_binary(program, dev)
    get = lib.clGetProgramInfo  # type: ignore[attr-defined]
    handle = ctypes.c_void_p(program.int_ptr)
    count = ctypes.c_uint()
    if get(handle, _CL_PROGRAM_NUM_DEVICES, ctypes.sizeof(count), ctypes.byref(count), None):
        return _pyopencl_binary(program, dev)
    n = count.value
    devs = (ctypes.c_void_p * n)()
    sizes = (ctypes.c_size_t * n)()
    if (get(handle, _CL_PROGRAM_DEVICES, ctypes.sizeof(devs), devs, None)
            or get(handle, _CL_PROGRAM_BINARY_SIZES, ctypes.sizeof(sizes), sizes, None)):
        return _pyopencl_binary(program, dev)
    try:
        index = [d or 0 for d in devs].index(dev.int_ptr)
    except ValueError:
        return _pyopencl_binary(program, dev)
    buffers = [ctypes.create_string_buffer(max(s, 1)) for s in sizes]
    pointers = (ctypes.c_void_p * n)(*[ctypes.addressof(b) for b in buffers])
    if get(handle, _CL_PROGRAM_BINARIES, ctypes.sizeof(pointers), pointers, None):
        return _pyopencl_binary(program, dev)
    return buffers[index].raw[: sizes[index]]


def _pyopencl_binary(program: cl.Program, dev: cl.Device) -> bytes:
    devs = program.get_info(cl.program_info.DEVICES)
    binaries = program.get_info(cl.program_info.BINARIES)
    return bytes(binaries[devs.index(dev)])
