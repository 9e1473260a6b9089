"""A bounded memo: a dict that keeps at most a given number of entries, the oldest dropped first
(insertion order). The callers hold their own lock where threads share one."""

from __future__ import annotations

from typing import TypeVar

__all__ = ["remember"]

K = TypeVar("K")
V = TypeVar("V")


def remember(memo: dict[K, V], key: K, value: V, limit: int) -> None:
    """``memo[key] = value``, first dropping the oldest entry when ``memo`` holds ``limit``."""
    if key not in memo and len(memo) >= limit:
        memo.pop(next(iter(memo)))
    memo[key] = value
