"""Imported binaries proven loadable when they are imported, not on the user's first HIT.

A binary from a bundle must be loaded by a child process before this machine's processes hand
it to the driver (:mod:`clmagic.opencl.vet`: a truncated or crafted one crashes POCL). Proving
it on first use made that HIT slower than a build (a child's start, pyopencl's import and the
driver's load: 297 ms against a 111 ms build) and named a bundle the user may since have
deleted; a bad binary was only refused then, far from the import that brought it. So the import
proves every entry for a device of this machine, several children at a time, and stores the
ones that load as its own (proven: no child on their first HIT); one that does not load is not
imported, with one line saying which and why.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from clmagic._format import short_key
from clmagic.entry import Entry
from clmagic.errors import CorruptEntry
from clmagic.opencl import vet

__all__ = ["Proofs", "prove_entries", "MAX_JOBS"]

#: children proving at once: each is a process of its own that loads one binary, mostly
#: waiting for its start and the driver; a few keep the cores busy without crowding them
MAX_JOBS = 8


@dataclass
class Proofs:
    """What :func:`prove_entries` found: the entries to store (the proven ones marked as this
    machine's own), and one line per entry that did not load."""

    entries: list[Entry] = field(default_factory=list)
    proven: int = 0
    refused: list[str] = field(default_factory=list)


def _own(entry: Entry) -> Entry:
    """The entry as stored once proven: nothing left to prove (``untrusted`` empty)."""
    return Entry(dataclasses.replace(entry.meta, untrusted=""), binary=entry.binary)


def _verdict(entry: Entry) -> str:
    """``""`` when the entry's binary loads in a child process, else why not."""
    try:
        vet.vouch(entry, entry.meta.options, None)
    except CorruptEntry as exc:
        return str(exc)
    return ""


def prove_entries(entries: Sequence[Entry], here: set[str],
                  step: Callable[[], None] | None = None, jobs: int | None = None) -> Proofs:
    """Prove the binaries of ``entries`` that must be (``foreign``) and whose device is one of
    this machine's (fingerprints ``here``), ``jobs`` children at a time (default: one per
    core, at most :data:`MAX_JOBS`). ``step()`` is called as each entry is settled. An entry
    for a device this machine lacks cannot be proven here: it is kept as it came (``untrusted``
    says from where), to be proven where it is used."""
    out = Proofs()
    todo = [e for e in entries if e.foreign and e.fingerprint in here]
    for e in entries:
        if not (e.foreign and e.fingerprint in here):
            out.entries.append(e)
            if step is not None:
                step()
    if not todo:
        return out
    workers = max(1, min(jobs or os.cpu_count() or 1, MAX_JOBS, len(todo)))
    with ThreadPoolExecutor(workers, thread_name_prefix="clmagic-proof") as pool:
        for e, why in zip(todo, pool.map(_verdict, todo), strict=True):
            if why:
                kernels = ", ".join(e.meta.kernels) or "no kernels"
                out.refused.append(f"{short_key(e.key)} ({kernels}): {why}; not imported")
            else:
                out.entries.append(_own(e))
                out.proven += 1
            if step is not None:
                step()
    return out
