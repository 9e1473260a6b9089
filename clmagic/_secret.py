"""The team secret (``CLMAGIC_CACHE_SECRET``): read as bytes once, checked in one line, and held
by a :class:`Secret` that signs but never shows what it holds.

Why a type of its own: a secret passed around as ``bytes`` or ``str`` shows up wherever a value
is shown — a ``repr``, a DataFrame of settings, a log line, and the frame locals that IPython's
``%xmode Verbose`` prints with every traceback. A :class:`Secret` shows ``Secret(***)`` in all of
them; the raw bytes live only inside it, and what leaves it is a signature. It is not pickled
either (a pickle holds the bytes in clear), except to clmagic's own worker processes
(:func:`dumps_for_children`, for the worker pool of ``warm`` and sweeps).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import NoReturn

__all__ = ["Secret", "SECRET_VAR", "read_secret", "dumps_for_children"]

#: the variable that holds the team secret (never printed)
SECRET_VAR = "CLMAGIC_CACHE_SECRET"
_LABEL = b"clmagic secret identity"  # what two secrets are compared by (never the bytes)


#: the context the entry signature's BLAKE3 key is derived from the secret with
MAC_CONTEXT = "clmagic 2026 entry signature"


class Secret:
    """A team secret: :meth:`mac` gives the keyed BLAKE3 of some bytes (entry signatures),
    :meth:`sign` their HMAC-SHA256; ``repr``, ``str`` and formatting show ``Secret(***)``; two
    are equal when they hold the same bytes."""

    __slots__ = ("__key", "__mac_key")

    def __init__(self, key: bytes) -> None:
        self.__key = bytes(key)
        self.__mac_key: bytes | None = None  # derived at the first mac (blake3 loads then)

    def mac(self, *parts: bytes | bytearray | memoryview) -> str:
        """The hex keyed BLAKE3 of ``parts`` in turn, with a 32-byte key derived from this
        secret (BLAKE3's key derivation, context :data:`MAC_CONTEXT`): BLAKE3's keyed mode is a
        MAC, and over a megabyte binary it is several times faster than HMAC-SHA256."""
        import blake3

        if self.__mac_key is None:
            self.__mac_key = blake3.blake3(self.__key, derive_key_context=MAC_CONTEXT).digest()
        h = blake3.blake3(key=self.__mac_key)
        for part in parts:
            h.update(part)
        return h.hexdigest()

    def sign(self, data: bytes) -> str:
        """The hex HMAC-SHA256 of ``data`` with this secret."""
        return hmac.new(self.__key, data, hashlib.sha256).hexdigest()

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self.sign(_LABEL), other.sign(_LABEL))

    def __hash__(self) -> int:
        return hash(self.sign(_LABEL))

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Secret is not pickled (the pickle would hold it in clear)")

    def _to_child(self) -> tuple[type[Secret], tuple[bytes]]:
        return Secret, (self.__key,)


def dumps_for_children(obj: object) -> bytes:
    """``obj`` pickled for clmagic's own worker processes, a :class:`Secret` in it included
    (with this pickler only: ``pickle.dumps`` still refuses). The pickle goes down a pipe to a
    child, never to a file."""
    import copyreg
    import io
    import pickle

    out = io.BytesIO()
    pickler = pickle.Pickler(out, pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = {**copyreg.dispatch_table, Secret: Secret._to_child}
    pickler.dump(obj)
    return out.getvalue()


def read_secret(environ: Mapping[str, str] | None = None) -> tuple[Secret | None, str]:
    """The team secret of ``environ`` (default: the process's environment, read as bytes from
    ``os.environb``), and what is wrong with it in one line ("" when nothing is): a blank one
    (empty or only whitespace) is refused (``None``: entries are not signed); one that is not
    valid UTF-8 is used as the bytes it holds. Blanks around it are not part of it. Never
    raises, so no traceback has a frame holding the bytes."""
    if environ is None:
        if not hasattr(os, "environb"):  # (Windows: the environment is text)
            return read_secret(os.environ)
        raw = os.environb.get(SECRET_VAR.encode())
    else:
        text = environ.get(SECRET_VAR)
        raw = None if text is None else text.encode("utf-8", "surrogateescape")
    if raw is None:
        return None, ""
    try:
        raw = raw.decode("utf-8").strip().encode("utf-8")  # as signatures always were
        problem = ""
    except UnicodeDecodeError:
        raw = raw.strip()
        problem = (f"{SECRET_VAR} is not valid UTF-8; it is used as the bytes it holds (every "
                   "machine that shares the cache must hold the same bytes)")
    if not raw:
        return None, f"{SECRET_VAR} is set but blank; refused: entries are not signed"
    return Secret(raw), problem
