"""The Redis store: a cache shared by every machine of a team.

One hash per entry under ``clmagic:v<format>:<fingerprint>:<key>`` (fields ``meta`` JSON,
``binary``, ``hits``, ``last_used``), a set of keys per fingerprint (``…:<fingerprint>:index``)
and a set of fingerprints (``clmagic:v<format>:devices``), so listing never runs ``KEYS *``.
Every call is bounded by a short socket timeout and never retried: the first time the server is
down, slow or gone, the store is skipped for the rest of the process with one warning.
The ``redis`` client is imported only when a Redis store is opened (extra ``clmagic[redis]``).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from clmagic._valid import count_or, spelled_number
from clmagic._warn import warn_once
from clmagic.config import REDIS_SCHEMES, redact
from clmagic.entry import FORMAT_VERSION, Entry, Usage, parse_json, verified
from clmagic.errors import CorruptEntry
from clmagic.store.base import Store, valid_name

__all__ = ["RedisStore", "SCHEMES"]

SCHEMES = REDIS_SCHEMES
PREFIX = f"clmagic:v{FORMAT_VERSION}"
CHUNK = 500
T = TypeVar("T")

# count a hit only on an entry that exists (no stray hashes), sliding its time to live
_HIT = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'hits', 1)
  redis.call('HSET', KEYS[1], 'last_used', ARGV[1])
  if tonumber(ARGV[2]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
  return 1
end
return 0
"""


