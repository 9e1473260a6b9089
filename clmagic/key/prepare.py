"""The trip's first step: a source, its options and a device become what the caches are asked
with (checked and normalised source, parsed options, the headers it may read, the exact key),
before any cache is asked.

Preparations are remembered per source, options, device and driver flags. One of a source that
includes nothing is reused as it is; one of a source that includes files only while a ``stat``
of every place its include search looked finds what it found then
(:func:`clmagic.key.stamps.unchanged`: each file read the same file with the same size, times
and inode, not too new to be trusted; each place found empty or a folder still so; the same
working folder). Anything else prepares the source again.

Across processes the same is remembered in the store's manifest (:mod:`clmagic.key.manifest`,
ccache's direct mode): a new process takes the key from there under the same ``stat`` checks.
Such a preparation is ``partial`` where the source reads headers (their contents are not read
again): :func:`complete` prepares it fully before anything but a lookup needs it."""

from __future__ import annotations

import functools
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from clmagic._memo import remember
from clmagic.key.clock import clock_reason
from clmagic.key.digest import cache_key
from clmagic.key.includes import (
    DRIVER_FLAG_VARS,
    Headers,
    Unkeyable,
    driver_flags,
    find_headers,
    working_folder,
)
from clmagic.key.manifest import Manifest, Remembered, name_of
from clmagic.key.options import BuildOptions, parse_options
from clmagic.key.source import check_source, normalise_source, preview
from clmagic.key.stamps import unchanged
from clmagic.opencl.devices import DeviceInfo

__all__ = ["Options", "Prepared", "prepare", "complete"]

#: how many preparations a compiler remembers
PREPARED_MAX = 512
#: build options as callers give them (``BuildOptions``: already exact, from the pyopencl hook)
Options = str | Iterable[str] | BuildOptions | None


@dataclass(frozen=True)
class Prepared:
    """What a source and its options become for one device before any cache is asked
    (remembered per source, options and device; see the module's note). :attr:`source`, the
    text the compiler reads, is ``given`` or, where ``normal``, its normal form: made when
    first asked (a HIT taken from the manifest whose record keeps no source never makes it)."""

    given: str  # the text as given (decoded), or as the compiler reads it (``normal`` false)
    normal: bool  # the compiler reads :func:`~clmagic.key.source.normalise_source` of ``given``
    opts: BuildOptions
    key: str
    headers: tuple[str, ...]
    preview: str
    #: why the cache must be bypassed, or "": includes past what a key covers, or a build no
    #: cached binary can stand for (it reads the clock: :func:`clmagic.key.clock.clock_reason`)
    unkeyable: str
    size: int  # :attr:`source`'s length in UTF-8 bytes
    files: Headers = field(default_factory=Headers)  # what the key covered, re-checked after
    flags: dict[str, str] = field(default_factory=dict)  # the driver's environment flags
    #: taken from the manifest, without the headers' contents (``files`` holds the probes):
    #: the source and options as given, for :func:`complete`; ``None`` for a full preparation
    partial: tuple[str | bytes, Options] | None = None

    @functools.cached_property
    def source(self) -> str:
        """The text the compiler reads."""
        return normalise_source(self.given) if self.normal else self.given

    @functools.cached_property
    def src(self) -> bytes:
        """:attr:`source` in UTF-8, as the key hashed it."""
        return self.source.encode("utf-8")


def prepare(source: str | bytes, options: Options, info: DeviceInfo,
            memo: OrderedDict[tuple[object, ...], Prepared], lock: threading.Lock,
            manifest: Manifest | None = None) -> Prepared:
    """Check and normalise the source, parse the options, find headers, hash the key; a source
    that reads the clock is marked ``unkeyable`` (built every time, like ccache does).

    Remembered in ``memo`` (under ``lock``): a source that includes nothing has a key that
    depends on the arguments alone (a re-run cell then costs a dict lookup: 0.36 ms → µs on the
    H200 host for silx code); one that includes files is reused while its include search is
    :func:`~clmagic.key.stamps.unchanged` (a ``stat`` a place looked at), else prepared again.
    A preparation not in ``memo`` is taken from ``manifest`` under the same checks.
    """
    if not isinstance(options, str | None | BuildOptions):
        options = tuple(options)  # hashable, and a generator is read once
    if isinstance(source, bytearray | memoryview):
        source = bytes(source)
    args: tuple[object, ...] = (source, options, info.fingerprint,
                                *map(os.environ.get, DRIVER_FLAG_VARS))
    prepared = memo.get(args)
    cwd = working_folder()
    if prepared is not None and unchanged(prepared.files, cwd):
        return prepared
    name = name_of(args) if manifest is not None else None
    if name is not None and manifest is not None:
        again = restored(source, options, manifest.get(name), cwd)
        if again is not None:
            with lock:
                remember(memo, args, again, PREPARED_MAX)
            return again
    prepared = _prepare(source, options, info, cwd)
    if prepared.files.reusable and not prepared.unkeyable:  # checked by stat on reuse
        with lock:
            remember(memo, args, prepared, PREPARED_MAX)
        if name is not None and manifest is not None:
            manifest.add(name, _remembered(source, prepared, cwd))
    return prepared


def complete(prepared: Prepared, info: DeviceInfo) -> Prepared:
    """``prepared`` with its headers read, ready to build or rekey: itself unless it is a
    ``partial`` one from the manifest, which is prepared again from what was given."""
    if prepared.partial is None:
        return prepared
    source, options = prepared.partial
    return _prepare(source, options, info, working_folder())


def _prepare(source: str | bytes, options: Options, info: DeviceInfo, cwd: str) -> Prepared:
    """The full preparation (see :func:`prepare`)."""
    opts = parse_options(options)
    try:
        flags = driver_flags()
        written = " ".join([opts.effective, *flags.values()])  # what the driver receives
        text, src = check_source(source, written)
        headers = find_headers(text, (), cwd, options=written)
        unkeyable = clock_reason(text, written, headers)
    except Unkeyable as exc:
        text, src = check_source(source, opts.effective)
        flags, headers, unkeyable = {}, Headers(), str(exc)
    key = cache_key(src, opts.effective, info, headers, flags)
    return Prepared(text, False, opts, key, tuple(name for name, _ in headers), preview(text),
                    unkeyable, len(src), headers, flags)


def restored(source: str | bytes, options: Options, rem: Remembered | None,
             cwd: str) -> Prepared | None:
    """The preparation ``rem`` remembers for this source, while every place its include search
    looked finds what it found then; ``None`` otherwise (or when the driver's flags changed
    in this process)."""
    if rem is None:
        return None
    files = Headers()
    files.static, files.probes = rem.static, rem.probes
    text = source.decode("utf-8") if isinstance(source, bytes) else source
    # what unchanged() reads (the folder); the text is as given, not yet normal: these files
    # hold probes alone, so complete() searches again wherever more is asked of them
    files.found_with = (text, (), rem.cwd, rem.options)
    if not unchanged(files, cwd):
        return None
    try:
        flags = driver_flags()
    except Unkeyable:
        return None
    return Prepared(text, rem.normalised, parse_options(options), rem.key, rem.names,
                    rem.preview, "", rem.size, files, flags,
                    None if rem.static else (source, options))


def _remembered(source: str | bytes, prepared: Prepared, cwd: str) -> Remembered:
    files = prepared.files
    given = source.decode("utf-8") if isinstance(source, bytes) else source
    found = files.found_with
    return Remembered(prepared.key, prepared.source != given, prepared.headers, files.static,
                      dict(files.probes), found[2] if found else cwd, found[3] if found else "",
                      prepared.preview, prepared.size)
