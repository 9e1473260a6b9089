"""Proof that a binary from elsewhere loads: a binary that did not come from this machine's own
builds (imported from a bundle, fetched from a store others write) is first loaded by a child
process, so that a crafted or torn one crashes the child, not the user's kernel.

POCL aborts or segfaults on a truncated binary of its own format, and checksums cannot help when
the forger recomputed them. The child loads the binary as the user's process would
(:func:`clmagic.opencl.driver.from_binaries`: same device, same options, its kernels made) and exits;
its verdict is kept for the process, and a private store rewrites the entry as its own
(:meth:`clmagic.store.base.Store.mark_proven`), so each entry is proven once. An entry signed
with the team secret needs no proof (:attr:`clmagic.entry.Entry.foreign` is empty).

``python -m clmagic.opencl.vet FINGERPRINT OPTIONS`` reads the binary on stdin; exit status 0: it loaded.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from typing import TYPE_CHECKING

from clmagic.errors import CorruptEntry

if TYPE_CHECKING:
    from clmagic.entry import Entry
    from clmagic.store import Store

__all__ = ["prove", "vouch", "PROOF_TIMEOUT_S"]

#: how long the child may take to load a binary (a driver's own JIT of it included)
PROOF_TIMEOUT_S = 120.0

_proven: set[tuple[str, str, str]] = set()
_lock = threading.Lock()


def prove(fingerprint: str, binary: bytes, options: str,
          timeout: float = PROOF_TIMEOUT_S) -> str | None:
    """Load ``binary`` for the device ``fingerprint`` with ``options`` in a child process:
    ``None`` when it loaded, else why not (a signal, a refusal, a timeout) in words."""
    cmd = [sys.executable, "-m", "clmagic.opencl.vet", fingerprint, options]
    try:
        proc = subprocess.run(cmd, input=binary, capture_output=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return f"loading it in a child process did not finish in {timeout:g} s"
    except OSError as exc:
        return f"the child process that checks it could not start ({exc.strerror})"
    if proc.returncode == 0:
        return None
    if proc.returncode < 0:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = f"signal {-proc.returncode}"
        return f"the driver crashed loading it in a child process ({name})"
    lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    return f"the driver refused it in a child process ({lines[-1] if lines else proc.returncode})"


def vouch(entry: Entry, options: str, store: Store | None) -> None:
    """Let ``entry``'s binary reach the driver in this process: at once when it is this
    machine's own or signed (``entry.foreign`` empty) or was proven before; else after
    :func:`prove`, whose success is recorded (here, and by ``store``). A binary that crashes or
    is refused in the child raises :class:`CorruptEntry` (the caller rebuilds)."""
    if not entry.foreign or entry.binary is None:
        return
    memo = (entry.fingerprint, entry.meta.binary_sha256, options)
    with _lock:
        known = memo in _proven
    if not known:
        why = prove(entry.fingerprint, entry.binary, options)
        if why:
            raise CorruptEntry(f"{why}; it came from {entry.foreign}")
        with _lock:
            _proven.add(memo)
    if store is not None:
        try:
            store.mark_proven(entry)
        except Exception:  # noqa: BLE001 - the proof holds for this process either way
            pass


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
