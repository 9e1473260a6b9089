"""Lifetime statistics: what every process that used a cache counted, per device, kept beside
the cache so they outlive each process (``ccache -s``), reset with :meth:`Counters.zero`.

Design (cheap on the HIT path, correct with many processes, no lock between processes):

- each process writes only its own file, ``<folder>/<host>.<pid>.<token>.cnt``: fixed 64-byte
  slots, one per (device fingerprint, counter), each holding that process's running count and
  value (ms saved, or bytes for evictions) and a CRC-32. An event is one ``pwrite`` of one slot
  into the page cache: no lock, no fsync, no read. A reader never sees a torn slot as a number
  (the CRC fails, the read is retried);
- a reader sums every file and subtracts the baseline that ``zero`` wrote (``zero``, replaced
  whole by a rename), so zeroing never touches another process's file;
- a process folds the files of dead processes of its host into its own when it opens its file:
  it claims each by renaming it (only one claimer wins a rename), adds it to its own slots, and
  removes the claim. The sum is unchanged, so the folder stays small and the baseline valid.

Counter names are the outcomes of :class:`~clmagic.outcome.Outcome` (``HIT``, ``MISS``, ... and
any added later) and ``EVICT``, kept as plain strings: a file may hold a name a newer clmagic
counts, and nothing here depends on which exist.
"""

from __future__ import annotations

import errno
import os
import secrets
import socket
import stat
import struct
import threading
import weakref
import zlib
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from clmagic._fork import after_fork
from clmagic._valid import pid_of
from clmagic._warn import warn_once
from clmagic.store._fs import create_new, read_regular, write_private

__all__ = ["Counters", "EVICT", "MAX_NUMBER", "SLOT", "Tally", "counters_for"]

#: the counter of entries evicted by a size limit (its value: bytes freed)
EVICT = "EVICT"
#: fingerprint, counter name, count, value, CRC-32 of the first 48 bytes
SLOT = struct.Struct("<16s16sdd I 12x")
_BODY = struct.Struct("<16s16sdd")
_CRC = struct.Struct("<I12x")
_SUFFIX = ".cnt"
_CLAIM = ".claim"
_ZERO = "zero"
_MAX_FILE = 1 << 20  # no counter file is larger (16,384 slots)

#: (fingerprint, counter) → [count, value]
Tally = dict[tuple[str, str], list[float]]


def _host() -> str:
    name = socket.gethostname() or "host"
    return "".join(c if c.isalnum() or c == "-" else "_" for c in name)[:40]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _pack(fp: str, name: str, count: float, value: float) -> bytes:
    body = _BODY.pack(fp.encode("ascii", "replace"), name.encode("ascii", "replace"),
                      count, value)
    return body + _CRC.pack(zlib.crc32(body))


#: the largest count or value a slot may hold: a float adds whole numbers exactly up to 2**53
#: (285,000 years of milliseconds saved); anything above, infinite, NaN or negative is damage
MAX_NUMBER = float(1 << 53)


def _usable(number: float) -> bool:
    return 0.0 <= number <= MAX_NUMBER  # False for NaN and ±inf too


def _damaged(path: Path, why: str) -> None:
    warn_once(f"lifetime statistics: {path.name} in {path.parent} {why}; ignored")


def _read(path: Path) -> Tally | None:
    """The slots of one file, or ``None`` when a slot is torn (being written: read again).
    Read the one safe way (:func:`~clmagic.store._fs.read_regular`: a FIFO or a device planted
    in the folder is never waited on); what is not a counter file, and every slot whose numbers
    are not finite, non-negative and bounded, is damage: left out, with one warning."""
    try:
        data, _ = read_regular(path, _MAX_FILE)
    except (FileNotFoundError, NotADirectoryError):
        return {}  # gone (folded by its owner), or no folder yet
    except OSError as exc:  # NotAFile, TooLarge (not a counter file this clmagic wrote), ...
        _damaged(path, f"cannot be read ({exc})")
        return {}
    out: Tally = {}
    for off in range(0, len(data) - SLOT.size + 1, SLOT.size):
        fp, name, count, value, crc = SLOT.unpack_from(data, off)
        if zlib.crc32(data[off : off + _BODY.size]) != crc:
            if not any(data[off : off + SLOT.size]):
                continue  # a slot not written yet (sparse)
            return None
        if not (_usable(count) and _usable(value)):
            _damaged(path, f"holds a count that cannot be right ({count!r}, {value!r})")
            continue
        key = (fp.rstrip(b"\0").decode("ascii", "replace"),
               name.rstrip(b"\0").decode("ascii", "replace"))
        slot = out.setdefault(key, [0.0, 0.0])
        slot[0] += count
        slot[1] += value
    return out


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _add(into: Tally, tally: Tally, sign: float = 1.0) -> None:
    for key, (count, value) in tally.items():
        slot = into.setdefault(key, [0.0, 0.0])
        slot[0] += sign * count
        slot[1] += sign * value


