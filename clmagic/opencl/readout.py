"""A MISS's binary read out in a helper process, on drivers where reading it holds the driver.

Reading a POCL program's binary generates the machine code of every kernel (pyopencl #731)
under POCL's process-wide compiler lock, so a readout in the user's process, even on a
background thread, makes the user's first kernel launch after a MISS wait for all of them
(measured: 80 ms → 1–25 s for programs of 16–256 kernels). One helper process per user process
(started at the first such save, ended when the user's process ends: it reads its jobs from a
pipe) builds the same source with the same options for the same device and returns the binary;
the user's process only waits for the pipe, without the GIL. A source that reads headers is not
sent (the helper could read them changed); any failure returns ``None`` and the caller reads the
binary in-process as before.

``python -m clmagic.opencl.readout``: the helper (jobs on stdin, binaries on stdout).
"""

from __future__ import annotations

import atexit
import json
import os
import struct
import subprocess
import sys
import threading
from typing import IO

__all__ = ["needs_helper", "read_out"]

#: how long one readout may take in the helper (its build included) before it is given up
TIMEOUT_S = 300.0
_LEN = struct.Struct("<Q")

_lock = threading.Lock()
_helper: subprocess.Popen[bytes] | None = None


def needs_helper(platform_name: str) -> bool:
    """Whether a background readout on this platform goes to the helper: on POCL, whose
    readout generates code under its process-wide lock, unless ``CLMAGIC_READOUT_HELPER=0``
    (the readout then runs in-process, and a kernel launched meanwhile waits for it)."""
    return ("Portable Computing Language" in platform_name
            and os.environ.get("CLMAGIC_READOUT_HELPER", "1") != "0")


def read_out(fingerprint: str, source: str, options: str) -> bytes | None:
    """The binary of ``source`` built with ``options`` for the device ``fingerprint``, by the
    helper process; ``None`` when it cannot say (the caller then reads it in-process)."""
    global _helper
    with _lock:  # one job at a time: the saver thread is the only caller anyway
        try:
            if _helper is None or _helper.poll() is not None:
                _helper = subprocess.Popen([sys.executable, "-m", "clmagic.opencl.readout"],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=subprocess.DEVNULL)
            assert _helper.stdin is not None and _helper.stdout is not None
            _send(_helper.stdin, json.dumps([fingerprint, source, options]).encode())
            reply = _receive(_helper.stdout, TIMEOUT_S)
        except (OSError, ValueError, TimeoutError):
            reply = None
        if reply is None:  # a helper that failed or hung is not asked again as it is
            _stop()
            return None
        return reply[1:] if reply[:1] == b"+" else None


def _send(pipe: IO[bytes], data: bytes) -> None:
    pipe.write(_LEN.pack(len(data)) + data)
    pipe.flush()


def _receive(pipe: IO[bytes], timeout: float) -> bytes | None:
    result: list[bytes | None] = [None]

    def read() -> None:
        head = pipe.read(_LEN.size)
        if len(head) == _LEN.size:
            body = pipe.read(_LEN.unpack(head)[0])
            result[0] = body if len(body) == _LEN.unpack(head)[0] else None

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        raise TimeoutError
    return result[0]


def _stop() -> None:
    global _helper
    if _helper is not None:
        try:
            _helper.kill()
            _helper.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        _helper = None


atexit.register(lambda: _stop() if _helper is not None else None)


def _main() -> int:
    import pyopencl as cl

    from clmagic.opencl import devices, driver, pyopencl_program

    jobs, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = jobs.read(_LEN.size)
        if len(head) < _LEN.size:
            return 0  # the user's process has ended
        fingerprint, source, options = json.loads(jobs.read(_LEN.unpack(head)[0]))
        try:
            _info, dev = devices.resolve_device(fingerprint)
            program = pyopencl_program.raw_from_source(cl.Context([dev]), source)
            with driver.quiet_driver():
                pyopencl_program.bare_build(program, options, [dev])
            _send(out, b"+" + driver.binary_of(program, dev))
        except Exception as exc:  # noqa: BLE001 - the user's process reads it itself then
            _send(out, b"-" + str(exc).encode("utf-8", "replace")[:500])


if __name__ == "__main__":
    sys.exit(_main())
