"""What a check found: :class:`Finding` (one distinct problem, said as a person says it) and
:class:`CheckReport` (every finding of one launch, and the launch itself).

Oclgrind reports each event: a race between 64 work-items on one counter is 189 messages, an
out-of-bounds write by the last work-item one. A finding is one *kind* of problem at one
*place* of the source on one *argument* (or memory space): the messages that share those are
counted into it (``times``), and the first one says who did it and keeps Oclgrind's own text.

An address is said as the argument and element it falls in. Oclgrind numbers its buffers in
the high bits of an address (``0x3000000000100`` is byte 256 of buffer 3); the checker asks
Oclgrind for each argument buffer's address with a probe kernel in the same context
(:mod:`clmagic.cache.checker.child`), so the mapping is Oclgrind's own, not a guess at its
layout: an address belongs to the buffer whose range it is nearest (one past the end is
still that buffer's, an index below zero too).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

from clmagic._format import count_of
from clmagic.cache.checker.oclgrind_log import Message, Place

__all__ = ["Finding", "CheckReport", "BufferInfo", "findings_of", "KINDS", "ORDER"]

#: each kind of finding, by the words that start Oclgrind's headline (lower case)
KINDS: tuple[tuple[str, str], ...] = (
    ("invalid write", "invalid write"),
    ("invalid read", "invalid read"),
    ("read-write data race", "data race"),
    ("write-write data race", "data race"),
    ("uniform", "data race"),
    ("uninitialized", "uninitialised value"),
    ("controlflow depends on uninitialized", "uninitialised value"),
    ("instruction depends on an uninitialized", "uninitialised value"),
    ("work-group divergence", "barrier divergence"),
    ("work-item finished without", "barrier divergence"),
    ("unaligned", "unaligned access"),
    ("oclgrind - opencl runtime error", "launch refused"),
)


#: the order findings are shown in: what breaks memory first, then what follows from it (an
#: uninitialised value is often a race's or a stray read's consequence); first met within a kind
ORDER = ("invalid write", "invalid read", "data race", "barrier divergence", "unaligned access",
         "uninitialised value", "launch refused")


@dataclass(frozen=True)
class BufferInfo:
    """One buffer or local-memory argument as the checker's child set it: its index and name,
    its element type (``float*``), the element's size in bytes, its size, where Oclgrind put it
    and in which memory (``global``, ``constant``, ``local``)."""

    index: int
    name: str
    type_name: str
    element: int
    nbytes: int
    address: int
    space: str = "global"


@dataclass(frozen=True)
class Finding:
    """One distinct problem: its ``kind`` (``invalid write``, ``data race``, ``uninitialised
    value``, ``barrier divergence``, ...), ``what`` happened in words, by ``who`` (the first
    work-item or group Oclgrind named), ``where`` in the cell (``line``, ``column``; the other
    line of a race in ``other_line``), the argument it concerns (``None``: local or private
    memory, or none), how many of Oclgrind's messages it stands for, and the first of them."""

    kind: str
    what: str
    who: str
    line: int | None
    column: int | None
    argument: str | None
    times: int
    message: str
    other_line: int | None = None


@dataclass(frozen=True)
class CheckReport:
    """One launch checked under Oclgrind: the kernel and its sizes, the distinct findings in
    the order first met, and how the check ended. ``timed_out``: the child was killed after
    ``seconds`` (the findings are those reported until then); ``capped``: Oclgrind stopped
    reporting (its limit of messages), so more may be hidden. ``source`` and ``line_offset``
    are the cell's, for showing each finding's line."""

    kernel: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    findings: tuple[Finding, ...]
    seconds: float
    device: str = "Oclgrind"
    timed_out: bool = False
    capped: bool = False
    source: str | None = field(default=None, repr=False)
    line_offset: int = 0
    #: how the Oclgrind build went in the child (``MISS``, ``HIT``, ...): an entry like any
    built: str = ""

    @property
    def work_items(self) -> int:
        n = 1
        for v in self.global_size:
            n *= v
        return n

    @property
    def clean(self) -> bool:
        """Nothing found and the launch ran to its end."""
        return not self.findings and not self.timed_out

    @property
    def summary(self) -> str:
        """``2 problems: 1 invalid write, 1 data race``; ``no problems found in 64
        work-items``; a timeout says so first."""
        kinds = Counter(f.kind for f in self.findings)
        said = ", ".join(f"{n} {kind}{'s' if n > 1 else ''}" for kind, n in kinds.items())
        found = (f"{count_of(len(self.findings), 'problem')}: {said}" if self.findings
                 else f"no problems found in {count_of(self.work_items, 'work-item')}")
        if self.timed_out:
            so_far = f"{count_of(len(self.findings), 'problem')} so far" if self.findings \
                else "no problems so far"
            return (f"stopped after {self.seconds:.0f} s: the launch of "
                    f"{count_of(self.work_items, 'work-item')} did not finish under Oclgrind "
                    f"(the checker was killed); {so_far}")
        return found + (" (Oclgrind stopped reporting: more may be hidden)" if self.capped
                        else "")

    def __str__(self) -> str:
        return f"{self.kernel}: {self.summary}"


def _kind(headline: str) -> str:
    low = headline.lower()
    return next((kind for start, kind in KINDS if low.startswith(start)), "other")