_shared: dict[str, Counters] = {}
_shared_lock = threading.Lock()
_ALL: weakref.WeakSet[Counters] = weakref.WeakSet()


def _after_fork() -> None:
    global _shared_lock
    _shared_lock = threading.Lock()
    for counters in list(_ALL):
        counters.reset_after_fork()


after_fork(_after_fork)


def counters_for(folder: str | os.PathLike[str] | None) -> Counters:
    """The process's counters for ``folder``: one per folder, however many stores are opened
    on it (so a process writes one file, and opens it once)."""
    if folder is None:
        return Counters(None)
    with _shared_lock:
        c = _shared.get(os.fspath(folder))
        if c is None:
            c = _shared[os.fspath(folder)] = Counters(folder)
        return c


class Counters:
    """Lifetime counters in ``folder`` (``None``: not kept, only this session's). Stores share
    one per folder (:func:`counters_for`)."""

    def __init__(self, folder: str | os.PathLike[str] | None):
        self.folder = Path(folder) if folder is not None else None
        self.session: Tally = defaultdict(lambda: [0.0, 0.0])
        self._lock = threading.Lock()
        self._pid = -1
        self._fd: int | None = None
        self._own: Tally = {}
        self._slots: dict[tuple[str, str], int] = {}
        self._todo: Tally = {}  # counted, not written yet
        self._queued = False  # a flush is asked for
        self._broken = folder is None
        _ALL.add(self)

    def reset_after_fork(self) -> None:
        """In a forked child: a new lock (the parent's may have been held); what the parent
        counted and has not written yet is the parent's to write (not twice); the parent's file
        is the parent's (its descriptor closed here: the child makes its own at its first
        event). This session's counts, like the history, are the child's copy."""
        self._lock = threading.Lock()
        self._todo, self._queued = {}, False
        if self._fd is not None:
            try:
                os.close(self._fd)  # the child's copy of the descriptor only
            except OSError:
                pass
        self._fd, self._pid = None, -1

    # -- writing -------------------------------------------------------------------------------

    def add(self, fingerprint: str, name: str, count: float = 1, value: float = 0.0, *,
            later: Callable[[Callable[[], None]], object] | None = None) -> None:
        """Count ``count`` events ``name`` of a device (and ``value``: ms saved, bytes freed).
        This session's count is there at once; the file is written now, or with ``later``
        (e.g. a background thread's submit) by one :meth:`flush` for all the events counted
        until it runs. Never raises: a folder that cannot be written turns lifetime counting
        off, once. ``name`` is an :class:`~clmagic.outcome.Outcome` or :data:`EVICT`; it is
        kept as its plain string, like the names read back from the files."""
        name = str(name)
        with self._lock:
            slot = self.session[(fingerprint, name)]
            slot[0] += count
            slot[1] += value
            if self._broken:
                return
            todo = self._todo.setdefault((fingerprint, name), [0.0, 0.0])
            todo[0] += count
            todo[1] += value
            if later is None:
                self._write_todo()
                return
            if self._queued:
                return  # the flush already asked for writes this one too
            self._queued = True
        later(self.flush)

    def flush(self) -> None:
        """Write what :meth:`add` counted and has not written yet."""
        with self._lock:
            self._write_todo()

    def _write_todo(self) -> None:
        todo, self._todo, self._queued = self._todo, {}, False
        if not todo or self._broken:
            return
        try:
            if self._pid != os.getpid() and not self._open():
                return  # no cache folder yet: nothing made in it unasked
            for key, (count, value) in todo.items():
                own = self._own.setdefault(key, [0.0, 0.0])
                own[0] += count
                own[1] += value
                self._write(key)
        except OSError as exc:
            self._give_up(exc)

    def _give_up(self, exc: OSError) -> None:
        self._broken = True
        if isinstance(exc, PermissionError) or exc.errno == errno.EROFS:
            return  # a read-only cache: the store says so itself
        warn_once(f"lifetime statistics in {self.folder} are not kept "
                  f"({exc.strerror or exc}); this session's still are")

    def _write(self, key: tuple[str, str]) -> None:
        index = self._slots.get(key)
        if index is None:
            index = self._slots[key] = len(self._slots)
        count, value = self._own[key]
        assert self._fd is not None
        os.pwrite(self._fd, _pack(key[0], key[1], count, value), index * SLOT.size)

    def _open(self) -> bool:
        """This process's own file (a forked child makes its own), after folding in the files
        of this host's dead processes; ``False`` while the folder's parent (the cache) does
        not exist yet."""
        assert self.folder is not None
        try:
            self.folder.mkdir(mode=0o700, exist_ok=True)
        except FileNotFoundError:
            return False
        if self._fd is not None and self._pid != os.getpid():
            self._fd = None  # the parent's: never write to it (its slots are the parent's)
        self._own, self._slots = {}, {}
        name = f"{_host()}.{os.getpid()}.{secrets.token_hex(4)}{_SUFFIX}"
        self._fd = create_new(self.folder / name, os.O_RDWR)
        self._pid = os.getpid()
        claims = self._claim_dead()
        for claim in claims:
            _add(self._own, _read(claim) or {})  # a torn slot of a dead writer: damage, skipped
        for key in self._own:
            self._write(key)
        for claim in claims:  # folded: from now on only our own file holds these counts
            try:
                os.unlink(claim)
            except OSError:
                pass
        return True

    def _claim_dead(self) -> list[Path]:
        """Take over the files of this host's processes that are gone (renamed to a claim of
        this process first, so two processes never both take one)."""
        assert self.folder is not None
        host = _host() + "."
        claims = []
        for name in os.listdir(self.folder):
            if not name.startswith(host):
                continue
            path = self.folder / name
            if name.endswith(_CLAIM):  # a claimer died between its claim and its fold
                owner = pid_of(name[: -len(_CLAIM)].rsplit(".", 1)[-1])
                if owner is not None and not _alive(owner) and _regular(path):
                    claims.append(path)
                continue
            parts = name[len(host):].split(".")
            pid = pid_of(parts[0]) if len(parts) == 3 else None
            if not name.endswith(_SUFFIX) or pid is None:
                continue
            if pid == os.getpid() or _alive(pid) or not _regular(path):
                continue  # a live process's, or planted (a FIFO is never claimed nor read)
            claim = self.folder / f"{name}.{os.getpid()}{_CLAIM}"
            try:
                os.rename(path, claim)
            except OSError:
                continue  # another process claimed it first
            claims.append(claim)
        return claims

    # -- reading ---------------------------------------------------------------------------------

    def _raw(self) -> Tally:
        """The sum of every process's file (claims included: a claim's counts are in no other
        file until its claimer has folded it, and then the claim is gone)."""
        total: Tally = {}
        if self.folder is None:
            return total
        with self._lock:
            self._write_todo()
            try:
                names = os.listdir(self.folder)
            except OSError:
                return total
            for name in names:
                if not (name.endswith(_SUFFIX) or name.endswith(_CLAIM)):
                    continue
                for _ in range(5):
                    tally = _read(self.folder / name)
                    if tally is not None:
                        _add(total, tally)
                        break
        return total

    def lifetime(self) -> Tally:
        """Every process's counts since the last :meth:`zero`, per (fingerprint, counter)."""
        return self._since_zero(self._raw())

    def _since_zero(self, total: Tally) -> Tally:
        """``total`` (a :meth:`_raw` sum) less the baseline the last :meth:`zero` wrote."""
        since = {k: list(v) for k, v in total.items()}
        if self.folder is not None:
            _add(since, _read(self.folder / _ZERO) or {}, -1.0)
        return {k: [min(max(c, 0.0), MAX_NUMBER), min(max(v, 0.0), MAX_NUMBER)]
                for k, (c, v) in since.items() if c > 0 or v > 0}

    def zero(self) -> bool:
        """Start the lifetime counts again from zero (this session's counts are kept). Returns
        whether there was anything to zero (no lifetime count above zero: nothing written)."""
        if self.folder is None or not self.folder.is_dir():
            return False  # nothing counted yet
        total = self._raw()
        if not self._since_zero(total):
            return False
        write_private(self.folder / _ZERO,
                      b"".join(_pack(fp, name, c, v) for (fp, name), (c, v) in total.items()),
                      self.folder / f".{_ZERO}.{os.getpid()}.{secrets.token_hex(4)}")
        return True

    def close(self) -> None:
        """Close this process's file (reopened, as a new file, on the next event)."""
        with self._lock:
            self._write_todo()
            if self._fd is not None and self._pid == os.getpid():
                os.close(self._fd)
            self._fd, self._pid = None, -1
