"""The trip's first step: a source, its options and a device become what the caches are asked
with (checked and normalised source, parsed options, the headers it may read, the exact key),
before any cache is asked.

Preparations are remembered per source, options, device and driver flags. One of a source that
includes nothing is reused as it is; one of a source that includes files only while a ``stat``
of every place its include search looked finds what it found then
(:func:`clmagic.key.stamps.unchanged`: each file read the same file with the same size, times
and inode, not too new to be trusted; each place found empty or a folder still so; the same
working folder). Anything else prepares the source again."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from clmagic.opencl.devices import DeviceInfo
from clmagic.key.includes import DRIVER_FLAG_VARS, Headers, Unkeyable, driver_flags, find_headers
from clmagic.key.stamps import unchanged
from clmagic.key.clock import clock_reason
from clmagic.key.digest import cache_key
from clmagic._memo import remember
from clmagic.key.options import BuildOptions, parse_options
from clmagic.key.source import check_source, preview

__all__ = ["Options", "Prepared", "prepare"]

#: how many preparations a compiler remembers
PREPARED_MAX = 512
#: build options as callers give them (``BuildOptions``: already exact, from the pyopencl hook)
Options = str | Iterable[str] | BuildOptions | None


@dataclass(frozen=True)
class Prepared:
    """What a source and its options become for one device before any cache is asked
    (remembered per source, options and device; see the module's note)."""

    source: str
    src: bytes
    opts: BuildOptions
    key: str
    headers: tuple[str, ...]
    preview: str
    #: why the cache must be bypassed, or "": includes past what a key covers, or a build no
    #: cached binary can stand for (it reads the clock: :func:`clmagic.key.clock.clock_reason`)
    unkeyable: str
    files: Headers = field(default_factory=Headers)  # what the key covered, re-checked after
    flags: dict[str, str] = field(default_factory=dict)  # the driver's environment flags


def prepare(source: str | bytes, options: Options, info: DeviceInfo,
            memo: OrderedDict[tuple[object, ...], Prepared], lock: threading.Lock) -> Prepared:
    """Check and normalise the source, parse the options, find headers, hash the key; a source
    that reads the clock is marked ``unkeyable`` (built every time, like ccache does).

    Remembered in ``memo`` (under ``lock``): a source that includes nothing has a key that
    depends on the arguments alone (a re-run cell then costs a dict lookup: 0.36 ms → µs on the
    H200 host for silx code); one that includes files is reused while its include search is
    :func:`~clmagic.key.stamps.unchanged` (a ``stat`` a place looked at), else prepared again.
    """
    if not isinstance(options, str | None | BuildOptions):
        options = tuple(options)  # hashable, and a generator is read once
    if isinstance(source, bytearray | memoryview):
        source = bytes(source)
    args: tuple[object, ...] = (source, options, info.fingerprint,
                                *map(os.environ.get, DRIVER_FLAG_VARS))
    prepared = memo.get(args)
    cwd = os.getcwd()
    if prepared is not None and unchanged(prepared.files, cwd):
        return prepared
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
    prepared = Prepared(text, src, opts, key, tuple(name for name, _ in headers),
                        preview(text), unkeyable, headers, flags)
    if headers.reusable and not unkeyable:  # checked by stat on reuse where files are read
        with lock:
            remember(memo, args, prepared, PREPARED_MAX)
    return prepared
