"""The warning channel: ``clmagic: warning: ...`` lines on stderr, each once per process when
asked, or held back for a caller that reports the problem in its own words.

Its own module at the ground floor (it was part of :mod:`clmagic.config`): the stores, the
build trip and the magics warn, and none of them needs the settings to do it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["warn", "warn_once", "held_warnings", "reset_warnings"]

#: the once-per-process messages already given (or held back)
_warned: set[str] = set()
#: where :func:`warn_once` puts its messages while :func:`held_warnings` is active
_held: list[str] | None = None


def warn(message: str) -> None:
    """Print ``clmagic: warning: <message>`` to stderr (every time: for per-cell news)."""
    print(f"clmagic: warning: {message}", file=sys.stderr)


def warn_once(message: str) -> None:
    """Print ``clmagic: warning: <message>`` to stderr, once per process and message (held
    back instead while :func:`held_warnings` is active)."""
    if message in _warned:
        return
    _warned.add(message)
    if _held is not None:
        _held.append(message)
        return
    print(f"clmagic: warning: {message}", file=sys.stderr)


@contextmanager
def held_warnings() -> Iterator[list[str]]:
    """Hold back the once-per-process warnings given inside the block (the list it yields), for
    a caller that reports the same problem in its own words, or prints them afterwards."""
    global _held
    outer, _held = _held, []
    try:
        yield _held
    finally:
        _held = outer


def reset_warnings() -> None:
    """Forget which warnings were shown (tests, or a new settings object)."""
    _warned.clear()
