"""Proof that a binary from elsewhere loads: a binary that did not come from this machine's own
builds (imported from a bundle, fetched from a store others write) is first loaded by a child
process, so that a crafted or torn one crashes the child, not the user's kernel.

POCL aborts or segfaults on a truncated binary of its own format, and checksums cannot help when
the forger recomputed them. The child loads the binary as the user's process would
(:func:`clmagic.opencl.driver.from_binaries`: same device, same options, its kernels made) and
exits; its verdict is kept for the process, and a private store rewrites the entry as its own
(:meth:`clmagic.store.base.Store.mark_proven`), so each entry is proven once. An entry signed
with the team secret needs no proof (:attr:`clmagic.entry.Entry.foreign` is empty).

``python -m clmagic.opencl.vet FINGERPRINT OPTIONS`` reads the binary on stdin; exit status 0: it
loaded. It is started by :func:`clmagic._launch.launch`: nothing in the user's folder or
environment is imported by it (a ``json.py`` there once skipped the check).
"""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

from clmagic import _launch
from clmagic._fork import after_fork
from clmagic.errors import CorruptEntry
from clmagic.opencl.patience import bound_s, wait_while_working

if TYPE_CHECKING:
    from clmagic.entry import Entry
    from clmagic.store import Store

__all__ = ["prove", "vouch", "PROOF_TIMEOUT_S"]

#: the longest the child may take to load a binary (a driver's own JIT of it included), however
#: busy it is; one that does not answer is killed sooner (:mod:`clmagic.opencl.patience`)
PROOF_TIMEOUT_S = 120.0

_proven: set[tuple[str, str, str]] = set()
_lock = threading.Lock()


def prove(fingerprint: str, binary: bytes, options: str,
          timeout: float = PROOF_TIMEOUT_S, build_ms: float = 0.0) -> str | None:
    """Load ``binary`` for the device ``fingerprint`` with ``options`` in a child process:
    ``None`` when it loaded, else why not (a signal, a refusal, a child that did not answer) in
    words. The child gets a bound set by its build's ``build_ms``, more while it is seen
    working, ``timeout`` seconds at most; one that does not answer is killed."""
    try:
        proc = _launch.launch("clmagic.opencl.vet", [fingerprint, options],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    except OSError as exc:
        return f"the child process that checks it could not start ({exc.strerror})"
    t0 = time.monotonic()
    with proc:
        sent, errors = [False], [b""]

        def done(wait: float) -> bool:
            try:  # the binary goes once; asking again only waits for the answer
                errors[0] = proc.communicate(None if sent[0] else binary, timeout=wait)[1]
            except subprocess.TimeoutExpired:
                return False
            finally:
                sent[0] = True
            return True

        if not wait_while_working(done, proc.pid, bound_s(build_ms), timeout):
            proc.kill()
            proc.communicate()
            return (f"loading it in a child process got no answer in "
                    f"{time.monotonic() - t0:.1f} s (the child was killed)")
    stderr = errors[0]
    if proc.returncode == 0:
        return None
    if proc.returncode < 0:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = f"signal {-proc.returncode}"
        return f"the driver crashed loading it in a child process ({name})"
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    return f"the driver refused it in a child process ({lines[-1] if lines else proc.returncode})"


def vouch(entry: Entry, options: str, store: Store | None) -> None:
    """Let ``entry``'s binary reach the driver in this process: at once when it is this
    machine's own or signed (``entry.foreign`` empty) or was proven before; else after
    :func:`prove`, whose success is recorded (here, and by ``store``). A binary that crashes or
    is refused in the child raises :class:`CorruptEntry` (the caller rebuilds)."""
    if not entry.foreign or entry.binary is None:
        return
    # a cryptographic hash of the binary itself: the entry's XXH3 checksum is no proof against
    # a binary made to collide with one proven before (and a proof costs a child process)
    memo = (entry.fingerprint, hashlib.sha256(entry.binary).hexdigest(), options)
    with _lock:
        known = memo in _proven
    if not known:
        why = prove(entry.fingerprint, entry.binary, options, build_ms=entry.build_ms)
        if why:
            raise CorruptEntry(f"{why}; it came from {entry.foreign}")
        with _lock:
            _proven.add(memo)
    if store is not None:
        try:
            store.mark_proven(entry)
        except Exception:  # noqa: BLE001 - the proof holds for this process either way
            pass


def _after_fork() -> None:
    """A forked child: a new lock (the parent's may have been held); the proofs stand (the
    same machine, the same driver)."""
    global _lock
    _lock = threading.Lock()


after_fork(_after_fork)


def _main(argv: list[str]) -> int:
    import pyopencl as cl

    from clmagic.opencl import devices, driver

    binary = sys.stdin.buffer.read()
    _info, dev = devices.resolve_device(argv[1])
    try:
        driver.from_binaries(cl.Context([dev]), [dev], [binary], argv[2])
    except cl.Error as exc:
        print(str(exc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
