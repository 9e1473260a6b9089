"""An entry's kernel facts as a HIT hands them on: converted from the stored JSON only when
someone reads them (:func:`~clmagic.opencl.facts.facts_from_json` takes about 7 µs a kernel:
1.3 ms for a 180-kernel program, most of what a HIT of it cost clmagic, though a library or
hook HIT seldom looks at them)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from clmagic.opencl.facts import KernelFacts, facts_from_json

__all__ = ["StoredFacts", "stored_facts"]


class StoredFacts(Mapping[str, KernelFacts]):
    """The facts of an entry's JSON (its text, or the mapping of an entry saved before: as
    :func:`facts_from_json` reads it), made on first use, once."""

    def __init__(self, raw: str | Mapping[str, Any]) -> None:
        self._raw = raw
        self._facts: dict[str, KernelFacts] | None = None
        self._lock = threading.Lock()

    def _made(self) -> dict[str, KernelFacts]:
        facts = self._facts
        if facts is None:
            with self._lock:
                if self._facts is None:
                    self._facts = facts_from_json(self._raw) or {}
                facts = self._facts
        return facts

    def __getitem__(self, name: str) -> KernelFacts:
        return self._made()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._made())

    def __len__(self) -> int:
        return len(self._made())

    def __repr__(self) -> str:
        return f"StoredFacts({self._made()!r})"


def stored_facts(raw: object) -> Mapping[str, KernelFacts] | None:
    """What :func:`facts_from_json` would give for ``raw``, made when first read (``None``
    where the entry keeps no facts, at once)."""
    return StoredFacts(raw) if isinstance(raw, str | Mapping) else None
