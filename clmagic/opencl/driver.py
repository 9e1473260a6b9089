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

The built program is handed out as a public ``cl.Program`` (its one-argument form). The private
names are called through :mod:`clmagic.opencl.pyopencl_program`, where every pyopencl internal
clmagic uses is named once.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import fcntl
import os
import re
import struct
import termios
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import pyopencl as cl

from clmagic._fork import after_fork
from clmagic.opencl import pyopencl_program
from clmagic.opencl.facts import KernelFacts

__all__ = ["Built", "BuildFailed", "from_source", "from_binaries", "binary_of", "build_log",
           "probe", "quiet_driver"]

#: what a driver's compiler prints to the process's stderr besides its build log
CHATTER = re.compile(
    rb"^\d+ (?:warnings?|errors?)(?: and \d+ (?:warnings?|errors?))? generated\.\s*$")
_quiet_lock = threading.Lock()
_quiet_depth = 0
_quiet_saved: int | None = None  # fd 2 as it was before the redirect
#: the pipe the forwarder reads now (``None``: none) and whether it holds lines not yet written
_forwarding: list[Any] = [None, False]


@contextmanager
def quiet_driver() -> Iterator[None]:
    """Keep the driver's compiler chatter ("1 warning generated.") off the process's stderr (a
    notebook shows it in a red box) while a build runs; anything else written to stderr goes
    through. The build log holds the warnings themselves. Builds in several threads share one
    redirect.

    Why a pipe and a thread rather than a file: while fd 2 points elsewhere, other threads and
    the processes they start write there too. Into a pipe, whose reader forwards each line
    (but the chatter) to the real stderr as it comes, until the last writer is gone: so a child
    process another thread starts during a build keeps its stderr after the build ends."""
    global _quiet_depth, _quiet_saved
    with _quiet_lock:
        _quiet_depth += 1
        if _quiet_depth == 1:
            _redirect()
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_depth -= 1
            if _quiet_depth == 0 and _quiet_saved is not None:
                _drained()  # what was written so far is out, in order, before fd 2 is back
                saved, _quiet_saved = _quiet_saved, None
                os.dup2(saved, 2)  # the pipe's write end: held now only by children, if any
                os.close(saved)


def _drained(limit: float = 0.5) -> None:
    """Wait (``limit`` seconds at most) until the forwarder has written out everything written
    to the pipe so far: nothing is in the pipe and it is not in the middle of a write."""
    end = time.monotonic() + limit
    while _forwarding[0] is not None and time.monotonic() < end:
        try:
            waiting = struct.unpack("i", fcntl.ioctl(_forwarding[0], termios.FIONREAD,
                                                     b"\0\0\0\0"))[0]
        except OSError:
            return
        if not waiting and not _forwarding[1]:
            return
        time.sleep(0.001)


def _redirect() -> None:
    """Point fd 2 at a pipe whose reader forwards to the real stderr, fd 2 as it was kept in
    ``_quiet_saved`` first (a child forked from here on gives it back to itself); left as it
    was when the process has no descriptors to spare."""
    global _quiet_saved
    try:
        read, write = os.pipe()
    except OSError:
        return None
    try:
        saved, out = os.dup(2), os.dup(2)
    except OSError:
        os.close(read)
        os.close(write)
        return
    _forwarding[:] = [read, False]
    threading.Thread(target=_forward, args=(read, out), name="clmagic-stderr",
                     daemon=True).start()
    _quiet_saved = saved
    os.dup2(write, 2)
    os.close(write)


def _forward(read: int, out: int) -> None:
    """Copy ``read`` to ``out`` line by line, leaving out the driver's chatter, until EOF."""
    rest = b""
    try:
        while chunk := os.read(read, 65536):
            _forwarding[1] = True  # busy until the lines read are written (see _drained)
            *lines, rest = (rest + chunk).split(b"\n")
            kept = b"".join(ln + b"\n" for ln in lines if not CHATTER.match(ln + b"\n"))
            if kept:
                os.write(out, kept)
            _forwarding[1] = bool(rest)
        if rest and not CHATTER.match(rest):
            os.write(out, rest)
    except OSError:
        pass
    finally:
        if _forwarding[0] == read:
            _forwarding[:] = [None, False]
        os.close(read)
        os.close(out)


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
    #: what the compiler made of each kernel (:mod:`clmagic.opencl.facts`); ``None``: not known
    #: (a program loaded from an entry saved before clmagic kept them, or no kernels made)
    facts: Mapping[str, KernelFacts] | None = None
    #: a one-time cost inside this load or build, and what it was (a binary from elsewhere
    #: checked in a child process): said apart on the result line, not as the load's time
    once_ms: float = 0.0
    once_what: str = ""

    def with_once(self, ms: float, what: str) -> Built:
        """This build with ``ms`` more of one-time cost, and what it was."""
        return dataclasses.replace(self, once_ms=self.once_ms + ms, once_what="; ".join(
            w for w in (self.once_what, what) if w))


