"""The build trip: memory → store → driver, and the result it hands back."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import NamedTuple

import pyopencl as cl

from . import devices as _devices
from .config import Settings, warn_once
from .devices import DeviceInfo
from .entry import Entry
from .errors import BuildError, ClmagicError, CorruptEntry, DeviceError
from .includes import Unkeyable, find_headers, strip_comments
from .key import cache_key
from .options import BuildOptions, parse_options
from .records import History, Outcome, Record, now
from .store import Store, store_for

__all__ = ["Compiler", "BuildResult", "MAX_SOURCE"]

_DEFAULT_STORE = object()

#: the largest source accepted, in bytes (a bigger cell is almost surely a pasting accident)
MAX_SOURCE = 4 << 20


@dataclass
class BuildResult:
    """What one build trip produced: the program, its kernels, and how it was obtained."""

    program: cl.Program
    kernels: dict[str, cl.Kernel]
    outcome: str
    ms: float
    build_ms: float
    key: str
    device: DeviceInfo
    options: BuildOptions
    context: cl.Context
    queue: cl.CommandQueue
    saved: bool = False
    note: str = ""
    build_log: str = ""
    record: Record | None = field(default=None, repr=False)

    @property
    def saved_ms(self) -> float:
        """Driver build time this trip avoided."""
        return self.record.saved_ms if self.record else 0.0

    def __getitem__(self, name: str) -> cl.Kernel:
        return self.kernels[name]

    def summary(self) -> str:
        """The one-line report, as plain text."""
        from .report import result_text

        return result_text(self)

    def __repr__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        from .report import result_html

        return result_html(self)


_PREPARED_MAX = 512


class _Prepared(NamedTuple):
    source: str
    src: bytes
    opts: BuildOptions
    key: str
    headers: list[tuple[str, bytes]]
    preview: str
    #: why the cache must be bypassed (includes past what a key can cover), else ""
    unkeyable: str = ""


@dataclass
class _Loaded:
    program: cl.Program
    kernels: dict[str, cl.Kernel]
    context: cl.Context
    build_ms: float
    build_log: str


class Compiler:
    """Builds OpenCL programs through an in-memory cache and a persistent store.

    ``Compiler()`` reads its settings from the environment; pass ``settings`` or ``store`` to
    choose explicitly (``store=None`` keeps programs in memory only). With ``CLMAGIC_REMOTE``
    set, the store is a :class:`~clmagic.store.LayeredStore` (local in front of the remote).
    """

    def __init__(
        self, settings: Settings | None = None, store: Store | None | object = _DEFAULT_STORE
    ):
        self.settings = settings or Settings.from_env()
        if store is _DEFAULT_STORE:
            store = store_for(self.settings)
        self.store: Store | None = store  # type: ignore[assignment]
        self.history = History(
            debug=self.settings.debug, keep_source=self.settings.record == "full"
        )
        self.device_spec: str | None = self.settings.device
        self._memory: dict[tuple[str, str], _Loaded] = {}
        self._lock = threading.Lock()  # memory and history; builds themselves run in parallel
        self._prepared: dict[tuple, _Prepared] = {}

    # -- device -------------------------------------------------------------------------------

    def resolve(self, device: object = None) -> tuple[DeviceInfo, cl.Device]:
        """The device for a build: ``device`` if given, else the selected/default device."""
        if device is None or device == "":
            return _devices.default_device(self.device_spec)
        return _devices.resolve_device(device)  # type: ignore[arg-type]

    def select_device(self, spec: object) -> DeviceInfo:
        """Make ``spec`` the device for the following builds; drops in-memory programs of the
        previous device (as an environment switch should)."""
        info, _ = _devices.resolve_device(spec)  # type: ignore[arg-type]
        try:
            old: DeviceInfo | None = self.resolve()[0]
        except DeviceError:  # the previous choice was unusable: nothing of it in memory
            old = None
        self.device_spec = info.spec
        if old is not None and old.fingerprint != info.fingerprint:
            self.forget(old.fingerprint)
        return info

    def forget(self, fingerprint: str | None = None, key: str | None = None) -> int:
        """Drop in-memory programs (all, of one device, or one key); returns how many."""
        with self._lock:
            doomed = [
                k for k in self._memory
                if (fingerprint is None or k[0] == fingerprint) and (key is None or k[1] == key)
            ]
            for k in doomed:
                del self._memory[k]
        return len(doomed)

    # -- the trip -----------------------------------------------------------------------------

    def key(self, source: str | bytes, options: str | list[str] | None = None,
            device: object = None) -> str:
        """The cache key :meth:`build` would use for these arguments (nothing is built)."""
        return self._prepare(source, options, self.resolve(device)[0]).key

    def _prepare(self, source: str | bytes, options, info: DeviceInfo) -> _Prepared:
        """Check and normalise the source, parse the options, find headers, hash the key.

        Remembered for sources that include nothing, whose key depends on the arguments alone
        (a re-run cell then costs a dict lookup: 0.36 ms → µs on the H200 host for silx code).
        """
        if not isinstance(options, (str, type(None))):
            options = tuple(options)  # hashable, and a generator is read once
        if isinstance(source, (bytearray, memoryview)):
            source = bytes(source)
        memo = (source, options, info.fingerprint)
        prepared = self._prepared.get(memo)
        if prepared is not None:
            return prepared
        text, src = _check_source(source)
        opts = parse_options(options)
        try:
            headers = find_headers(text, opts.include_dirs, os.getcwd())
            unkeyable = ""
        except Unkeyable as exc:
            headers, unkeyable = [], str(exc)
        key = cache_key(src, opts.effective, info, headers)
        prepared = _Prepared(text, src, opts, key, headers, _preview(text), unkeyable)
        if "include" not in text:
            with self._lock:
                if len(self._prepared) >= _PREPARED_MAX:
                    self._prepared.pop(next(iter(self._prepared)))
                self._prepared[memo] = prepared
        return prepared

    def build(
        self,
        source: str | bytes,
        options: str | list[str] | None = None,
        device: object = None,
        *,
        context: cl.Context | None = None,
        use_cache: bool = True,
        line_offset: int = 0,
    ) -> BuildResult:
        """Build ``source`` for one device, through the caches.

        ``line_offset`` shifts line numbers in a build log (the magic passes 1 so they match
        the cell). The key covers every header the source may ``#include`` (see
        :mod:`clmagic.includes`), looked up from the current working directory. Raises
        :class:`BuildError` with the driver's log when the build fails, :class:`ClmagicError`
        for a source that cannot be compiled at all (empty, only comments, not UTF-8, NUL
        characters, over :data:`MAX_SOURCE` bytes).
        """
        if context is not None:
            info = _devices.adopt_context(context)
            if info is None:
                raise ClmagicError("clmagic needs a single-device context")
            dev = context.devices[0]
        else:
            info, dev = self.resolve(device)
        ctx, queue = _devices.context_for(info, dev)
        t0 = time.perf_counter()  # the trip, not the one-time context creation
        source, src, opts, key, headers, preview, unkeyable = self._prepare(source, options, info)

        def finish(outcome: str, loaded: _Loaded, saved=False, note="") -> BuildResult:
            ms = (time.perf_counter() - t0) * 1000
            rec = Record(
                time=now(), outcome=outcome, kernels=list(loaded.kernels), ms=ms,
                build_ms=loaded.build_ms, device=info.label, fingerprint=info.fingerprint,
                key=key, options=opts.effective, preview=preview, source=source,
                saved_to_store=saved, note=note,
            )
            with self._lock:
                self.history.add(rec)
            return BuildResult(
                program=loaded.program, kernels=loaded.kernels, outcome=outcome, ms=ms,
                build_ms=loaded.build_ms, key=key, device=info, options=opts, context=ctx,
                queue=queue, saved=saved, note=note, build_log=loaded.build_log, record=rec,
            )

        if not use_cache or unkeyable:
            loaded = self._compile(ctx, dev, info, source, opts, line_offset)
            if unkeyable:
                warn_once(f"not cached: {unkeyable}")
            return finish(Outcome.BYPASS, loaded,
                          note=f"not cached: {unkeyable}" if unkeyable else "cache bypassed")

        mem = self._memory.get((info.fingerprint, key))
        if mem is not None and mem.context == ctx:
            return finish(Outcome.MEMORY, mem, note="memory")

        outcome = Outcome.MISS
        if self.store is not None:
            try:
                entry = self.store.get(info.fingerprint, key)
                if entry is not None:
                    loaded = self._load(ctx, dev, entry, opts)
                    with self._lock:
                        self._memory[(info.fingerprint, key)] = loaded
                    self._record_hit(info.fingerprint, key)
                    origin = entry.meta.get("store", self.store.kind)
                    return finish(Outcome.HIT, loaded, note=f"from {origin} cache")
            except (CorruptEntry, OSError) as exc:
                outcome = Outcome.CORRUPT
                warn_once(f"cache entry {key[:12]} is damaged ({exc}); rebuilding it")
                with self._lock:
                    self.history.event("CORRUPT", key, [], detail=str(exc))
                self.store.delete(info.fingerprint, key)

        loaded = self._compile(ctx, dev, info, source, opts, line_offset)
        with self._lock:
            self._memory[(info.fingerprint, key)] = loaded
        saved, note = False, "cache off (memory only)"
        if self.store is not None:
            binary = _binary_of(loaded.program, dev)
            entry = Entry.create(
                key, info.fingerprint, binary,
                kernels=list(loaded.kernels), options=opts.effective, device=info.device_name,
                platform=info.platform_name, driver=info.driver_version,
                device_version=info.device_version, platform_version=info.platform_version,
                source_bytes=len(src), build_ms=round(loaded.build_ms, 3), created=time.time(),
                build_log=loaded.build_log, headers=[name for name, _ in headers],
            )
            saved = self.store.put(entry)
            note = "saved" if saved else f"not saved ({self.store.reason or 'store refused it'})"
        return finish(outcome, loaded, saved=saved, note=note)

    def _record_hit(self, fingerprint: str, key: str) -> None:
        """Count a store hit (MEMORY hits are not store hits: they live in the history only)."""
        try:
            self.store.record_hit(fingerprint, key)  # type: ignore[union-attr]
        except Exception as exc:  # use counts are advisory; never fail a build over them
            warn_once(f"cache {self.store!r} could not count a hit ({exc})")

    def _compile(self, ctx, dev, info: DeviceInfo, source: str, opts: BuildOptions,
                 line_offset: int) -> _Loaded:
        if not strip_comments(source).strip():  # checked here: a cached source has code
            raise ClmagicError("the source holds only comments: nothing to compile")
        prg = cl._cl._Program(ctx, source)
        t = time.perf_counter()
        try:
            prg._build(options=opts.effective.encode(), devices=[dev])
        except cl.Error as exc:
            log = _log_of(prg, dev) or str(exc)
            raise BuildError(log, options=opts.effective, device=info.label,
                             line_offset=line_offset) from None
        build_ms = (time.perf_counter() - t) * 1000
        return _loaded(ctx, prg, build_ms, _log_of(prg, dev))

    def _load(self, ctx, dev, entry: Entry, opts: BuildOptions) -> _Loaded:
        try:
            prg = cl._cl._Program(ctx, [dev], [entry.binary])
            prg._build(options=opts.effective.encode(), devices=[dev])
            return _loaded(ctx, prg, entry.build_ms, entry.meta.get("build_log", ""))
        except cl.Error as exc:
            raise CorruptEntry(f"the driver refused the stored binary: {exc}") from None


def _check_source(source: str | bytes) -> tuple[str, bytes]:
    """The source as text and as UTF-8 bytes, or a one-line error saying why it cannot be."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        src = bytes(source)
        try:
            text = src.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = src.count(b"\n", 0, exc.start) + 1
            raise ClmagicError(
                f"source is not UTF-8 text: byte 0x{src[exc.start]:02x} on line {line}"
            ) from None
    else:
        text = str(source)
        try:
            src = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            line = text.count("\n", 0, exc.start) + 1
            raise ClmagicError(
                f"source is not UTF-8 text: {text[exc.start]!r} on line {line}"
            ) from None
    if len(src) > MAX_SOURCE:
        raise ClmagicError(
            f"source is {len(src) / 2**20:.1f} MiB, over clmagic's {MAX_SOURCE >> 20} MiB limit "
            "(clmagic.compiler.MAX_SOURCE); nothing compiled"
        )
    if "\0" in text:
        line = text.count("\n", 0, text.index("\0")) + 1
        raise ClmagicError(f"source holds a NUL character on line {line}")
    if not text.strip():
        raise ClmagicError("empty source: nothing to compile")
    text = normalise_source(text)
    return text, text.encode("utf-8")


