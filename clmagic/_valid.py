"""The one contract for reading stored data: every value read back from an entry file, a bundle
or SQLite row, a Redis hash, the manifest, a sweep's results, the lifetime counters or the
stored kernel facts is a value of the type and range its reader promises, or
:class:`~clmagic.errors.CorruptEntry` saying what is wrong, never another exception.

Why one reader: ad-hoc ``int()`` / ``float()`` calls each miss another case (``float`` of a
401-digit integer raises ``OverflowError``, ``int`` of a 5000-digit text ``ValueError``, of
infinity ``OverflowError``, ``int("²")`` a ``ValueError`` though ``"²".isdigit()``; a
deeply nested JSON value ``RecursionError``). The parsers read through :func:`load_json`,
:class:`Fields` and the value checks here, and each is fuzzed (``tests/store/test_fuzz_*``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Final

from clmagic.errors import CorruptEntry

__all__ = ["Fields", "REQUIRED", "MAX_WHOLE", "MAX_NUMBER", "MAX_TEXT", "load_json", "whole",
           "number", "text", "texts", "digits", "spelled_number", "count_or", "pid_of", "MAX_PID"]

#: the largest whole number stored data may hold (sizes, counts: a signed 64-bit integer)
MAX_WHOLE: Final = (1 << 63) - 1
#: the largest magnitude of a stored float (times, durations); beyond it nothing is right
MAX_NUMBER: Final = 1e300
#: the longest text a stored field may hold unless its reader says otherwise
MAX_TEXT: Final = 1 << 20
#: the largest process id (``pid_t`` is a signed 32-bit integer: ``os.kill`` of more overflows)
MAX_PID: Final = (1 << 31) - 1
#: the most digits a number written as text may have (a 64-bit one has 19)
_MAX_DIGITS = 20


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: a field without a default: its absence is damage
REQUIRED: Final[Any] = _Required()


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class _NotFinite(ValueError):
    pass


def _finite(spelled: str) -> float:
    value = float(spelled)
    if not math.isfinite(value):  # 1e999
        raise _NotFinite(spelled[:20])
    return value


#: one decoder: no NaN or infinity is read, a 401-digit float is refused as infinite
_JSON = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def load_json(raw: bytes | bytearray | str, what: str, limit: int = MAX_TEXT) -> Any:
    """The JSON value of ``raw``, at most ``limit`` bytes of UTF-8; :class:`CorruptEntry`
    for anything else (too long, not UTF-8, not JSON, NaN or infinity, nested too deeply)."""
    if not isinstance(raw, bytes | bytearray | str):
        raise CorruptEntry(f"{what} is not text")
    if len(raw) > limit:
        raise CorruptEntry(f"{what} of {len(raw)} bytes is over the {limit} limit")
    try:
        return _JSON.decode(raw if isinstance(raw, str) else bytes(raw).decode("utf-8"))
    except _NotFinite:
        raise CorruptEntry(f"{what} holds NaN or infinity") from None
    except (UnicodeDecodeError, ValueError, TypeError) as exc:
        raise CorruptEntry(f"{what} is not valid JSON: {str(exc)[:80]}") from None
    except RecursionError:
        raise CorruptEntry(f"{what} is nested too deeply") from None


def whole(value: object, what: str, low: int = 0, high: int = MAX_WHOLE) -> int:
    """``value`` as a whole number from ``low`` to ``high``: an ``int`` (not a ``bool``), or
    a text of at most 20 ASCII digits (a Redis field, a file name's part)."""
    if isinstance(value, bytes | bytearray | str):
        value = digits(value, what)
    if not isinstance(value, int) or isinstance(value, bool):
        raise CorruptEntry(f"{what} is not a whole number")
    if not low <= value <= high:
        raise CorruptEntry(f"{what} is out of range")
    return value


def number(value: object, what: str, low: float = -MAX_NUMBER,
           high: float = MAX_NUMBER) -> float:
    """``value`` as a finite float from ``low`` to ``high`` (an ``int`` is compared before it
    is converted, so a 401-digit one is out of range, not an ``OverflowError``). NaN or
    infinity is told apart from a finite number out of range: the one line says which."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise CorruptEntry(f"{what} is not a number")
    if isinstance(value, float) and not math.isfinite(value):  # the words load_json uses
        raise CorruptEntry(f"{what} is NaN or infinity")
    if not low <= value <= high:
        raise CorruptEntry(f"{what} is out of range")
    return float(value)


def text(value: object, what: str, limit: int = MAX_TEXT) -> str:
    """``value`` as a text of at most ``limit`` characters."""
    if not isinstance(value, str):
        raise CorruptEntry(f"{what} is not text")
    if len(value) > limit:
        raise CorruptEntry(f"{what} is over {limit} characters")
    return value


def texts(value: object, what: str, limit: int = MAX_TEXT) -> tuple[str, ...]:
    """``value`` as a list of texts (at most ``limit`` of them, each at most ``limit`` long)."""
    if not isinstance(value, list | tuple) or len(value) > limit:
        raise CorruptEntry(f"{what} is not a list of texts")
    return tuple(text(v, what, limit) for v in value)


def digits(value: bytes | bytearray | str, what: str) -> int:
    """A whole number written in ASCII digits (at most 20: a 64-bit one has 19); ``"²"`` or
    ``"٣"`` (digits to ``str.isdigit``) or a 5000-digit text are damage."""
    raw = value.decode("ascii", "replace") if isinstance(value, bytes | bytearray) else value
    if not (0 < len(raw) <= _MAX_DIGITS and raw.isascii() and raw.isdigit()):
        raise CorruptEntry(f"{what} is not a whole number")
    return int(raw)


def spelled_number(value: object, what: str) -> float:
    """A number written as text (a Redis field): at most 32 ASCII characters that ``float``
    reads, finite and in range."""
    raw = value.decode("ascii", "replace") if isinstance(value, bytes | bytearray) else value
    if not isinstance(raw, str) or not (0 < len(raw) <= 32 and raw.isascii()):
        raise CorruptEntry(f"{what} is not a number")
    try:
        parsed = float(raw)
    except ValueError:
        raise CorruptEntry(f"{what} is not a number") from None
    return number(parsed, what)


def count_or(value: object, default: int = 0) -> int:
    """:func:`whole` of a count kept beside an entry (its hits, its size), ``default`` where
    it is damaged: only the count is lost, never the entry."""
    try:
        return whole(value, "a count")
    except CorruptEntry:
        return default


def pid_of(spelled: str) -> int | None:
    """The process id a file's name spells (a temp file's writer, a counter file's owner):
    ASCII digits from 1 to :data:`MAX_PID`, else ``None`` (``"²"``, ``"-1"``, 5000 digits)."""
    try:
        return whole(spelled, "a process id", 1, MAX_PID)
    except CorruptEntry:
        return None


class Fields:
    """Typed fields of one stored record: a decoded JSON object, or a row gathered into a
    dict. Each read returns its type or raises :class:`CorruptEntry` naming the field; a
    field that is absent takes its ``default`` (:data:`REQUIRED`: absence is damage)."""

    def __init__(self, doc: object, what: str) -> None:
        if not isinstance(doc, Mapping):
            raise CorruptEntry(f"{what} is not an object")
        self.doc: Mapping[Any, Any] = doc
        self.what = what

    def _get(self, name: str, default: Any) -> Any:
        if name in self.doc:
            return self.doc[name]
        if default is REQUIRED:
            raise CorruptEntry(f"{self.what}: field {name!r} missing")
        return default

    def _name(self, name: str) -> str:
        return f"{self.what}: field {name!r}"

    def whole(self, name: str, default: Any = REQUIRED, low: int = 0,
              high: int = MAX_WHOLE) -> int:
        value = self._get(name, default)
        return value if value is default else whole(value, self._name(name), low, high)

    def number(self, name: str, default: Any = REQUIRED, low: float = -MAX_NUMBER,
               high: float = MAX_NUMBER) -> float:
        value = self._get(name, default)
        return value if value is default else number(value, self._name(name), low, high)

    def text(self, name: str, default: Any = REQUIRED, limit: int = MAX_TEXT) -> str:
        value = self._get(name, default)
        return value if value is default else text(value, self._name(name), limit)

    def texts(self, name: str, default: Any = REQUIRED, limit: int = MAX_TEXT
              ) -> tuple[str, ...]:
        value = self._get(name, default)
        return value if value is default else texts(value, self._name(name), limit)

    def object(self, name: str, default: Any = REQUIRED) -> Mapping[str, Any]:
        value = self._get(name, default)
        if value is not default and not isinstance(value, Mapping):
            raise CorruptEntry(f"{self._name(name)} is not an object")
        return value  # type: ignore[no-any-return]