class RedisStore(Store):
    """Entries in a Redis server (see the module docstring). ``ttl`` (seconds) expires entries
    not used for that long; ``timeout`` bounds each call."""

    kind = "redis"
    shared = True

    def __init__(self, url: str, ttl: int | None = None, timeout: float = 1.0):
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        super().__init__()
        self.url = url
        self.ttl = int(ttl) if ttl else 0
        self.available = True
        self._errors: tuple[type[BaseException], ...] = (
            redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
        self._response_error = redis.exceptions.ResponseError
        self._watch_error = redis.exceptions.WatchError
        self.client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=min(timeout, 0.5),
            retry=Retry(NoBackoff(), 0), retry_on_timeout=False, health_check_interval=0,
        )
        self._hit = self.client.register_script(_HIT)
        pool = self.client.connection_pool  # a bad URL parameter fails here, not on every build
        pool.connection_class(**pool.connection_kwargs)

    @classmethod
    def open(cls, url: str, ttl: int | None = None) -> RedisStore | None:
        """A store at ``url``; ``None`` after one warning when the client is not installed or
        the URL is malformed. The server is first contacted on first use."""
        try:
            return cls(url, ttl=ttl)
        except ImportError:
            warn_once(f"{redact(url)} needs the Redis client: pip install 'clmagic[redis]'; "
                      "not using it")
        except Exception as exc:  # a malformed URL: one line, then the build goes on without it
            warn_once(f"cannot use {redact(url)} as a cache ({redact(str(exc))})")
        return None

    @property
    def location(self) -> str:
        return redact(self.url)

    def _name(self, fingerprint: str, key: str) -> str:
        self._check_name(fingerprint, key)
        return f"{PREFIX}:{fingerprint}:{key}"

    @staticmethod
    def _index(fingerprint: str) -> str:
        return f"{PREFIX}:{fingerprint}:index"

    def _down(self, exc: BaseException) -> None:
        if self.available:
            self.available = self._writable = False  # reads stop too: not only writes
            self._reason = f"server unreachable ({type(exc).__name__}: {exc})"
            warn_once(f"remote cache {self.location} is unreachable or too slow ({exc}); "
                      "skipping it for the rest of this process")
            try:
                self.client.connection_pool.disconnect()
            except Exception:  # noqa: BLE001 - already giving up on this server
                pass

    def _run(self, call: Callable[[Any], T], default: T) -> T:
        """``call(client)`` unless the server is known down; on a connection problem, mark it
        down and return ``default``."""
        if not self.available:
            return default
        try:
            return call(self.client)
        except self._errors as exc:
            self._down(exc)
            return default

    def _write(self, call: Callable[[Any], T], default: T) -> T:
        if not self.writable:
            return default
        try:
            return self._run(call, default)
        except self._response_error as exc:  # e.g. OOM, a read-only replica
            self._disable_writes(str(exc), f"remote cache {self.location} refused a write "
                                 f"({exc}); nothing more is saved there in this process")
            return default

    # -- the contract -------------------------------------------------------------------------

    def get(self, fingerprint: str, key: str) -> Entry | None:
        name = self._name(fingerprint, key)
        try:
            got = self._run(lambda c: c.hmget(name, "meta", "binary", "hits", "last_used"), None)
        except self._response_error as exc:
            raise CorruptEntry(f"redis: {exc}") from None
        if got is None or (got[0] is None and got[1] is None):
            return None
        raw, binary, hits, last_used = got
        size = sum(len(v) for v in (raw, binary) if isinstance(v, bytes))
        usage = Usage(hits=_int(hits), last_used=_float(last_used), stored_bytes=size,
                      store=self.kind)
        return self._vet(verified(parse_json(raw), binary, key, fingerprint, usage))

    def put_many(self, entries: Iterable[Entry]) -> int:
        """Write several entries in one pipelined round trip; returns how many were stored."""
        batch = [self._sealed(e) for e in entries]
        now = time.time()

        def write(c: Any) -> int:
            pipe = c.pipeline(transaction=False)
            for e in batch:
                if e.binary is None:
                    raise ValueError("cannot store an entry without its binary")
                name = self._name(e.fingerprint, e.key)
                meta = json.dumps(e.meta.to_json(), separators=(",", ":"), sort_keys=True)
                pipe.delete(name)
                pipe.hset(name, mapping={"meta": meta, "binary": e.binary, "hits": 0,
                                         "last_used": now})
                if self.ttl:
                    pipe.expire(name, self.ttl)
                pipe.sadd(self._index(e.fingerprint), e.key)
                pipe.sadd(f"{PREFIX}:devices", e.fingerprint)
                if valid_name(e.fingerprint, e.meta.code_key):
                    pipe.set(self._code(e.fingerprint, e.meta.code_key), e.key,
                             ex=self.ttl or None)
            pipe.execute()
            return len(batch)

        return self._write(write, 0) if batch else 0

    @staticmethod
    def _code(fingerprint: str, code_key: str) -> str:
        return f"{PREFIX}:{fingerprint}:code:{code_key}"

    def find_code(self, fingerprint: str, code_key: str) -> Entry | None:
        """The entry the ``…:code:<code key>`` string names, if it is there and really of that
        code (one round trip more than :meth:`get`)."""
        if not valid_name(fingerprint, code_key):
            return None
        try:
            key = self._run(lambda c: c.get(self._code(fingerprint, code_key)), None)
        except self._response_error:
            return None
        if not isinstance(key, bytes) or len(key) != 64:
            return None
        return self._code_target(fingerprint, code_key, key.decode("ascii", "replace"))

    def record_hit(self, fingerprint: str, key: str, when: float | None = None) -> None:
        """Count a hit in the entry's hash (the binary field is not written). Counts are
        advisory: a refused count (out of memory, a read-only replica, scripts disabled) is
        dropped with one warning and never turns writes off."""
        if not self.writable:
            return
        name = self._name(fingerprint, key)
        try:
            self._run(lambda c: self._hit(keys=[name], args=[when or time.time(), self.ttl],
                                            client=c), 0)
        except self._response_error as exc:
            warn_once(f"remote cache {self.location} did not count a hit ({exc})")

    def delete(self, fingerprint: str, key: str) -> bool:
        name = self._name(fingerprint, key)

        def drop(c: Any) -> bool:
            pipe = c.pipeline(transaction=False)
            pipe.hget(name, "meta")
            pipe.delete(name)
            pipe.srem(self._index(fingerprint), key)
            raw, deleted, _ = pipe.execute()
            code = _code_of(raw) if deleted and isinstance(raw, bytes) else ""
            if valid_name(fingerprint, code):
                self._drop_code(c, self._code(fingerprint, code), key)
            return bool(deleted)

        return self._write(drop, False)

    def _drop_code(self, c: Any, name: str, key: str) -> None:
        """Delete the code string ``name`` if it still names ``key`` (watched: a newer entry of
        the same code, saved meanwhile by another process, keeps its index)."""
        with c.pipeline() as pipe:
            try:
                pipe.watch(name)
                if pipe.get(name) == key.encode():
                    pipe.multi()
                    pipe.delete(name)
                    pipe.execute()
            except self._watch_error:
                pass

    def _fingerprints(self, fingerprint: str | None) -> list[str]:
        if fingerprint:
            return [fingerprint]
        return self._members(f"{PREFIX}:devices")

    def _keys(self, fingerprint: str) -> list[str]:
        return self._members(self._index(fingerprint))

    def _members(self, name: str) -> list[str]:
        try:
            raw: set[bytes] = self._run(lambda c: c.smembers(name), set())
        except self._response_error:  # not a set: nothing listable there
            return []
        return sorted(m.decode("utf-8", "replace") for m in raw)

    def _fetch(self, fingerprint: str, keys: list[str], fields: tuple[str, ...]) -> list[Any]:
        def fetch(c: Any) -> list[Any]:
            pipe = c.pipeline(transaction=False)
            for k in keys:
                name = f"{PREFIX}:{fingerprint}:{k}"
                pipe.hmget(name, *fields)
                pipe.hstrlen(name, "binary")
            results: list[Any] = pipe.execute(raise_on_error=False)
            return results

        return self._run(fetch, [])

    def entries(self, fingerprint: str | None = None) -> Iterator[Entry]:
        for fp in self._fingerprints(fingerprint):
            keys = self._keys(fp)
            for start in range(0, len(keys), CHUNK):
                chunk = keys[start : start + CHUNK]
                got = self._fetch(fp, chunk, ("meta", "hits", "last_used"))
                gone = []
                for i, k in enumerate(chunk[: len(got) // 2]):
                    fields, size = got[2 * i], got[2 * i + 1]
                    if isinstance(fields, Exception) or fields[0] is None:
                        gone.append(k)  # expired or removed behind the index's back
                        continue
                    try:
                        meta = parse_json(fields[0])
                    except CorruptEntry:
                        continue
                    if meta.key != k or meta.fingerprint != fp:
                        continue
                    yield Entry(meta, Usage(hits=_int(fields[1]), last_used=_float(fields[2]),
                                            stored_bytes=len(fields[0]) + _int(size),
                                            store=self.kind))
                if gone:
                    self._write(functools.partial(_srem, self._index(fp), gone), 0)

    def clear(self, fingerprint: str | None = None) -> tuple[int, int]:
        count = freed = 0
        for fp in self._fingerprints(fingerprint):
            keys = self._keys(fp)
            for start in range(0, len(keys), CHUNK):
                chunk = keys[start : start + CHUNK]
                got = self._fetch(fp, chunk, ("meta",))
                names = [f"{PREFIX}:{fp}:{k}" for k in chunk]
                if self._write(functools.partial(_delete, names), -1) < 0:
                    return count, freed
                codes = []
                for i in range(len(got) // 2):
                    fields, size = got[2 * i], got[2 * i + 1]
                    if not isinstance(fields, Exception) and fields[0] is not None:
                        count += 1
                        freed += len(fields[0]) + _int(size)
                        codes.append(_code_of(fields[0]))
                codes = [self._code(fp, c) for c in codes if valid_name(fp, c)]
                if codes:
                    self._write(functools.partial(_delete, codes), 0)
            self._write(functools.partial(_delete, [self._index(fp)]), 0)
            self._write(functools.partial(_srem, f"{PREFIX}:devices", [fp]), 0)
        return count, freed


def _srem(name: str, members: list[str], c: Any) -> int:
    return int(c.srem(name, *members))


def _delete(names: list[str], c: Any) -> int:
    return int(c.delete(*names))


def _code_of(raw: bytes) -> str:
    """The code key in an entry's stored metadata, "" when it has none or cannot be read."""
    try:
        return parse_json(raw).code_key
    except CorruptEntry:
        return ""


def _int(value: Any) -> int:
    """A usage count of the hash (hits, size): ``0`` where damaged (the contract's reader)."""
    return count_or(value)


def _float(value: Any) -> float | None:
    """A usage time of the hash: ``None`` where damaged (the contract's reader)."""
    try:
        return spelled_number(value, "a Redis usage field")
    except CorruptEntry:
        return None
