"""What the hook's saves left at the process's exit, finished by another process after it.

On POCL a MISS's binary is read out by a helper process that builds the source again
(:mod:`clmagic.opencl.readout`), under ``SCHED_IDLE`` for the pyopencl hook's builds: it takes
only CPU time the workload leaves. A suite that builds faster than the idle CPU lets the helper
keep up ends with readouts still queued, and the process's exit used to wait for them
(:data:`~clmagic.trip.background.EXIT_WAIT_S`, then drop them): a first run under ``clmagic
run`` paid that at its end. Here those jobs are handed over instead: at exit, the queued saves
of the hook's builds (:class:`HandOver` jobs) are taken off the saver's queue and sent, pickled
on a pipe, to ``python -m clmagic.trip.finish``, started by the one launcher under ``SCHED_IDLE``
in a session of its own; the user's process exits at once, and the finisher builds each text,
reads its binary out, checks that the headers the key covered are unchanged, and stores the
entry (counted in the lifetime counters as the saves it stands for). A process started before it
is done finds those programs missing and builds them as pyopencl would.

Only saves into a store another process can open from its location alone (a folder or a SQLite
file of the settings') are handed over; the others are finished by the exit as before. The pipe
is between this process and its own child: what it carries is this process's own records.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clmagic import _launch
from clmagic._warn import warn_once
from clmagic.key.stamps import Headers
from clmagic.trip.background import before_exit, take_everywhere
from clmagic.trip.records import Record

if TYPE_CHECKING:
    from clmagic.store import Store

__all__ = ["Readout", "HandOver", "hand_over"]


@dataclass(frozen=True)
class Readout:
    """A save the finisher can do alone: the record to store (its source, options, device),
    the text the user's build compiled (``None``: the record's source), the headers the key
    covered (checked again after the build), and where the store is."""

    record: Record
    text: str | None
    files: Headers | None
    location: str
    trust: bool
    max_size: int


class HandOver:
    """A saver job that the process's exit may hand to the finisher instead of running it."""

    def __init__(self, job: Callable[[], object], readout: Readout) -> None:
        self.job, self.readout = job, readout

    def __call__(self) -> object:
        return self.job()


def hand_over() -> int:
    """Take the queued :class:`HandOver` jobs of every saver and start the finisher with them
    (run by the process's exit, before it waits for the rest); how many were handed over."""
    jobs = take_everywhere(lambda job: isinstance(job, HandOver))
    readouts = [job.readout for job in jobs if isinstance(job, HandOver)]
    if not readouts:
        return 0
    try:
        child = _launch.launch("clmagic.trip.finish", idle=True, detach=True,
                               stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        assert child.stdin is not None
        _launch.send(child.stdin, pickle.dumps(readouts))
        child.stdin.close()
    except (OSError, ValueError, pickle.PicklingError) as exc:
        warn_once(f"clmagic could not hand {len(readouts)} save(s) over at exit ({exc})")
        return 0
    if os.environ.get("CLMAGIC_CACHE_DEBUG", "").strip() not in ("", "0"):
        print(f"clmagic: HANDOVER {len(readouts)} save(s) to process {child.pid} at exit",
              file=sys.stderr)
    return len(readouts)


before_exit(hand_over)


def _finish(readout: Readout, stores: dict[str, Store]) -> None:
    """Build, read out, check and store one handed-over save (nothing stored on any doubt)."""
    from clmagic.config import Settings
    from clmagic.key.includes import headers_changed
    from clmagic.opencl import devices, driver, pyopencl_program
    from clmagic.store import open_store

    rec = readout.record
    found = readout.files.found_with if readout.files is not None else None
    if found is not None and not readout.files.static:  # type: ignore[union-attr]
        os.chdir(found[2])  # relative include folders are the user's
    _info, dev = devices.resolve_device(rec.fingerprint)
    ctx, _queue = devices.context_for(_info, dev)
    program = pyopencl_program.raw_from_source(ctx, readout.text or rec.source or "")
    with driver.quiet_driver():
        pyopencl_program.bare_build(program, rec.options, [dev])
    binary = driver.binary_of(program, dev)
    if readout.files is not None and headers_changed(readout.files, "the binary's readout"):
        return
    store = stores.get(readout.location)
    if store is None:
        store = open_store(readout.location, trust=readout.trust, max_size=readout.max_size)
        if store is None:
            return
        store.secret = Settings.from_env().secret
        stores[readout.location] = store
    store.put(rec.entry(binary))
    store.counters.add(rec.fingerprint, rec.outcome, 1, rec.saved_ms)


def _main() -> int:
    data = _launch.receive(sys.stdin.buffer)
    if data is None:
        return 1
    readouts: list[Readout] = pickle.loads(data)  # noqa: S301 - our own parent's records
    stores: dict[str, Store] = {}
    for readout in readouts:
        try:
            _finish(readout, stores)
        except Exception:  # noqa: BLE001 - a save that fails is a MISS next time, nothing more
            continue
    for store in stores.values():
        store.counters.close()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
