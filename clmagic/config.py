"""Environment variables turned into one settings object (its warnings go through
:mod:`clmagic._warn`)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from clmagic._secret import SECRET_VAR, Secret, read_secret
from clmagic._warn import warn_once
from clmagic.errors import OptionsError

__all__ = ["Settings", "default_cache_dir",
           "REDIS_SCHEMES", "SQLITE_SUFFIXES", "parse_size", "parse_age",
           "DEFAULT_MAX_SIZE", "DEFAULT_MEMORY_MAX", "DEFAULT_HISTORY_MAX", "VARIABLES", "redact"]

#: URL schemes that select the Redis store
REDIS_SCHEMES = ("redis://", "rediss://")
#: file name endings that select the SQLite store
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")

_OFF = {"0", "off", "none", "disable", "disabled", "false", "no"}
_DEFAULT = {"", "1", "default", "on", "true", "yes"}
_TRUE = {"1", "true", "yes", "on"}

# scheme://USERINFO@ (up to the last "@": over-redacting is safe), and password=… parameters
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)(.*)@", re.DOTALL)
_SECRET_PARAM = re.compile(r"([?&;](?:password|passwd|pass|pwd|secret|token)=)[^&;#]*", re.I)


def redact(text: str) -> str:
    """``text`` (a URL, or any setting's value) without its secrets: ``user:password@`` becomes
    ``user:***@``, a lone ``secret@`` becomes ``***@``, ``?password=…`` becomes
    ``?password=***``. Never raises (a malformed URL is redacted as well as a good one)."""
    m = _USERINFO.match(text)
    if m:
        user, sep, _ = m.group(2).partition(":")
        text = f"{m.group(1)}{user + ':***' if sep else '***'}@{text[m.end():]}"
    return _SECRET_PARAM.sub(r"\1***", text) if "=" in text else text

#: size limit of a directory or SQLite cache unless CLMAGIC_CACHE_MAX_SIZE says otherwise
DEFAULT_MAX_SIZE = 1 << 30
#: programs kept in a process's memory (least recently used dropped first)
DEFAULT_MEMORY_MAX = 256
#: trips a process's history keeps (the newest; the older ones are counted, not kept)
DEFAULT_HISTORY_MAX = 10_000

#: setting → the environment variable(s) it is read from, first found wins
VARIABLES: dict[str, tuple[str, ...]] = {
    "cache": ("CLMAGIC_CACHE_DIR",),
    "max_size": ("CLMAGIC_CACHE_MAX_SIZE",),
    "memory_max": ("CLMAGIC_MEMORY_MAX",),
    "history_max": ("CLMAGIC_HISTORY_MAX",),
    "remote": ("CLMAGIC_REMOTE",),
    "remote_ttl": ("CLMAGIC_REMOTE_TTL",),
    "device": ("CLMAGIC_DEVICE", "PYOPENCL_CTX"),
    "record": ("CLMAGIC_RECORD",),
    "debug": ("CLMAGIC_CACHE_DEBUG",),
    "trust": ("CLMAGIC_CACHE_TRUST",),
}

_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(i?)b?\s*$", re.IGNORECASE)
_POWER = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}
_AGE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(s|m|h|d|w)\s*$", re.IGNORECASE)
_AGE_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_size(text: str | int) -> int:
    """Bytes in a size such as ``500M``, ``2G``, ``1.5GiB``, ``64k``, ``4096`` or ``0`` (no
    limit): K, M, G, T are powers of 1000, Ki, Mi, Gi, Ti powers of 1024, as in ccache. A
    negative or malformed size raises :class:`OptionsError` in one line."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise OptionsError(f"size {text} is negative: use 0 for no limit")
        return text
    m = _SIZE.match(str(text))
    if not m:
        what = "is negative" if str(text).strip().startswith("-") else "not understood"
        raise OptionsError(f"size {str(text)!r} {what}: use a number and K, M, G or T "
                           "(e.g. 500M, 2G; Ki, Mi, Gi for powers of 1024; 0 for no limit)")
    base = 1024 if m[3] else 1000
    if m[3] and not m[2]:
        raise OptionsError(f"size {str(text)!r} not understood: 'i' needs a unit (Ki, Mi, Gi)")
    return int(float(m[1]) * base ** _POWER[m[2].lower()])


def parse_age(text: str | float) -> float:
    """Seconds in an age such as ``90s``, ``30m``, ``12h``, ``7d``, ``2w`` (or a number of
    seconds); a negative or malformed age raises :class:`OptionsError` in one line."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text < 0:
            raise OptionsError(f"age {text} is negative")
        return float(text)
    m = _AGE.match(str(text))
    if not m:
        what = "is negative" if str(text).strip().startswith("-") else "not understood"
        raise OptionsError(f"age {str(text)!r} {what}: use a number and s, m, h, d or w "
                           "(e.g. 7d)")
    return float(m[1]) * _AGE_UNIT[m[2].lower()]


def default_cache_dir() -> Path:
    """The per-user cache folder of the platform (``platformdirs.user_cache_dir``)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("clmagic", appauthor=False)) / "programs"