class BuildFailed(Exception):
    """The driver refused the source; ``log`` is what it said."""

    def __init__(self, log: str):
        super().__init__(log)
        self.log = log


def _after_fork() -> None:
    """A child forked while another thread built has its stderr in that build's sink, and no
    thread to give it back: it is given back here, with a new lock."""
    global _quiet_lock, _quiet_depth, _quiet_saved
    _quiet_lock, _quiet_depth = threading.Lock(), 0
    if _quiet_saved is not None:
        saved, _quiet_saved = _quiet_saved, None
        try:
            os.dup2(saved, 2)
            os.close(saved)
        except OSError:
            pass


after_fork(_after_fork)


def from_source(ctx: cl.Context, devs: Sequence[cl.Device], source: str | bytes, options: str,
                kernels: bool = True, quiet: bool = True) -> Built:
    """Build ``source`` for ``devs`` in one driver call, with exactly ``options``; raises
    :class:`BuildFailed` with the driver's log when it refuses. The program is made in ``ctx``
    for all of its devices and built for ``devs`` (as pyopencl's own source build makes it).
    ``quiet``: the driver's chatter is kept off stderr (:func:`quiet_driver`)."""
    prg = pyopencl_program.raw_from_source(ctx, source)
    t = time.perf_counter()
    try:
        with quiet_driver() if quiet else contextlib.nullcontext():
            pyopencl_program.bare_build(prg, options, devs)
    except cl.Error as exc:
        raise BuildFailed(_logs(prg, devs) or str(exc)) from None
    return _built(ctx, prg, (time.perf_counter() - t) * 1000, _logs(prg, devs), kernels)


def from_binaries(ctx: cl.Context, devs: Sequence[cl.Device], binaries: Sequence[bytes],
                  options: str, kernels: bool = True) -> Built:
    """Load one binary per device and build (link) them with ``options``; ``build_ms`` is the
    load time, ``log`` empty (the caller has the first build's). Raises ``cl.Error`` when the
    driver refuses a binary."""
    t = time.perf_counter()
    prg = pyopencl_program.raw_from_binaries(ctx, devs, binaries)
    pyopencl_program.bare_build(prg, options, devs)
    # no log read: a program loaded from a binary shows its first build's log
    return _built(ctx, prg, (time.perf_counter() - t) * 1000, "", kernels)


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
    program = pyopencl_program.raw_from_source(ctx, source)
    try:
        with quiet_driver():
            program.compile(options=b"", devices=[dev])
        return None
    except cl.Error:
        pass
    program = pyopencl_program.raw_from_source(ctx, source)
    try:
        with quiet_driver():
            pyopencl_program.bare_build(program, "", [dev])
        return None
    except cl.Error as exc:
        return build_log(program, dev) or str(exc)


def build_log(prg: Any, dev: cl.Device) -> str:
    """The driver's build log for ``dev`` (empty when it has none or cannot say)."""
    try:
        return str(prg.get_build_info(dev, cl.program_build_info.LOG) or "").strip()
    except cl.Error:
        return ""


_CL_PROGRAM_NUM_DEVICES = 0x1162
_CL_PROGRAM_DEVICES = 0x1163
_CL_PROGRAM_BINARY_SIZES = 0x1165
_CL_PROGRAM_BINARIES = 0x1166
_opencl: ctypes.CDLL | bool | None = None  # the ICD loader (ctypes); False: none was found


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
    return _opencl if isinstance(_opencl, ctypes.CDLL) else None


def binary_of(program: Any, dev: cl.Device) -> bytes:
    """The binary the driver built for ``dev``, read with ``clGetProgramInfo`` through ctypes,
    which lets go of the GIL while the driver works (pyopencl's ``get_info`` holds it: on POCL
    that is the machine code of every kernel). Falls back to pyopencl's readout."""
    lib = _loader()
    if lib is None:
        return _pyopencl_binary(program, dev)
    get = lib.clGetProgramInfo
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


def _pyopencl_binary(program: Any, dev: cl.Device) -> bytes:
    devs = cast("list[cl.Device]", program.get_info(cl.program_info.DEVICES))
    binaries = cast("list[bytes]", program.get_info(cl.program_info.BINARIES))
    return bytes(binaries[devs.index(dev)])
