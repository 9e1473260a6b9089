"""The one way clmagic starts a child process (the readout helper, the vet child, the demo's
processes, the workers of ``warm`` and sweeps): :func:`launch`.

Why one way: a child started as ``python -m clmagic…`` in the user's working folder has that
folder first on its ``sys.path``, so a ``json.py`` (or ``numpy.py``, ``pyopencl.py``...) there
runs inside clmagic's child — a readout helper that imported one built a different program than
the key said, and the next process got a HIT computing the wrong thing. ``PYTHONPATH``,
``PYTHONSTARTUP``, ``PYTHONHOME``, a user's ``sitecustomize``/``usercustomize`` do the same from
the environment. So every child is started here, and ``tests/test_launch.py`` fails on any other
way of starting one found in clmagic's source.

How: ``sys.executable -I`` (isolated: neither the current folder nor the script's on
``sys.path``, every ``PYTHON*`` variable ignored, no user site-packages) runs a tiny bootstrap
that sets the import path explicitly: the interpreter's own (its standard library and its
site-packages, which nothing of the user's can change), and each of :data:`NEEDED` (clmagic,
pyopencl, numpy, ...) pinned to the folder this process imported it from — read from its
module's ``__file__``, never from this process's ``sys.path``, which may hold ``''`` or the
user's folder. A pinned module is looked for in its folder only, so the child runs the same
clmagic as its parent (a checkout on ``PYTHONPATH`` included) and nothing beside it in that
folder shadows anything; the folders are also on the path, after the interpreter's own, for
what the installation lacks. It then runs the module as ``python -m`` would. The rest of the
environment reaches the child unchanged (``POCL_*``, ``OCL_ICD_VENDORS``, ``CLMAGIC_*``...).

``idle=True`` runs the child under the ``SCHED_IDLE`` policy (set by the bootstrap before it
imports anything; ``nice 19`` where the policy is not available): it then gets a CPU only when
nothing else wants one.

The length-prefixed frames of :func:`send` and :func:`receive` are how clmagic talks to its
helpers over their pipes.

This module is on the ground floor: it imports nothing of clmagic.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import IO

__all__ = ["launch", "child_path", "send", "receive", "NEEDED", "BOOTSTRAP"]

#: the top-level modules a child may import (clmagic and what it builds with); the folder each
#: was imported from by this process is added to the child's path
NEEDED = ("clmagic", "pyopencl", "numpy", "pytools", "platformdirs", "siphash24",
          "typing_extensions", "xxhash", "blake3", "redis")

#: what ``python -I -c`` runs: ``argv`` is [``-c``, idle flag, ``name=folder`` pins..., ``--``,
#: module, its arguments...]; nothing but built-in and frozen modules is imported before the
#: path is set
BOOTSTRAP = """\
import sys
from importlib.machinery import PathFinder
a = sys.argv
cut = a.index("--")
if a[1] == "idle":
    import os
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.nice(19)
        except OSError:
            pass
pins = dict(p.split("=", 1) for p in a[2:cut])
class Pinned:
    @staticmethod
    def find_spec(name, path=None, target=None):
        return PathFinder.find_spec(name, [pins[name]]) if name in pins else None
own = [p for p in sys.path if p]
sys.path[:] = own + [p for p in dict.fromkeys(pins.values()) if p not in own]
sys.meta_path.insert(0, Pinned)
sys.argv = a[cut + 1:]
import runpy
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""

_LEN = struct.Struct("<Q")


def _root(name: str) -> str | None:
    """The folder this process imported the top-level module ``name`` from (``None`` when it
    has not imported it, or it has no file: a built-in or a namespace package)."""
    module = sys.modules.get(name)
    file = getattr(module, "__file__", None)
    if not isinstance(file, str):
        return None
    folder = os.path.dirname(os.path.abspath(file))
    if os.path.basename(file).startswith("__init__."):
        folder = os.path.dirname(folder)  # a package: the folder above it
    return folder


def child_path() -> dict[str, str]:
    """Each of :data:`NEEDED` this process has imported → the folder it was imported from
    (what a child pins it to)."""
    pins: dict[str, str] = {}
    for name in NEEDED:
        root = _root(name)
        if root is not None:
            pins[name] = root
    return pins


def launch(module: str, args: Sequence[str] = (), *, idle: bool = False,
           stdin: int | IO[bytes] | None = None, stdout: int | IO[bytes] | None = None,
           stderr: int | IO[bytes] | None = None, env: Mapping[str, str] | None = None,
           cwd: str | None = None, detach: bool = False) -> subprocess.Popen[bytes]:
    """Start ``python -m module args...`` the one safe way (see the module's text): isolated,
    its path explicit, the environment ``env`` (default: this process's) otherwise as given,
    under ``SCHED_IDLE`` when ``idle``, in a session of its own when ``detach`` (the terminal's
    Ctrl-C does not reach it). ``stdin``/``stdout``/``stderr`` as for
    :class:`subprocess.Popen` (bytes). Raises ``OSError`` when it cannot start."""
    if not sys.executable:
        raise FileNotFoundError("this Python does not know its own executable")
    flags = ["-I"] + (["-B"] if sys.flags.dont_write_bytecode else [])
    pins = [f"{name}={root}" for name, root in child_path().items()]
    cmd = [sys.executable, *flags, "-c", BOOTSTRAP, "idle" if idle else "-", *pins, "--",
           module, *args]
    return subprocess.Popen(cmd, stdin=stdin, stdout=stdout, stderr=stderr,  # noqa: S603
                            env=dict(env) if env is not None else None, cwd=cwd,
                            close_fds=True, start_new_session=detach)


def send(pipe: IO[bytes], data: bytes) -> None:
    """Write one frame (its length, then ``data``) and flush it."""
    pipe.write(_LEN.pack(len(data)) + data)
    pipe.flush()


def receive(pipe: IO[bytes], limit: int = 1 << 34) -> bytes | None:
    """Read one frame; ``None`` at the end of the pipe, for a frame cut short, or one over
    ``limit`` bytes."""
    head = pipe.read(_LEN.size)
    if len(head) != _LEN.size:
        return None
    size = _LEN.unpack(head)[0]
    if size > limit:
        return None
    body = pipe.read(size)
    return body if len(body) == size else None
