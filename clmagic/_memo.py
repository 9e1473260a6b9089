"""A bounded memo: an ordered dict that keeps at most a given number of entries, the oldest
dropped first (insertion order). The callers hold their own lock where threads share one.

An :class:`~collections.OrderedDict`, not a plain dict: dropping a plain dict's oldest entry
with ``next(iter(d))`` walks every slot already deleted at the front of its table, so a full
memo paid O(n) per entry remembered (1.2 ms a build in issue 23's profile); an ordered dict's
``popitem(last=False)`` unlinks the oldest in O(1).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

__all__ = ["remember"]

K = TypeVar("K")
V = TypeVar("V")


def remember(memo: OrderedDict[K, V], key: K, value: V, limit: int) -> None:
    """``memo[key] = value``, first dropping the oldest entries while ``memo`` holds ``limit``
    (a key already there keeps its place)."""
    if key not in memo:
        while memo and len(memo) >= max(limit, 1):
            memo.popitem(last=False)
    memo[key] = value