@dataclass(frozen=True)
class Settings:
    """Everything clmagic reads from the environment, read once.

    ``cache`` is the raw store location: a folder path, a SQLite file (``.db``, ``.sqlite``,
    ``.sqlite3``), a ``redis://`` URL, or ``None`` for memory only. ``remote`` is a shared
    store behind it (``CLMAGIC_REMOTE``), ``remote_ttl`` its entries' time to live in seconds.
    ``max_size`` bounds a directory or SQLite cache (and a layered store's local layer) in
    bytes, ``0`` for no limit; ``memory_max`` the programs kept in memory. ``origins`` says
    where each setting came from (an environment variable, or ``default``).
    """

    cache: str | None
    debug: bool = False
    record: str = "summary"
    device: str | None = None
    remote: str | None = None
    remote_ttl: int | None = None
    trust: bool = False
    max_size: int = DEFAULT_MAX_SIZE
    memory_max: int = DEFAULT_MEMORY_MAX
    history_max: int = DEFAULT_HISTORY_MAX
    env: dict[str, str] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    #: the team secret entries are signed with (``CLMAGIC_CACHE_SECRET``); never shown
    secret: Secret | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build settings from ``environ`` (default: ``os.environ``).

        ``CLMAGIC_CACHE_DIR``: unset, empty, ``1`` or ``default`` → the platform cache folder;
        ``0``/``off``/``none``/``disable``/``disabled`` → memory only; anything else → that path
        (a relative one made absolute here, against the working directory of this moment).
        ``CLMAGIC_CACHE_DEBUG=1`` prints one line per cache event. ``CLMAGIC_RECORD``: ``off``
        keeps no history, ``summary`` (the default) one record per build, ``full`` with its
        source. ``CLMAGIC_DEVICE`` (else ``PYOPENCL_CTX``) picks
        the default device. ``CLMAGIC_REMOTE=redis://…`` puts a shared store behind the local one;
        ``CLMAGIC_REMOTE_TTL`` (seconds) expires its entries when unused that long.
        ``CLMAGIC_CACHE_TRUST=1`` uses a cache folder that is world-writable or owned by another
        user (refused otherwise). ``CLMAGIC_CACHE_MAX_SIZE`` (``500M``, ``2G``, ``0`` = no
        limit; default 1 GiB) bounds the cache; ``CLMAGIC_MEMORY_MAX`` (default 256) the
        programs kept in memory; ``CLMAGIC_HISTORY_MAX`` (default 10000) the trips the session
        history keeps (the newest: a long loop of builds must not grow the process without
        bound). A value that cannot be used is warned about once and the default applies.
        ``CLMAGIC_CACHE_SECRET``: the team secret entries are signed with (keyed BLAKE3); stores
        others write then serve only entries signed with it. It is read as bytes, held by a
        :class:`~clmagic._secret.Secret` and shown as ``***`` wherever the variables are shown;
        a blank one is refused with a warning.
        """
        secret, problem = read_secret(environ)  # the bytes of os.environb, checked once
        if problem:
            warn_once(problem)
        env, secret_set = _without_secret(environ)  # no frame holds the secret's text
        origins = _origins(env, secret_set, secret is not None)
        remote, ttl = _remote(env)
        shown = {k: redact(v) for k, v in env.items()
                 if k.startswith(("CLMAGIC_", "PYOPENCL_", "POCL_"))}
        if secret_set:
            shown[SECRET_VAR] = "***" if secret is not None else ""
        return cls(cache=_cache_location(env.get("CLMAGIC_CACHE_DIR")),
                   debug=env.get("CLMAGIC_CACHE_DEBUG", "").strip().lower() in _TRUE,
                   record=_record_level(env.get("CLMAGIC_RECORD", "")),
                   device=env.get("CLMAGIC_DEVICE") or env.get("PYOPENCL_CTX") or None,
                   trust=env.get("CLMAGIC_CACHE_TRUST", "").strip().lower() in _TRUE,
                   remote=remote, remote_ttl=ttl,
                   max_size=_read(env, "CLMAGIC_CACHE_MAX_SIZE", parse_size, DEFAULT_MAX_SIZE,
                                  origins, "max_size"),
                   memory_max=_read(env, "CLMAGIC_MEMORY_MAX", _count, DEFAULT_MEMORY_MAX,
                                    origins, "memory_max"),
                   history_max=_read(env, "CLMAGIC_HISTORY_MAX", _count, DEFAULT_HISTORY_MAX,
                                     origins, "history_max"),
                   env=shown, origins=origins, secret=secret)

    def describe(self) -> list[tuple[str, str, str, str]]:
        """Every setting as (name, variable, value, origin), like ``ccache -p``."""
        rows = []
        for name, names in VARIABLES.items():
            value = getattr(self, name)
            if name == "max_size":
                value = f"{value} bytes" if value else "0 (no limit)"
            elif name == "cache" and value is None:
                value = "memory only"
            rows.append((name, names[0], "" if value is None else redact(str(value)),
                         self.origins.get(name, "default")))
        rows.append(("secret", SECRET_VAR, "***" if self.secret else "",  # never the value
                     self.origins.get("secret", "environment" if self.secret else "default")))
        return rows

    def __repr__(self) -> str:
        cache = redact(self.cache) if self.cache else self.cache
        remote = redact(self.remote) if self.remote else self.remote
        return (f"Settings(cache={cache!r}, debug={self.debug}, record={self.record!r}, "
                f"device={self.device!r}, remote={remote!r}, remote_ttl={self.remote_ttl}, "
                f"trust={self.trust}, max_size={self.max_size}, memory_max={self.memory_max})")


def _without_secret(environ: Mapping[str, str] | None) -> tuple[dict[str, str], bool]:
    """The environment without the secret (its bytes are the :class:`Secret`'s alone: a
    traceback through :meth:`Settings.from_env` with IPython's ``%xmode Verbose`` shows every
    frame's locals), and whether the secret was set."""
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if k != SECRET_VAR}, SECRET_VAR in source


