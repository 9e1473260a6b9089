"""A MISS's save: the binary read out of the driver and stored, on the trip state's saver thread
(:mod:`clmagic.trip.background`) so that the user waits for the build alone."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pyopencl as cl

from clmagic._warn import warn_once
from clmagic.key.clock import rebuilt_alike
from clmagic.key.includes import Headers, headers_changed
from clmagic.opencl import driver, readout
from clmagic.store import Store
from clmagic.trip.background import FORKED_NOTE, driver_work, exiting
from clmagic.trip.finish import HandOver, Readout
from clmagic.trip.pending import Pending
from clmagic.trip.records import Record
from clmagic.trip.state import TripState

__all__ = ["save", "save_later", "by_helper", "not_saved", "device_tag"]


def save(state: TripState, rec: Record, program: cl.Program | None, dev: cl.Device,
         binary: bytes | None = None, helper: bool = False,
         files: Headers | None = None, text: str | None = None) -> tuple[bool, str]:
    """Store the entry of ``rec``, with ``binary`` (read out already) or the binary ``program``
    holds for ``dev``; returns (saved, note). ``helper``: a helper process reads it out
    (:func:`by_helper`), in the folder the include search of ``files`` ran from, and nothing is
    saved unless that search still finds what the key covered; a helper that fails leaves the
    readout to this thread (on a background thread that is beside the user's calls, the rare
    case :func:`save_later` otherwise avoids) where ``program`` is given (a cell's: clmagic's
    own), and the save is dropped otherwise (a caller's program is not held for it). ``text``:
    what the user's build compiled, when not the record's source (the hook's caller's text as
    given): the helper builds that very text, which the driver's own cache then knows."""
    store = state.store
    if store is None:
        return False, "cache off (memory only)"
    if binary is None and helper and rec.source:
        found = files.found_with if files is not None and not files.static else None
        cwd = found[2] if found is not None else None
        binary = readout.read_out(rec.fingerprint, text or rec.source, rec.options,
                                  rec.build_ms, cwd, idle=program is None)  # nobody waits
        changed = (headers_changed(files, "the binary's readout")
                   if binary is not None and files is not None else "")
        if changed:  # the helper may have read other headers than the user's build
            return False, f"not saved: {changed}"
    if binary is None and program is None:
        return False, "not saved (the readout helper could not read the binary out)"
    if binary is None:
        assert program is not None
        with driver_work():  # a fork waits for the readout (it holds the driver's locks)
            binary = driver.binary_of(program, dev)
    saved = store.put(rec.entry(binary))
    return saved, "saved" if saved else not_saved(store)


def by_helper(rec: Record, files: Headers | None = None) -> bool:
    """Whether a helper process reads the binary of ``rec`` out: on a driver whose readout holds
    the driver (POCL, :mod:`clmagic.opencl.readout`), unless the process is ending (nobody
    launches anything then, and a helper would only add its start). The helper builds the text
    again, so only a build that is a function of text, options and device, and of the headers
    ``files`` holds (what the key's include search read), goes there
    (:func:`clmagic.key.clock.rebuilt_alike`: no clock, no ``__FILE__``, no file named but
    those, none too new to trust; :func:`save` checks them again after the helper's build)."""
    return bool(rec.source and (not rec.headers or files is not None) and not exiting()
                and readout.needs_helper(rec.device.platform_name)
                and rebuilt_alike(rec.source, rec.options, files))  # the helper's is the user's


def not_saved(store: Store) -> str:
    """What a result's note says when ``store`` refused an entry."""
    return f"not saved ({store.reason or 'store refused it'})"


def save_later(state: TripState, rec: Record, kept: Record | None, program: cl.Program,
               dev: cl.Device, why: str = "", files: Headers | None = None, *,
               hold: bool = True, binary: bytes | None = None,
               text: str | bytes | None = None) -> Pending[Record]:
    """Read out and save the binary of ``rec``'s build on the saver's thread; the history's
    record (``kept``) then says how it ended, and so does the returned :class:`Pending`.
    ``files``: the headers the key covered (a full preparation's), which a helper may read.
    ``binary``: read out already. ``hold=False``: the job holds no reference to ``program`` (a
    caller's: it is freed when the caller lets go of it, as without clmagic), so a helper that
    fails drops the save instead of reading the program out here. ``text``: what the build
    compiled, where not the record's source (see :func:`save`).

    Where no helper process reads the binary out (:func:`by_helper`), this thread does, before
    the build returns: a readout on a background thread meets the user's own calls on the same
    driver, which drivers do not survive. Debian's POCL 3.1 aborted (``pocl_release_dlhandle_
    cache: Assertion `found->ref_count > 0' failed``: pyopencl's test_algorithm under ``clmagic
    run``, cold, test_dot then test_scan); Oclgrind freed a binary twice (``double free or
    corruption``: the user's ``program.binaries`` while the saver read the same program's).
    The store's write stays on the saver's thread."""
    pending: Pending[Record] = Pending(rec, forked=lambda r: dataclasses.replace(
        r, saved_to_store=False, note=FORKED_NOTE))  # a forked child: the parent saves it
    helper = binary is None and state.store is not None and by_helper(rec, files)
    failed = None
    if binary is None and state.store is not None and not helper:
        try:  # here: never beside the user's driver calls
            binary = driver.binary_of(program, dev)
        except Exception as exc:  # the build stands: the save reports it
            failed = exc

    held = program if hold and helper else None  # for a helper that fails: a cell's only
    given = text.decode("utf-8") if isinstance(text, bytes) else text

    def job() -> None:
        saved, note = False, "not saved"
        try:
            if failed is not None:
                raise failed
            saved, note = save(state, rec, held, dev, binary, helper, files, given)
            note = f"{why} · {note}" if why else note
        except Exception as exc:  # whatever went wrong, the build stands and nobody hangs
            note = f"not saved ({exc})"
            warn_once(f"clmagic could not save {rec.key[:12]} ({exc})")
        finally:
            if kept is not None:
                state.settle(kept, saved, note)
            if saved:
                state.saved()
            # counted once saved: a directory store's folder (and its counters) is made by its
            # first save
            state.counters.add(rec.fingerprint, rec.outcome, 1, rec.saved_ms)
            pending.settle(dataclasses.replace(rec, saved_to_store=saved, note=note))

    handover = helper and held is None and binary is None and _reopenable(state)
    _submit(state, rec, job, Readout(rec, given, files, state.settings.cache or "",
                                     state.settings.trust, state.settings.max_size)
            if handover else None)
    return pending


def _submit(state: TripState, rec: Record, job: Callable[[], object],
            readout: Readout | None) -> None:
    """Queue a save on the saver's thread, tagged by key, by code key (a REKEYED lookup of the
    same code waits for it too) and by device (a MISS's reason lists the device's entries once
    the earlier saves are in); with ``readout``, the process's exit may hand it to the
    finisher (a caller's readout: :mod:`clmagic.trip.finish`)."""
    code = (rec.fingerprint, "code", rec.code_key) if rec.code_key else None
    run = job if readout is None else HandOver(job, readout)
    state.submit_save((rec.fingerprint, rec.key), run, code, device_tag(rec.fingerprint))


def _reopenable(state: TripState) -> bool:
    """Whether another process can open this state's store from the settings alone: the local
    folder or SQLite file they name, nothing layered or remote."""
    store, settings = state.store, state.settings
    return (store is not None and not settings.remote and settings.cache is not None
            and store.kind in ("directory", "sqlite") and store.location == settings.cache)


def device_tag(fingerprint: str) -> tuple[str, str]:
    """The tag every save for a device carries besides its key."""
    return (fingerprint, "device")
