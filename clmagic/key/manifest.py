"""Preparations remembered across processes: ccache's direct mode for clmagic's first step.

A fresh process (a test suite's child, a notebook's new kernel) used to prepare every source
again before its first lookup: check and normalise it, search its includes, read the headers,
hash the key — a third of a HIT's own work. The manifest is a small file in the store's
lifetime statistics' folder that maps what a caller gave (the source as given, the options as given,
the device's fingerprint, the driver's environment flags) to what preparing it found: the key,
whether the text was normalised, and every place the include search looked, with the identity
of each file it read (:mod:`clmagic.key.stamps`). A later process that is given the same
arguments takes the key from here while a ``stat`` of each place finds what was found then
(:func:`~clmagic.key.stamps.unchanged`, with ccache's "too new" rule); anything else is
prepared again, as before. So the key served is the one a full preparation would compute.

Trust follows ccache's: the file lives in the user's own private cache folder and is trusted to
its permissions (one that others can write, or someone else's, is not read). Each line carries
an XXH3-128 checksum of itself, so a torn or damaged line is a line not there. The first line
names the format and the code that prepared (clmagic's version and the stamps of the modules of
this package): a file of another version is not read, and the next line written starts a new one.

Lines are appended (one ``write`` of ``O_APPEND``: writers in several processes do not mix
lines); past :data:`MAX_BYTES` the file is rewritten with its newest lines (a line another
process appends meanwhile may be lost: that source is prepared again).
"""

from __future__ import annotations

import json
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

import xxhash

from clmagic._valid import MAX_WHOLE, Fields, load_json, whole
from clmagic._version import __version__
from clmagic._warn import warn_once
from clmagic.errors import CorruptEntry
from clmagic.key.stamps import Probe
from clmagic.store._fs import open_file, read_regular, write_private

__all__ = ["Manifest", "Remembered", "MAX_BYTES", "FORMAT"]

#: the format of a manifest file (its first line, with :func:`code_stamp`)
FORMAT = "clmagic-manifest-2"
#: past this size the file is rewritten with its newest half
MAX_BYTES = 1 << 20
_NAME = 32  # hex digits of a line's name, then as many of its checksum


@dataclass(frozen=True)
class Remembered:
    """What preparing a source found, short of the text and the header contents: the key, and
    what :func:`~clmagic.key.stamps.unchanged` checks before the key is trusted again."""

    key: str
    #: the text is :func:`~clmagic.key.source.normalise_source` of the source as given
    normalised: bool
    names: tuple[str, ...]  # the headers read, as :attr:`Prepared.headers` names them
    static: bool  # the source and options name no file: nothing the folders hold matters
    probes: dict[str, Probe]
    cwd: str
    options: str  # what the include search was given as the driver's options
    preview: str  # the text's first line of code (:func:`~clmagic.key.source.preview`)
    size: int  # the text's length in UTF-8 bytes


_code: str | None = None


def code_stamp() -> str:
    """clmagic's version and the size and mtime of every module of this package, the code
    that prepares (a changed module is a new manifest: what it remembered may no longer be
    what preparing finds)."""
    global _code
    if _code is None:
        folder = Path(__file__).parent
        parts = [__version__]
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py"):
                st = os.stat(folder / name)
                parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
        _code = xxhash.xxh3_128_hexdigest(" ".join(parts).encode())
    return _code


def name_of(args: tuple[object, ...]) -> bytes | None:
    """The name of a preparation's arguments (the source as given, then options, device
    fingerprint and driver flags, each a ``str``, ``bytes``, ``None`` or a value whose ``repr``
    says all of it); ``None`` for a source that is not text or bytes."""
    source, rest = args[0], args[1:]
    if isinstance(source, str):
        head = b"s" + source.encode("utf-8", "surrogatepass")
    elif isinstance(source, bytes):
        head = b"b" + source
    else:
        return None
    h = xxhash.xxh3_128(head)
    h.update(b"\0" + repr(rest).encode("utf-8", "surrogatepass"))
    return h.hexdigest().encode()


