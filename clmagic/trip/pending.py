"""A save under way, as its result's reader sees it: :class:`Pending` (its own module: the
saver, the save and the results all name it, and it needs none of them)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Pending", "settle_after_fork"]

T = TypeVar("T")
_UNSETTLED: weakref.WeakSet[Pending[Any]] = weakref.WeakSet()


class Pending(Generic[T]):
    """A save under way: ``value`` as it stands (no waiting), :meth:`wait` for the final one.
    ``forked(value)``: the final value in a child forked before it settled (the parent's job
    settles the parent's copy only); default: the value as it stands."""

    def __init__(self, value: T, forked: Callable[[T], T] | None = None):
        self.value = value
        self._forked = forked
        self._done = threading.Event()
        _UNSETTLED.add(self)

    def settle(self, value: T) -> None:
        self.value = value
        self._done.set()
        _UNSETTLED.discard(self)

    def reset_after_fork(self) -> None:
        """In a forked child: settled now, with ``forked(value)``."""
        self._done = threading.Event()  # the parent's may have been mid-set: its lock held
        self.settle(self._forked(self.value) if self._forked else self.value)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self) -> T:
        self._done.wait()
        return self.value


def settle_after_fork() -> None:
    """In a forked child: every save still under way in the parent is settled here (its
    ``forked`` value: the parent's job settles the parent's copy only)."""
    for pending in list(_UNSETTLED):
        pending.reset_after_fork()