def _ids(ids: tuple[int, ...] | None, dims: int) -> str:
    if ids is None:
        return "?"
    ids = ids[:max(dims, 1)]
    return str(ids[0]) if len(ids) == 1 else f"({', '.join(map(str, ids))})"


def _who(msg: Message, dims: int) -> str:
    items = [p for p in msg.places if p.global_id is not None]
    if not items:
        group = next((p.group for p in msg.places if p.group is not None), None)
        said = f"work-group {_ids(group, dims)}" if group is not None else ""
        if msg.reached is not None:
            said += f": {msg.reached[0]} of {msg.reached[1]} work-items reached the barrier"
        return said
    names = " and ".join(dict.fromkeys(_ids(p.global_id, dims) for p in items))
    groups = dict.fromkeys(_ids(p.group, dims) for p in items)
    word = "work-items" if " and " in names else "work-item"
    return f"{word} {names} (group{'s' if len(groups) > 1 else ''} {', '.join(groups)})"


def _buffer(address: int, space: str, buffers: tuple[BufferInfo, ...]) -> BufferInfo | None:
    """The argument of that memory whose byte range ``address`` is nearest (inside it:
    distance 0)."""
    def distance(b: BufferInfo) -> int:
        if address < b.address:
            return b.address - address
        return max(address - (b.address + b.nbytes) + 1, 0)

    near = min((b for b in buffers if (b.space == "local") == (space == "local")),
               key=distance, default=None)
    return near if near is not None and distance(near) < (1 << 32) else None


def _on(msg: Message, buffers: tuple[BufferInfo, ...]) -> tuple[str, str | None]:
    """Where the access went, in words, and the argument's name (``None``: not an argument)."""
    if msg.address is None or msg.space is None:
        return "", None
    if msg.space in ("global", "constant", "local"):
        buf = _buffer(msg.address, msg.space, buffers)
        if buf is not None:
            offset = msg.address - buf.address
            index, n = offset // buf.element, buf.nbytes // buf.element
            if offset >= buf.nbytes:
                return f"past the end of argument `{buf.name}` (index {index} of {n})", buf.name
            if offset < 0:
                return (f"before the start of argument `{buf.name}` (index {index} of {n})",
                        buf.name)
            return f"argument `{buf.name}` (index {index} of {n})", buf.name
    low = msg.address & ((1 << 48) - 1)  # within Oclgrind's buffer (its number is above)
    if msg.space == "local":
        return f"a __local array of the kernel (byte {low})", None
    return f"{msg.space} memory (byte {low} of a buffer that is no argument)", None


def _what(kind: str, msg: Message, on: str) -> str:
    size = f" of {count_of(msg.size, 'byte')}" if msg.size else ""
    if kind in ("invalid write", "invalid read"):
        where = on if on.startswith(("past", "before")) else f"to {on}" if on else ""
        if "read-only" in msg.headline or "write-only" in msg.headline or "mapped" in msg.headline:
            return msg.headline[0].lower() + msg.headline[1:]
        return f"{kind}{size} {where}".strip()
    if kind == "data race":  # read-write and write-write at the same lines are one race
        return f"data race on {on}" if on else "data race"
    if kind == "uninitialised value":
        if msg.headline.lower().startswith("uninitialized value written"):
            return f"uninitialised value written to {on}" if on else "uninitialised value written"
        return msg.headline.replace("uninitialized", "uninitialised")
    if kind == "barrier divergence":
        return "work-group divergence at a barrier (not every work-item of the group reached it)"
    return msg.headline


def _key(kind: str, argument: str | None, msg: Message) -> tuple[object, ...]:
    """What makes two messages one finding: the kind, the argument (or memory space) and the
    place; a race's lines without their columns (its load and its store are one race)."""
    if kind == "data race":
        place: object = frozenset(p.line for p in msg.places)
    else:
        place = (msg.places[0].line, msg.places[0].column) if msg.places else None
    return (kind, argument, msg.space, place, msg.headline if kind == "other" else "")


def findings_of(msgs: list[Message], buffers: tuple[BufferInfo, ...], dims: int,
                line_offset: int = 0) -> tuple[Finding, ...]:
    """The distinct findings of Oclgrind's messages, in the order first met, each counting the
    messages it stands for; lines shifted by ``line_offset`` to the cell's. An invalid read
    gives an undefined value, which Oclgrind then reports again where it is stored: such an
    uninitialised value at the line of an invalid read is that read's doing, not a finding."""
    seen: dict[tuple[object, ...], Finding] = {}
    counts: Counter[tuple[object, ...]] = Counter()
    for msg in msgs:
        kind = _kind(msg.headline)
        on, argument = _on(msg, buffers)
        key = _key(kind, argument, msg)
        counts[key] += 1
        if key in seen:
            continue
        first = msg.places[0] if msg.places else Place()
        other = next((p.line for p in msg.places[1:] if p.line != first.line), None)
        seen[key] = Finding(
            kind=kind, what=_what(kind, msg, on), who=_who(msg, dims),
            line=None if first.line is None else first.line + line_offset, column=first.column,
            argument=argument, times=0, message=msg.text,
            other_line=None if other is None else other + line_offset)
    read_at = {f.line for f in seen.values() if f.kind == "invalid read"}
    kept = [dataclasses.replace(f, times=counts[k]) for k, f in seen.items()
            if not (f.kind == "uninitialised value" and f.line in read_at)]
    return tuple(sorted(kept, key=lambda f: ORDER.index(f.kind) if f.kind in ORDER
                        else len(ORDER)))
