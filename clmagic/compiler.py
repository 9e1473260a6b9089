"""The build trip: memory → store → driver, and the result it hands back."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from collections.abc import Sequence
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

__all__ = ["Compiler", "BuildResult", "ProgramBuild", "MAX_SOURCE"]

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
_PROGRAMS_MAX = 256


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
    names: list[str] = field(default_factory=list)  # kernel names, also when none were made


@dataclass
class ProgramBuild:
    """What :meth:`Compiler.build_program` hands back: the driver's program (no kernels made)
    and one record per device."""

    program: cl.Program
    outcome: str
    records: list[Record]
    build_log: str = ""


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
        #: programs built for callers' contexts (the pyopencl hook), by their keys
        self._programs: dict[tuple[tuple[str, str], ...], _Loaded] = {}

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
            gone = [
                ks for ks in self._programs
                if any((fingerprint is None or f == fingerprint) and (key is None or k == key)
                       for f, k in ks)
            ]
            for ks in gone:
                del self._programs[ks]
        return len(doomed) + len(gone)

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
        if not isinstance(options, (str, type(None), BuildOptions)):
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
        prep = self._prepare(source, options, info)
        source, _src, opts, key, _headers, _preview, unkeyable = prep

        def finish(outcome: str, loaded: _Loaded, saved=False, note="") -> BuildResult:
            rec = self._record(outcome, t0, info, prep, loaded, saved=saved, note=note)
            return BuildResult(
                program=loaded.program, kernels=loaded.kernels, outcome=outcome, ms=rec.ms,
                build_ms=loaded.build_ms, key=key, device=info, options=opts, context=ctx,
                queue=queue, saved=saved, note=note, build_log=loaded.build_log, record=rec,
            )

        if not use_cache or unkeyable:
            loaded = self._compile(ctx, [dev], info.label, source, opts, line_offset)
            if unkeyable:
                warn_once(f"not cached: {unkeyable}")
            return finish(Outcome.BYPASS, loaded,
                          note=f"not cached: {unkeyable}" if unkeyable else "cache bypassed")

        mem = self._memory.get((info.fingerprint, key))
        if mem is not None and mem.context == ctx:
            return finish(Outcome.MEMORY, mem, note="memory")

        entry, corrupt = self._lookup(info, key)
        if entry is not None:
            try:
                loaded = self._load(ctx, [dev], [entry], opts)
            except CorruptEntry as exc:
                corrupt = self._damaged(info, key, exc)
            else:
                with self._lock:
                    self._memory[(info.fingerprint, key)] = loaded
                self._record_hit(info.fingerprint, key)
                return finish(Outcome.HIT, loaded, note=_served_from(entry, self.store))

        loaded = self._compile(ctx, [dev], info.label, source, opts, line_offset)
        with self._lock:
            self._memory[(info.fingerprint, key)] = loaded
        saved, note = self._save(info, prep, loaded.program,
                                 dev, loaded.build_ms, loaded.build_log, list(loaded.kernels))
        return finish(Outcome.CORRUPT if corrupt else Outcome.MISS, loaded, saved=saved,
                      note=note)

    def build_program(self, context: cl.Context, source: str | bytes,
                      options: str | BuildOptions | None = None,
                      devices: Sequence[cl.Device] | None = None, *,
                      origin: str = "cell") -> ProgramBuild:
        """Build ``source`` in the caller's ``context`` for ``devices`` (default: all of the
        context's), through the caches, making no kernels: what :mod:`clmagic.hook` needs.

        One key and one entry per device: when every device's entry loads, the program is made
        from their binaries (HIT); otherwise it is built from source for all of them and each
        missing device's binary is saved. One record per device, marked with ``origin``.
        Raises :class:`BuildError` / :class:`ClmagicError` as :meth:`build` does.
        """
        devs = list(devices) if devices else list(context.devices)
        infos = [_devices.identity(d) for d in devs]
        t0 = time.perf_counter()
        preps = [self._prepare(source, options, i) for i in infos]
        opts, label = preps[0].opts, infos[0].label

        def finish(outcome: str, loaded: _Loaded, missing=(), saves=(), note="") -> ProgramBuild:
            # ``outcome`` is every device's, or, when ``missing`` is given, that of the missing
            # devices (the others were rebuilt along with them)
            done = dict(saves)
            recs = [self._record(outcome if not missing or i in missing else Outcome.MISS, t0,
                                 info, prep, loaded, saved=done.get(i, (False, ""))[0],
                                 note=done.get(i, (False, note))[1], origin=origin)
                    for i, (info, prep) in enumerate(zip(infos, preps))]
            return ProgramBuild(loaded.program, outcome, recs, loaded.build_log)

        if preps[0].unkeyable:
            warn_once(f"not cached: {preps[0].unkeyable}")
            loaded = self._compile(context, devs, label, preps[0].source, opts, kernels=False)
            return finish(Outcome.BYPASS, loaded, note=f"not cached: {preps[0].unkeyable}")
        keys = tuple((i.fingerprint, p.key) for i, p in zip(infos, preps))
        mem = self._programs.get(keys)
        if (mem is not None and mem.context == context  # and for these very devices (twins
                and mem.program.get_info(cl.program_info.DEVICES) == devs):  # share a key)
            return finish(Outcome.MEMORY, mem, note="memory")

        found = [self._lookup(i, p.key) for i, p in zip(infos, preps)]
        corrupt = any(c for _, c in found)
        entries = [e for e, _ in found if e is not None]
        if len(entries) == len(devs):
            try:
                loaded = self._load(context, devs, entries, opts, kernels=False)
            except CorruptEntry as exc:
                corrupt = any([self._damaged(i, p.key, exc) for i, p in zip(infos, preps)])
            else:
                self._remember(keys, loaded)
                for fp, key in keys:
                    self._record_hit(fp, key)
                return finish(Outcome.HIT, loaded, note=_served_from(entries[0], self.store))

        loaded = self._compile(context, devs, label, preps[0].source, opts, kernels=False)
        self._remember(keys, loaded)
        missing = [i for i, (e, _) in enumerate(found) if e is None or corrupt]
        saves = [(i, self._save(infos[i], preps[i], loaded.program, devs[i], loaded.build_ms,
                                _log_of(loaded.program, devs[i]), loaded.names, origin))
                 for i in missing]
        return finish(Outcome.CORRUPT if corrupt else Outcome.MISS, loaded, missing, saves,
                      note="built with the other devices")

    def _remember(self, keys: tuple[tuple[str, str], ...], loaded: _Loaded) -> None:
        with self._lock:
            if len(self._programs) >= _PROGRAMS_MAX:
                self._programs.pop(next(iter(self._programs)))
            self._programs[keys] = loaded

    def _record(self, outcome: str, t0: float, info: DeviceInfo, prep: _Prepared,
                loaded: _Loaded, *, saved: bool = False, note: str = "",
                origin: str = "cell") -> Record:
        """The trip's record, added to the history."""
        rec = Record(
            time=now(), outcome=outcome, kernels=list(loaded.names),
            ms=(time.perf_counter() - t0) * 1000, build_ms=loaded.build_ms, device=info.label,
            fingerprint=info.fingerprint, key=prep.key, options=prep.opts.effective,
            preview=prep.preview, source=prep.source, saved_to_store=saved, note=note,
            origin=origin,
        )
        with self._lock:
            self.history.add(rec)
        return rec

    def _lookup(self, info: DeviceInfo, key: str) -> tuple[Entry | None, bool]:
        """The stored entry of ``key`` (``None`` when there is none) and whether a damaged one
        was found (reported, deleted, rebuilt by the caller)."""
        if self.store is None:
            return None, False
        try:
            return self.store.get(info.fingerprint, key), False
        except (CorruptEntry, OSError) as exc:
            return None, self._damaged(info, key, exc)

    def _damaged(self, info: DeviceInfo, key: str, exc: Exception) -> bool:
        warn_once(f"cache entry {key[:12]} is damaged ({exc}); rebuilding it")
        with self._lock:
            self.history.event("CORRUPT", key, [], detail=str(exc))
        if self.store is not None:
            self.store.delete(info.fingerprint, key)
        return True

    def _save(self, info: DeviceInfo, prep: _Prepared, program: cl.Program | cl._cl._Program,
              dev: cl.Device, build_ms: float, log: str, kernels: list[str],
              origin: str = "cell") -> tuple[bool, str]:
        """Store the binary ``program`` holds for ``dev``; returns (saved, note)."""
        if self.store is None:
            return False, "cache off (memory only)"
        entry = Entry.create(
            prep.key, info.fingerprint, _binary_of(program, dev),
            kernels=kernels, options=prep.opts.effective, device=info.device_name,
            platform=info.platform_name, driver=info.driver_version,
            device_version=info.device_version, platform_version=info.platform_version,
            source_bytes=len(prep.src), build_ms=round(build_ms, 3), created=time.time(),
            build_log=log, headers=[name for name, _ in prep.headers], origin=origin,
        )
        saved = self.store.put(entry)
        return saved, "saved" if saved else f"not saved ({self.store.reason or 'store refused it'})"

    def _record_hit(self, fingerprint: str, key: str) -> None:
        """Count a store hit (MEMORY hits are not store hits: they live in the history only)."""
        try:
            self.store.record_hit(fingerprint, key)  # type: ignore[union-attr]
        except Exception as exc:  # use counts are advisory; never fail a build over them
            warn_once(f"cache {self.store!r} could not count a hit ({exc})")

    def _compile(self, ctx, devs: list, label: str, source: str, opts: BuildOptions,
                 line_offset: int = 0, kernels: bool = True) -> _Loaded:
        """Build from source for ``devs`` in one driver call."""
        if not strip_comments(source).strip():  # checked here: a cached source has code
            raise ClmagicError("the source holds only comments: nothing to compile")
        prg = cl._cl._Program(ctx, source)
        t = time.perf_counter()
        try:
            prg._build(options=opts.effective.encode(), devices=devs)
        except cl.Error as exc:
            log = "\n".join(filter(None, (_log_of(prg, d) for d in devs))) or str(exc)
            raise BuildError(log, options=opts.effective, device=label,
                             line_offset=line_offset) from None
        build_ms = (time.perf_counter() - t) * 1000
        return _loaded(ctx, prg, build_ms, "\n".join(filter(None, (_log_of(prg, d) for d in devs))),
                       kernels)

    def _load(self, ctx, devs: list, entries: list[Entry], opts: BuildOptions,
              kernels: bool = True) -> _Loaded:
        """The program made from the entries' binaries, one per device of ``devs``."""
        try:
            prg = cl._cl._Program(ctx, devs, [e.binary for e in entries])
            prg._build(options=opts.effective.encode(), devices=devs)
        except cl.Error as exc:
            raise CorruptEntry(f"the driver refused the stored binary: {exc}") from None
        log = entries[0].meta.build_log
        return _loaded(ctx, prg, entries[0].build_ms, log, kernels)


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


def _loaded(ctx, prg, build_ms: float, log: str, kernels: bool = True) -> _Loaded:
    """``kernels=False`` makes no kernel objects (the pyopencl hook hands the program back
    and pyopencl makes the kernels it needs)."""
    program = cl.Program(prg)
    if kernels:
        made = {k.function_name: k for k in prg.all_kernels()}
        names = list(made)
    else:
        made = {}
        names = [n for n in str(prg.get_info(cl.program_info.KERNEL_NAMES)).split(";") if n]
    return _Loaded(program, made, ctx, build_ms, (log or "").strip(), names)


def _served_from(entry: Entry, store: Store | None) -> str:
    return f"from {entry.usage.store or (store.kind if store else '')} cache"


def _log_of(prg, dev) -> str:
    try:
        return str(prg.get_build_info(dev, cl.program_build_info.LOG) or "").strip()
    except cl.Error:
        return ""


def _binary_of(program: cl.Program | cl._cl._Program, dev: cl.Device) -> bytes:
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
