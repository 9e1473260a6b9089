"""A launch's arguments as the checker's child gets them: :func:`capture` (in the user's
process) and :func:`payload` / :func:`read_payload` (the bytes between the two processes).

What is supported, and why the rest is refused in one line rather than guessed at:

- a ``cl.Buffer`` (or a ``pyopencl.array.Array`` at the start of its buffer): its contents are
  *read back* from the user's device (the user's queue finished first, the buffer itself never
  written) and the child makes a buffer of the same size and access flags from them;
- a ``cl.LocalMemory``: its size; ``None``: a null pointer;
- a numpy scalar (its bytes and dtype, as pyopencl would pass it) or a Python number (the
  child gives it the argument's own type, which Oclgrind always reports).

Images, samplers, pipes, SVM pointers and sub-buffers are refused: the child would have to copy
them in a form that changes what the kernel sees (an image's format and pitch, a sub-buffer's
offset into memory the kernel may also reach through its parent), and a check of another
program than the user's is worse than none.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl

from clmagic.errors import OptionsError

__all__ = ["Arg", "capture", "payload", "read_payload", "UNSUPPORTED"]

#: what the checker cannot copy, said once wherever one is met
UNSUPPORTED = ("%clcheck copies buffers, local memory, numpy scalars and numbers; images, "
               "samplers, pipes, SVM pointers and sub-buffers are not supported")

#: the memory flags a copy keeps: what the kernel may do with it (Oclgrind checks them)
_ACCESS = cl.mem_flags.READ_WRITE | cl.mem_flags.READ_ONLY | cl.mem_flags.WRITE_ONLY


@dataclass(frozen=True)
class Arg:
    """One argument: ``kind`` is ``buffer`` (``data`` its contents, ``flags`` its access),
    ``local`` (``size`` bytes), ``null``, ``scalar`` (``data`` its bytes, ``dtype`` numpy's
    name of it) or ``number`` (``value``, typed by the child from the kernel's signature)."""

    kind: str
    size: int = 0
    flags: int = 0
    dtype: str = ""
    value: float | int | None = None
    data: bytes = b""

    def head(self) -> dict[str, Any]:
        """The JSON-able part (the bytes go after the header)."""
        return {"kind": self.kind, "size": self.size, "flags": self.flags, "dtype": self.dtype,
                "value": self.value, "nbytes": len(self.data)}


def _refuse(i: int, what: str) -> OptionsError:
    return OptionsError(f"argument {i} is {what}: {UNSUPPORTED}")


def _buffer(i: int, buf: cl.Buffer, queue: cl.CommandQueue) -> Arg:
    info = cl.mem_info
    try:
        parent, offset = buf.get_info(info.ASSOCIATED_MEMOBJECT), buf.get_info(info.OFFSET)
    except cl.Error:
        parent, offset = None, 0
    if parent is not None or offset != 0:
        raise _refuse(i, "a sub-buffer")
    host = np.empty(int(buf.size), np.uint8)
    try:
        cl.enqueue_copy(queue, host, buf, is_blocking=True)
    except cl.Error as exc:
        raise OptionsError(f"argument {i}: its contents could not be read back from the "
                           f"device ({exc}); the checker copies every buffer in") from None
    return Arg("buffer", size=int(buf.size), flags=int(buf.flags) & _ACCESS,
               data=host.tobytes())


def _one(i: int, value: object, queue: cl.CommandQueue) -> Arg:
    if value is None:
        return Arg("null")
    if isinstance(value, cl.LocalMemory):
        return Arg("local", size=int(value.size))
    if isinstance(value, cl.Buffer):
        return _buffer(i, value, queue)
    for name in ("Image", "Sampler", "Pipe", "SVM", "SVMAllocation", "SVMPointer"):
        kind = getattr(cl, name, None)
        if isinstance(kind, type) and isinstance(value, kind):
            raise _refuse(i, f"a cl.{name}")
    base = getattr(value, "base_data", None)  # a pyopencl.array.Array
    if isinstance(base, cl.Buffer):
        if getattr(value, "offset", 0):
            raise _refuse(i, "an array that starts inside its buffer")
        return _buffer(i, base, queue)
    if isinstance(value, np.generic) or (isinstance(value, np.ndarray) and value.ndim == 0):
        arr = np.asarray(value)
        return Arg("scalar", dtype=arr.dtype.str if not arr.dtype.fields else "",
                   data=arr.tobytes())
    if isinstance(value, numbers.Real):
        return Arg("number", value=int(value) if isinstance(value, numbers.Integral)
                   else float(value))
    raise _refuse(i, f"a {type(value).__name__}")


def capture(queue: cl.CommandQueue, args: Sequence[object]) -> list[Arg]:
    """Each argument copied as the child needs it; the user's queue is finished first, so the
    contents are what the kernel would have read. Raises :class:`OptionsError` (one line) for
    an argument the checker cannot copy."""
    queue.finish()
    return [_one(i, value, queue) for i, value in enumerate(args)]


def payload(request: dict[str, Any], args: list[Arg]) -> bytes:
    """What the child reads: the request and each argument's head as one JSON line, then the
    arguments' bytes one after another."""
    head = json.dumps({**request, "args": [a.head() for a in args]}).encode() + b"\n"
    return head + b"".join(a.data for a in args)


def read_payload(raw: bytes) -> tuple[dict[str, Any], list[Arg]]:
    """The request and arguments of :func:`payload` (in the child)."""
    line, _, rest = raw.partition(b"\n")
    request = json.loads(line)
    args, at = [], 0
    for head in request.pop("args"):
        n = int(head["nbytes"])
        args.append(Arg(head["kind"], size=head["size"], flags=head["flags"],
                        dtype=head["dtype"], value=head["value"], data=rest[at:at + n]))
        at += n
    return request, args
