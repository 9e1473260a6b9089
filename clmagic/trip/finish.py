"""What the hook's saves left at the process's exit, finished by another process after it.

On POCL a MISS's binary is read out by a helper process that builds the source again
(:mod:`clmagic.opencl.readout`), under ``SCHED_IDLE`` for the pyopencl hook's builds: it takes
only CPU time the workload leaves. A suite that builds faster than the idle CPU lets the helper
keep up ends with readouts still queued, and the process's exit used to wait for them
(:data:`~clmagic.trip.background.EXIT_WAIT_S`, then drop them): a first run under ``clmagic
run`` paid that at its end. Here those jobs are handed over instead: at exit, the queued saves
of the hook's builds (:class:`HandOver` jobs) are taken off the saver's queue and sent, as JSON
on a pipe (plain data: nothing read there can run code), to ``python -m clmagic.trip.finish``,
started by the one launcher under ``SCHED_IDLE`` in a session of its own; the user's process
exits at once, and the finisher builds each text, reads its binary out, checks that the
headers the key covered are unchanged, and stores the entry (counted in the lifetime counters
as the saves it stands for). A process started before it is done finds those programs missing
and builds them as pyopencl would.

Only saves into a store another process can open from its location alone (a folder or a SQLite
file of the settings') are handed over; the others are finished by the exit as before.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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

    def wire(self) -> dict[str, Any]:
        """The save as plain JSON values: what the finisher reads (:func:`_unwire`)."""
        rec, files = self.record, self.files
        return {"key": rec.key, "fingerprint": rec.fingerprint, "fields": rec.entry_fields(),
                "text": self.text or rec.source or "", "outcome": str(rec.outcome),
                "saved_ms": rec.saved_ms, "location": self.location, "trust": self.trust,
                "max_size": self.max_size, "files": None if files is None else {
                    "items": [[n, base64.b64encode(d).decode()] for n, d in files],
                    "stamps": [list(st) for st in files.stamps], "static": files.static,
                    "found_with": None if files.found_with is None else [
                        files.found_with[0], list(files.found_with[1]), *files.found_with[2:]]}}


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
        _launch.send(child.stdin, json.dumps([r.wire() for r in readouts]).encode())
        child.stdin.close()
    except (OSError, ValueError, TypeError) as exc:
        warn_once(f"clmagic could not hand {len(readouts)} save(s) over at exit ({exc})")
        return 0
    if os.environ.get("CLMAGIC_CACHE_DEBUG", "").strip() not in ("", "0"):
        print(f"clmagic: HANDOVER {len(readouts)} save(s) to process {child.pid} at exit",
              file=sys.stderr)
    return len(readouts)


before_exit(hand_over)


def _headers(doc: dict[str, Any] | None) -> Headers | None:
    """The headers a readout's key covered, from their JSON form."""
    if doc is None:
        return None
    files = Headers((str(n), base64.b64decode(d)) for n, d in doc["items"])
    files.stamps = [tuple(st) for st in doc["stamps"]]
    files.static = bool(doc["static"])
    found = doc["found_with"]
    files.found_with = None if found is None else (str(found[0]), tuple(found[1]),
                                                   str(found[2]), str(found[3]))
    return files


def _finish(doc: dict[str, Any], stores: dict[str, Store]) -> None:
    """Build, read out, check and store one handed-over save (nothing stored on any doubt)."""
    from clmagic.config import Settings
    from clmagic.entry import Entry
    from clmagic.key.includes import headers_changed
    from clmagic.opencl import devices, driver, pyopencl_program
    from clmagic.store import open_store

    files = _headers(doc["files"])
    if files is not None and files.found_with is not None and not files.static:
        os.chdir(files.found_with[2])  # relative include folders are the user's
    info, dev = devices.resolve_device(doc["fingerprint"])
    ctx, _queue = devices.context_for(info, dev)
    fields = doc["fields"]
    program = pyopencl_program.raw_from_source(ctx, str(doc["text"]))
    with driver.quiet_driver():
        pyopencl_program.bare_build(program, str(fields["options"]), [dev])
    binary = driver.binary_of(program, dev)
    if files is not None and headers_changed(files, "the binary's readout"):
        return
    location = str(doc["location"])
    store = stores.get(location)
    if store is None:
        store = open_store(location, trust=bool(doc["trust"]), max_size=int(doc["max_size"]))
        if store is None:
            return
        store.secret = Settings.from_env().secret
        stores[location] = store
    if info.fingerprint != doc["fingerprint"]:
        return
    store.put(Entry.create(str(doc["key"]), info.fingerprint, binary, **fields))
    store.counters.add(info.fingerprint, str(doc["outcome"]), 1, float(doc["saved_ms"]))


def _main() -> int:
    data = _launch.receive(sys.stdin.buffer)
    if data is None:
        return 1
    stores: dict[str, Store] = {}
    for doc in json.loads(data):
        try:
            _finish(doc, stores)
        except Exception:  # noqa: BLE001 - a save that fails is a MISS next time, nothing more
            continue
    for store in stores.values():
        store.counters.close()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
