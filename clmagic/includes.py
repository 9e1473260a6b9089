"""The headers a source ``#include``\\ s, found where a compiler could find them, for the key.

Drivers do not agree on the search order (POCL looks in the working directory first even for
``<x.h>``; Oclgrind looks there only for ``"x.h"``), so for every include this module takes
*every* existing candidate, in a fixed order:

1. the folder of the including file (for the cell: its working directory),
2. each ``-I`` folder of the options, in order (relative ones against the working directory,
   as the driver resolves them),
3. the working directory.

Each file is read once (cycles and repeated includes are harmless), recursively. Includes inside
comments are ignored; includes inside ``#if 0`` are not (a superset costs at most a MISS, never a
stale binary). A header found nowhere is left to the compiler, whose error is shown.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Iterable

from .errors import ClmagicError


class Unkeyable(ClmagicError):
    """The includes go past what a key can cover: the build must bypass the cache."""

__all__ = ["find_headers", "strip_comments", "MAX_HEADERS", "MAX_HEADER_BYTES", "Unkeyable"]

MAX_HEADERS = 4096
MAX_HEADER_BYTES = 64 << 20

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?:"([^"\n]+)"|<([^>\n]+)>)', re.MULTILINE)
_TOKENS = re.compile(
    r'//[^\n]*|/\*.*?(?:\*/|\Z)|"(?:\\.|[^"\\\n])*"?|\'(?:\\.|[^\'\\\n])*\'?', re.DOTALL
)


def strip_comments(text: str) -> str:
    """``text`` with ``//`` and ``/* */`` comments blanked (newlines kept, so lines stay
    lines); string and character literals are left alone."""
    text = text.replace("\\\n", "")

    def repl(m: re.Match[str]) -> str:
        s = m.group(0)
        if s.startswith("/*"):
            return " " + "\n" * s.count("\n")
        if s.startswith("//"):
            return " "
        return s

    return _TOKENS.sub(repl, text)


def includes_of(text: str) -> list[str]:
    """The include spellings of ``text``, in order: ``"x.h"`` or ``<x.h>``."""
    if "include" not in text:
        return []  # the common case, without the comment scan
    return [f'"{q}"' if q else f"<{a}>" for q, a in _INCLUDE.findall(strip_comments(text))]


def _read(path: str) -> bytes | None:
    try:
        if not os.path.isfile(path):
            return None
        with open(path, "rb") as fh:
            return fh.read(MAX_HEADER_BYTES + 1)
    except OSError:
        return None


def find_headers(
    source: str | bytes,
    include_dirs: Iterable[str] = (),
    cwd: str | None = None,
) -> list[tuple[str, bytes]]:
    """Every header ``source`` could include, as ``(name, contents)`` in the order met.

    ``name`` is the spelling and the search slot (``"x.h" @.`` for the including file's
    folder, ``"x.h" @-Iinc`` for an ``-I`` folder as written, ``"x.h" @cwd``), so the key does
    not depend on where the project lives, only on what the compiler can read.
    """
    cwd = cwd or os.getcwd()
    slots = [(f"-I{d}", os.path.join(cwd, d)) for d in include_dirs]
    text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
    found: list[tuple[str, bytes]] = []
    seen: set[str] = set()
    todo: deque[tuple[str, str]] = deque([(text, cwd)])
    while todo:
        body, folder = todo.popleft()
        for spelling in includes_of(body):
            rel = spelling[1:-1]
            for slot, base in [(".", folder), *slots, ("cwd", cwd)]:
                path = os.path.normpath(os.path.join(base, rel))
                real = os.path.realpath(path)
                if real in seen:
                    continue
                data = _read(path)
                if data is None:
                    continue
                if len(data) > MAX_HEADER_BYTES or len(found) >= MAX_HEADERS:
                    # a key that left part of the headers out could serve a stale binary
                    raise Unkeyable(
                        f"the includes go past what a key can cover ({MAX_HEADERS} headers of "
                        f"{MAX_HEADER_BYTES >> 20} MiB at most; {rel})"
                    )
                seen.add(real)
                found.append((f"{spelling} @{slot}", data))
                todo.append((data.decode("utf-8", "replace"), os.path.dirname(path)))
    return found