class Manifest:
    """The manifest file at ``path`` (``None``: remembered in this process only, by the caller's
    memo). Lines are read once per process, each checked and decoded when asked for."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lines: dict[bytes, bytes] | None = None
        self._size = 0
        self._stale = False  # the file is of another format or code: the next add replaces it
        self._waiting: list[bytes] = []  # lines added before the store's folder was made

    def forget(self) -> None:
        """Read the file again when next asked (as a new process would)."""
        self._lines = None

    def get(self, name: bytes) -> Remembered | None:
        """What was remembered under ``name``, or ``None`` (nothing, or a line that fails its
        checksum or does not decode)."""
        if self.path is None:
            return None
        if self._lines is None:
            self._lines = self._read()
        line = self._lines.get(name)
        if line is None or _checksum(name, line[2 * _NAME:]) != line[_NAME:2 * _NAME]:
            return None
        try:
            return _decode(line[2 * _NAME:])
        except CorruptEntry:
            return None

    def add(self, name: bytes, rem: Remembered) -> None:
        """Append ``rem`` under ``name`` (silently nothing where the file cannot be written:
        the cost is a preparation in the next process)."""
        if self.path is None:
            return
        if self._lines is None:
            self._lines = self._read()
        body = json.dumps(_encode(rem), separators=(",", ":")).encode()
        line = name + _checksum(name, body) + body
        self._lines[name] = line
        self._waiting.append(line)
        self.write_waiting()

    def write_waiting(self) -> None:
        """Write the lines added since the last write that could be made (the store's folder
        is made by its first save, after the first preparation: :mod:`clmagic.trip.save`
        calls this once a save is done)."""
        if not self._waiting or self.path is None:
            return
        lines, self._waiting = self._waiting, []
        try:
            if self._stale or self._size + sum(map(len, lines)) > MAX_BYTES:
                self._rewrite()
            else:
                self._append(b"".join(line + b"\n" for line in lines))
        except FileNotFoundError:  # no folder yet
            self._waiting[:0] = lines
        except OSError:  # not writable, a folder in the way, ...: the next process prepares
            return

    def _read(self) -> dict[bytes, bytes]:
        """The file's lines by name, newest last; empty where it is missing, unreadable, not
        the user's own, writable by others, or of another format or code."""
        assert self.path is not None
        try:
            data, st = read_regular(self.path, 2 * MAX_BYTES)
        except FileNotFoundError:
            return {}
        except OSError:  # a FIFO, a folder, a giant: replaced by the next add
            self._stale = True
            return {}
        if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            warn_once(f"cache manifest {self.path} is not private to you: it is not used")
            self._stale = True
            return {}
        lines = data.split(b"\n")
        if lines[0] != self._head():
            self._stale = True
            return {}
        self._size = len(data)
        return {line[:_NAME]: line for line in lines[1:] if len(line) > 2 * _NAME}

    def _head(self) -> bytes:
        return f"{FORMAT} {code_stamp()}".encode()

    def _append(self, data: bytes) -> None:
        assert self.path is not None
        fresh = self._size == 0
        fd = self._open(os.O_WRONLY | os.O_APPEND | os.O_CREAT, self.path)
        try:
            if fresh and os.fstat(fd).st_size == 0:
                data = self._head() + b"\n" + data
            os.write(fd, data)  # one write: lines of other processes are not interleaved
            self._size = os.fstat(fd).st_size
        finally:
            os.close(fd)

    def _rewrite(self) -> None:
        """Replace the file by one of this format and code with the newest lines that fill
        half of :data:`MAX_BYTES`."""
        assert self.path is not None and self._lines is not None
        keep: list[bytes] = []
        room = MAX_BYTES // 2
        for line in reversed(self._lines.values()):
            room -= len(line) + 1
            if room < 0:
                break
            keep.append(line)
        self._lines = {line[:_NAME]: line for line in reversed(keep)}
        data = b"\n".join([self._head(), *self._lines.values()]) + b"\n"
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        self.path.parent.mkdir(mode=0o700, exist_ok=True)  # FileNotFoundError: no store yet
        write_private(self.path, data, tmp)
        self._size, self._stale = len(data), False

    @staticmethod
    def _open(flags: int, path: Path) -> int:
        """A descriptor of the regular file ``path`` (:func:`~clmagic.store._fs.open_file`:
        0600, no link followed, never blocking on a FIFO); its folder is made (0700) where the
        folder above it, the store's, exists (a directory store's is made by its first save,
        not here)."""
        try:
            return open_file(path, flags)[0]
        except FileNotFoundError:
            path.parent.mkdir(mode=0o700, exist_ok=True)  # FileNotFoundError: no store yet
            return open_file(path, flags)[0]


def _checksum(name: bytes, body: bytes) -> bytes:
    """A line's XXH3-128 over its name and body: a damaged name is a damaged line too."""
    return xxhash.xxh3_128_hexdigest(name + b" " + body).encode()


def _encode(rem: Remembered) -> dict[str, object]:
    return {"k": rem.key, "n": rem.normalised, "h": list(rem.names), "s": rem.static,
            "p": [[path, list(p) if isinstance(p, tuple) else p]
                  for path, p in rem.probes.items()],
            "c": rem.cwd, "o": rem.options, "v": rem.preview, "b": rem.size}


def _decode(raw: bytes) -> Remembered:
    """A :class:`Remembered` from its JSON line, every field read through the contract's
    :class:`~clmagic._valid.Fields` (:class:`~clmagic.errors.CorruptEntry` for anything else)."""
    d = Fields(load_json(raw, "a manifest line"), "a manifest line")
    probes = d.doc.get("p")
    if not isinstance(probes, list):
        raise CorruptEntry("a manifest line's probes are not a list")
    return Remembered(d.text("k"), d.doc.get("n") is True, d.texts("h"), d.doc.get("s") is True,
                      dict(_probe(item) for item in probes), d.text("c"), d.text("o"),
                      d.text("v"), d.whole("b"))


def _probe(item: object) -> tuple[str, Probe]:
    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
        raise CorruptEntry("a manifest line holds something that is not a probe")
    path, found = item
    if found is None or isinstance(found, str):
        return path, found
    if isinstance(found, list) and len(found) == 5:
        # device, inode (unsigned 64-bit), size, times in ns (before 1970: negative)
        a, b, c, d, e = (whole(v, "a probe's stamp", -MAX_WHOLE, 1 << 64) for v in found)
        return path, (a, b, c, d, e)
    raise CorruptEntry("a manifest line holds something that is not a probe")