def _loaded(ctx, prg, build_ms: float, log: str) -> _Loaded:
    program = cl.Program(prg)
    kernels = {k.function_name: k for k in prg.all_kernels()}
    return _Loaded(program, kernels, ctx, build_ms, (log or "").strip())


def _log_of(prg, dev) -> str:
    try:
        return str(prg.get_build_info(dev, cl.program_build_info.LOG) or "").strip()
    except cl.Error:
        return ""


def _binary_of(program: cl.Program, dev: cl.Device) -> bytes:
    devs = program.get_info(cl.program_info.DEVICES)
    binaries = program.get_info(cl.program_info.BINARIES)
    return bytes(binaries[devs.index(dev)])


def normalise_source(source: str) -> str:
    """Strip trailing whitespace from every line and end with one newline.

    IPython does the same to a cell's blank lines, so the library and ``%%clkernel`` give the same
    key for the same text; the driver receives exactly the normalised text (line numbers and
    meaning are unchanged; a backslash continuation still continues)."""
    return "\n".join(line.rstrip() for line in source.splitlines()) + "\n"


def _preview(source: str, width: int = 60) -> str:
    for line in source.splitlines():
        line = line.strip()
        if line and not line.startswith(("//", "/*", "*", "#")):
            return line[:width]
    return source.strip()[:width]