def _cache_location(raw: str | None) -> str | None:
    """``CLMAGIC_CACHE_DIR`` as a store location: unset, empty, ``1`` or ``default`` → the
    platform cache folder; ``0``/``off``/... → ``None`` (memory only); a ``redis://`` URL as
    is; anything else a folder or file, made absolute here (a relative one must not move with
    ``os.chdir``)."""
    value = (raw or "").strip()
    if value.lower() in _OFF:
        return None
    if value.lower() in _DEFAULT:
        return str(default_cache_dir())
    if value.startswith(REDIS_SCHEMES):
        return value
    return os.path.abspath(Path(value).expanduser())


def _remote(env: Mapping[str, str]) -> tuple[str | None, int | None]:
    """``CLMAGIC_REMOTE`` and ``CLMAGIC_REMOTE_TTL`` (each unusable value: one warning, then
    no remote store / no expiry)."""
    remote = (env.get("CLMAGIC_REMOTE") or "").strip()
    if remote and not remote.startswith(REDIS_SCHEMES):
        warn_once(f"CLMAGIC_REMOTE={redact(remote)!r} is not a redis:// or rediss:// URL; "
                  "ignored")
        remote = ""
    ttl_raw = (env.get("CLMAGIC_REMOTE_TTL") or "").strip()
    ttl = int(ttl_raw) if ttl_raw.isdigit() and int(ttl_raw) > 0 else None
    if ttl_raw and ttl is None:
        warn_once(f"CLMAGIC_REMOTE_TTL={ttl_raw!r} is not a positive number of seconds; "
                  "entries do not expire")
    return remote or None, ttl


def _origins(env: Mapping[str, str], secret_set: bool, secret_used: bool) -> dict[str, str]:
    """Where each setting comes from: the first variable of :data:`VARIABLES` that is set,
    else ``default`` (the secret: noted when a blank one was refused)."""
    origins = {}
    for name, names in VARIABLES.items():
        found = [n for n in names if (env.get(n) or "").strip()]
        origins[name] = f"environment ({found[0]})" if found else "default"
    origins["secret"] = (f"environment ({SECRET_VAR})" if secret_used else
                         f"default ({SECRET_VAR} blank: refused)" if secret_set else "default")
    return origins


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


def _count(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise OptionsError(f"{text!r} is not a positive whole number")
    return int(text)


def _read(env: Mapping[str, str], name: str, parse: Callable[[str], int], default: int,
          origins: dict[str, str], setting: str) -> int:
    """``parse(env[name])``, or ``default`` (with one warning, noted in ``origins``) when
    unset or unusable."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        return parse(raw)
    except OptionsError as exc:
        warn_once(f"{name}={raw!r} cannot be used ({exc}); using the default {default}")
        origins[setting] = f"default ({name}={raw!r} not usable)"
        return default
