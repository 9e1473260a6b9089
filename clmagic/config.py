"""Environment variables turned into one settings object, and the warn-once channel."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Settings", "default_cache_dir", "warn", "warn_once", "reset_warnings",
           "REDIS_SCHEMES", "SQLITE_SUFFIXES"]

#: URL schemes that select the Redis store
REDIS_SCHEMES = ("redis://", "rediss://")
#: file name endings that select the SQLite store
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")

_OFF = {"0", "off", "none", "disable", "disabled", "false", "no"}
_DEFAULT = {"", "1", "default", "on", "true", "yes"}
_TRUE = {"1", "true", "yes", "on"}

_warned: set[str] = set()


def default_cache_dir() -> Path:
    """The per-user cache folder of the platform (``platformdirs.user_cache_dir``)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("clmagic", appauthor=False)) / "programs"


def warn(message: str) -> None:
    """Print ``clmagic: warning: <message>`` to stderr (every time: for per-cell news)."""
    print(f"clmagic: warning: {message}", file=sys.stderr)


def warn_once(message: str) -> None:
    """Print ``clmagic: warning: <message>`` to stderr, once per process and message."""
    if message in _warned:
        return
    _warned.add(message)
    print(f"clmagic: warning: {message}", file=sys.stderr)


def reset_warnings() -> None:
    """Forget which warnings were shown (tests, or a new settings object)."""
    _warned.clear()


@dataclass(frozen=True)
class Settings:
    """Everything clmagic reads from the environment, read once.

    ``cache`` is the raw store location: a folder path, a SQLite file (``.db``, ``.sqlite``,
    ``.sqlite3``), a ``redis://`` URL, or ``None`` for memory only. ``remote`` is a shared
    store behind it (``CLMAGIC_REMOTE``), ``remote_ttl`` its entries' time to live in seconds.
    """

    cache: str | None
    debug: bool = False
    record: str = "summary"
    device: str | None = None
    remote: str | None = None
    remote_ttl: int | None = None
    trust: bool = False
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        """Build settings from ``environ`` (default: ``os.environ``).

        ``CLMAGIC_CACHE_DIR``: unset, empty, ``1`` or ``default`` → the platform cache folder;
        ``0``/``off``/``none``/``disable``/``disabled`` → memory only; anything else → that path.
        ``CLMAGIC_CACHE_DEBUG=1`` prints one line per cache event. ``CLMAGIC_RECORD``: ``off``
        keeps no history, ``summary`` (the default) one record per build, ``full`` with its
        source. ``CLMAGIC_DEVICE`` (else ``PYOPENCL_CTX``) picks
        the default device. ``CLMAGIC_REMOTE=redis://…`` puts a shared store behind the local one;
        ``CLMAGIC_REMOTE_TTL`` (seconds) expires its entries when unused that long.
        ``CLMAGIC_CACHE_TRUST=1`` uses a cache folder that is world-writable or owned by another
        user (refused otherwise).
        """
        env = dict(os.environ if environ is None else environ)
        raw = env.get("CLMAGIC_CACHE_DIR")
        value = (raw or "").strip()
        if value.lower() in _OFF:
            cache = None
        elif value.lower() in _DEFAULT:
            cache = str(default_cache_dir())
        elif value.startswith(REDIS_SCHEMES):
            cache = value
        else:
            cache = str(Path(value).expanduser())
        debug = env.get("CLMAGIC_CACHE_DEBUG", "").strip().lower() in _TRUE
        record = _record_level(env.get("CLMAGIC_RECORD", ""))
        device = env.get("CLMAGIC_DEVICE") or env.get("PYOPENCL_CTX") or None
        remote = (env.get("CLMAGIC_REMOTE") or "").strip()
        if remote and not remote.startswith(REDIS_SCHEMES):
            warn_once(f"CLMAGIC_REMOTE={remote!r} is not a redis:// or rediss:// URL; ignored")
            remote = ""
        ttl_raw = (env.get("CLMAGIC_REMOTE_TTL") or "").strip()
        ttl = int(ttl_raw) if ttl_raw.isdigit() and int(ttl_raw) > 0 else None
        if ttl_raw and ttl is None:
            warn_once(f"CLMAGIC_REMOTE_TTL={ttl_raw!r} is not a positive number of seconds; "
                      "entries do not expire")
        shown = {k: v for k, v in env.items() if k.startswith(("CLMAGIC_", "PYOPENCL_", "POCL_"))}
        trust = env.get("CLMAGIC_CACHE_TRUST", "").strip().lower() in _TRUE
        return cls(cache=cache, debug=debug, record=record, device=device, trust=trust,
                   remote=remote or None, remote_ttl=ttl, env=shown)


def _record_level(raw: str) -> str:
    """``CLMAGIC_RECORD`` as ``off``, ``summary`` or ``full`` (unknown: ``summary``, warned)."""
    value = raw.strip().lower()
    if value in ("full", "summary"):
        return value
    if value in _OFF:
        return "off"
    if value not in _DEFAULT:
        warn_once(f"CLMAGIC_RECORD={raw.strip()!r} is not off, summary or full; using summary")
    return "summary"
